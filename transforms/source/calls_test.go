package source

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/passert"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
	"github.com/topk-dev/topk/internal/pubsubx"
	"github.com/topk-dev/topk/schemas"
)

func TestCallEnd(t *testing.T) {
	at := func(s float64) time.Time { return time.UnixMilli(int64(s * 1000)) }
	ms := func(s float64) int64 { return int64(s * 1000) }
	const sec = time.Second
	for _, tt := range []struct {
		name                  string
		start                 time.Time
		wm                    int64
		bucket, slack, bundle time.Duration
		end                   time.Time
		due                   bool
	}{
		{"no bucket: every call BundleTime", at(12.345), ms(12.345), 0, 0, sec, at(13.345), true},
		{"wall-clock watermark: to the next boundary", at(12.345), ms(12.345), 10 * sec, 0, sec, at(20), false},
		{"on a boundary: to the next one", at(20), ms(20), 10 * sec, 0, sec, at(30), false},
		{"slack: nothing closes before boundary + slack", at(11), ms(8), 10 * sec, 2 * sec, sec, at(12), false},
		{"a close is due: BundleTime", at(12.5), ms(8), 10 * sec, 2 * sec, sec, at(13.5), true},
		{"closed just now: long again", at(13.5), ms(10.2), 10 * sec, 2 * sec, sec, at(22), false},
		{"backlog: the watermark far behind, always due", at(100), ms(8), 10 * sec, 2 * sec, sec, at(101), true},
		{"watermark ahead of the clock: one bucket at most", at(20), ms(50), 10 * sec, 2 * sec, sec, at(30), false},
		{"no watermark yet", at(20), -9223372036854775, 10 * sec, 2 * sec, sec, at(21), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			end, due := callEnd(tt.start, tt.wm, tt.bucket, tt.slack, tt.bundle)
			if !end.Equal(tt.end) || due != tt.due {
				t.Errorf("callEnd = %v, %v; want %v, %v", end.UnixMilli(), due, tt.end.UnixMilli(), tt.due)
			}
		})
	}
}

// A call is full after maxCallBytes only once it has run BundleTime: at
// high rates calls are as long as they were before calls followed buckets.
func TestCallFull(t *testing.T) {
	start := time.Unix(100, 0)
	for _, tt := range []struct {
		after time.Duration
		bytes int
		want  bool
	}{
		{2 * time.Second, maxCallBytes - 1, false},
		{500 * time.Millisecond, maxCallBytes, false},
		{time.Second, maxCallBytes, true},
		{3 * time.Second, 2 * maxCallBytes, true},
	} {
		if got := full(start, start.Add(tt.after), tt.bytes, time.Second); got != tt.want {
			t.Errorf("full after %v with %d bytes = %v, want %v", tt.after, tt.bytes, got, tt.want)
		}
	}
}

// TestSyntheticCallsFollowBuckets drives the synthetic reader call by call
// as a runner would (checkpoint, resume after the delay it asks for) with
// 100 ms buckets: every call's beacons lie in one bucket, and a call that
// checkpoints returns only once the wall clock (its watermark) has passed
// that bucket's end, so the bucket closes at the checkpoint. With calls of
// BundleTime the beacons of most calls straddle a boundary.
func TestSyntheticCallsFollowBuckets(t *testing.T) {
	const bucket = 100 * time.Millisecond
	spec, err := ParseSpec("synthetic:rate=20000,duration=700ms,beacon=20,items=1000")
	if err != nil {
		t.Fatal(err)
	}
	fn := &syntheticFn{Spec: spec.withDefaults().Synthetic, BundleTime: time.Second, Bucket: bucket}
	if err := fn.Setup(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := fn.CreateInitialRestriction(nil)
	events, calls := 0, 0
	buckets := map[int64]bool{}
	for {
		calls++
		if calls > 100 {
			t.Fatal("more than 100 calls")
		}
		rt := fn.CreateTracker(r)
		var lo, hi int64 = -1, -1
		cont, err := fn.ProcessElement(ctx, nil, rt, nil, func(et beam.EventTime, data []byte) {
			ms := int64(et)
			if lo < 0 || ms < lo {
				lo = ms
			}
			hi = max(hi, ms)
			var b schemas.Beacon
			if err := schemas.UnmarshalBeacon(data, &b); err != nil {
				t.Fatal(err)
			}
			events += len(b.Events)
		})
		returned := time.Now().UnixMilli()
		if err != nil {
			t.Fatal(err)
		}
		if lo >= 0 {
			b := floorMs(lo, bucket.Milliseconds())
			if floorMs(hi, bucket.Milliseconds()) != b {
				t.Errorf("call %d: beacons from %d to %d span two buckets", calls, lo, hi)
			}
			if buckets[b] {
				t.Errorf("call %d: bucket %d already had a call", calls, b)
			}
			buckets[b] = true
			if cont.ShouldResume() && returned < b+bucket.Milliseconds() {
				t.Errorf("call %d checkpointed at %d, before its bucket's end %d", calls, returned, b+bucket.Milliseconds())
			}
		}
		if !cont.ShouldResume() {
			break
		}
		_, res, _ := rt.TrySplit(0)
		if res == nil {
			break
		}
		r = res.(streamRestriction)
		time.Sleep(cont.ResumeDelay())
	}
	if events != 14000 {
		t.Errorf("%d events; want 14000", events)
	}
	// 700 ms of 100 ms buckets: 7 or 8 buckets (the stream starts
	// mid-bucket; more on a loaded machine, where the generator falls
	// behind and catches up late), each one call, plus at most the call
	// that finds the stream's end.
	if len(buckets) < 7 || calls > len(buckets)+2 {
		t.Errorf("%d calls over %d buckets", calls, len(buckets))
	}
}

// TestPubsubLongCall: a Pub/Sub call whose checkpoint cannot close a bucket
// does not end at an empty pull but pulls on until a close is due, so its
// messages reach the pre-aggregation in one flush; a call with a close due
// checkpoints at the empty pull, as every call did before.
func TestPubsubLongCall(t *testing.T) {
	srv := pubsubx.StartEmbedded()
	defer srv.Close()
	c, topic, sub := testSub(t, srv.Addr)
	ctx := context.Background()
	// A long call ends 1-2 s after it starts, a short one at its first
	// empty pull: time enough for the three pulls of these 7 messages on
	// a loaded machine.
	const bucket, slack = time.Second, time.Second
	fn := &pullFn{Subscription: sub, Endpoint: srv.Addr, MaxMessages: 3, BundleTime: 5 * time.Second, Bucket: bucket, Slack: slack}
	if err := fn.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	defer fn.Teardown()
	if fn.ackDeadline != 10*time.Second { // testSub's: long calls end within a third of it
		t.Errorf("ack deadline %v; want the subscription's 10s", fn.ackDeadline)
	}
	var msgs []*pb.PubsubMessage
	for i := range 7 {
		data, _ := testBeacon(t, i, 2)
		msgs = append(msgs, &pb.PubsubMessage{Data: data})
	}

	for _, long := range []bool{true, false} {
		publish(t, c, topic, msgs)
		start := time.Now()
		wm := start.UnixMilli() // the boundary after it is not closed yet
		if !long {
			wm -= time.Hour.Milliseconds() // far behind: a close is due
		}
		we := fn.CreateWatermarkEstimator(wm)
		rt := newStreamTracker(streamRestriction{End: unbounded})
		n := 0
		cont, err := fn.ProcessElement(ctx, we, rt, nil, func(beam.EventTime, []byte) { n++ })
		if err != nil {
			t.Fatal(err)
		}
		end, due := callEnd(start, wm, bucket, slack, fn.BundleTime)
		if due == long {
			t.Fatalf("long %v: callEnd due %v", long, due)
		}
		if n != len(msgs) {
			t.Errorf("long %v: %d messages in the call; want %d", long, n, len(msgs))
		}
		if long {
			if time.Now().Before(end) || cont.ResumeDelay() != 0 {
				t.Errorf("long call returned %v before its end (resume in %v)", time.Until(end), cont.ResumeDelay())
			}
		} else if cont.ResumeDelay() != idleResume {
			t.Errorf("call with a close due: resume in %v; want %v (checkpoint at the empty pull)", cont.ResumeDelay(), idleResume)
		}
		// The next call acks them (the residual carries the ack ids).
		_, res, _ := rt.TrySplit(0)
		fn.ack(ctx, res.(streamRestriction).Acks)
	}
}

// TestPubsubLongCallsNoLog runs the Pub/Sub reader's long calls through
// Prism without the recovery log, where a call's messages are acked only
// when the next call starts. Beacons are published in a trickle, stamped
// with their publish time, and read with a 30 s bucket, so most calls
// cannot close a bucket and run long; the subscription's ack deadline is
// 10 s.
//
//   - "in time": every beacon arrives exactly once and every message is
//     acked once, over 13 s of publishing: a call that ran to its bucket's
//     end (up to 30 s) would hold its messages past their deadline and
//     Pub/Sub would deliver them again (the call's bound, a third of the
//     deadline, is what this checks).
//   - "failed bundle": a bundle failing midway ends the job; the messages
//     of the calls committed before it are acked, the failed call's are
//     not, and a second run gets exactly the unacked ones: nothing is lost.
func TestPubsubLongCallsNoLog(t *testing.T) {
	if testing.Short() {
		t.Skip("publishes for 13 s and waits out a 10 s ack deadline")
	}
	opts := func(addr string) Options {
		return Options{PubsubEndpoint: addr, MaxMessages: 10, BundleTime: 200 * time.Millisecond, Bucket: 30 * time.Second}
	}
	// trickle publishes n beacons, one every 100 ms, without a ts attribute
	// (their publish time is their event time: close to the wall clock).
	trickle := func(c *pubsub.Client, topic string, n int) (msgs []*pb.PubsubMessage, done chan struct{}) {
		for i := range n {
			data, _ := testBeacon(t, i, 2)
			msgs = append(msgs, &pb.PubsubMessage{Data: data})
		}
		done = make(chan struct{})
		go func() {
			defer close(done)
			for _, m := range msgs {
				if _, err := c.TopicAdminClient.Publish(context.Background(), &pb.PublishRequest{Topic: topic, Messages: []*pb.PubsubMessage{m}}); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
		return msgs, done
	}
	read := func(s beam.Scope, addr, sub string) beam.PCollection {
		spec, err := ParseSpec(fmt.Sprintf("pubsub:%s?idle_stop=3s,slack=1s", sub))
		if err != nil {
			t.Fatal(err)
		}
		beacons, dead := Read(s, spec, opts(addr))
		passert.Empty(s, dead)
		return beacons
	}

	t.Run("in time", func(t *testing.T) {
		srv := pubsubx.StartEmbedded()
		defer srv.Close()
		c, topic, sub := testSub(t, srv.Addr)
		const n = 130
		from := time.Now().Add(-time.Second).UnixMilli()
		_, done := trickle(c, topic, n)
		var want []string
		for i := range n {
			want = append(want, fmt.Sprintf("b%d@pub", i))
		}
		p, s := beam.NewPipelineWithRoot()
		keys := beam.ParDo(s, &messageKeyFn{PubFrom: from, PubTo: math.MaxInt64}, read(s, srv.Addr, sub))
		passert.EqualsList(s, keys, want)
		if err := ptest.Run(p); err != nil {
			t.Fatalf("pipeline: %v", err)
		}
		<-done
		for _, m := range srv.Srv.Messages() {
			if m.Acks != 1 || m.Deliveries != 1 {
				t.Errorf("message %s: %d deliveries, %d acks; want 1 and 1", m.ID, m.Deliveries, m.Acks)
			}
		}
	})

	t.Run("failed bundle", func(t *testing.T) {
		srv := pubsubx.StartEmbedded()
		defer srv.Close()
		c, topic, sub := testSub(t, srv.Addr)
		const n = 60
		msgs, done := trickle(c, topic, n)
		p, s := beam.NewPipelineWithRoot()
		failOnSeen.Store(0)
		beam.ParDo0(s, &failOnFn{FailAt: 40}, read(s, srv.Addr, sub))
		err := ptest.Run(p)
		if err == nil || !strings.Contains(err.Error(), "failing on purpose at element 40") {
			t.Fatalf("run 1: %v; want the bundle holding element 40 to fail it", err)
		}
		<-done
		byData := map[string]string{}
		for i, m := range msgs {
			byData[string(m.Data)] = fmt.Sprintf("b%d@pub", i)
		}
		var want []string
		for _, m := range srv.Srv.Messages() {
			if m.Acks == 0 {
				want = append(want, byData[string(m.Data)])
			}
		}
		t.Logf("run 1 failed as planned; %d of %d messages left unacked", len(want), n)
		if len(want) == 0 || len(want) >= n-1 {
			t.Fatalf("%d unacked after the failed run; want the calls before the failed one acked, the rest not", len(want))
		}
		time.Sleep(11 * time.Second) // the ack deadline of what the failed call pulled
		p, s = beam.NewPipelineWithRoot()
		keys := beam.ParDo(s, &messageKeyFn{PubFrom: 0, PubTo: math.MaxInt64}, read(s, srv.Addr, sub))
		passert.EqualsList(s, keys, want)
		if err := ptest.Run(p); err != nil {
			t.Fatalf("run 2: %v", err)
		}
		for _, m := range srv.Srv.Messages() {
			if m.Acks == 0 {
				t.Errorf("message %s still unacked after run 2", m.ID)
			}
		}
	})
}
