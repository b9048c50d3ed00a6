package source

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/passert"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
	"github.com/topk-dev/topk/internal/pubsubx"
	"github.com/topk-dev/topk/internal/svctest"
	"github.com/topk-dev/topk/schemas"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func init() {
	register.DoFn3x1[beam.EventTime, []byte, func(string), error](&messageKeyFn{})
	register.DoFn1x1[[]byte, error](&failOnFn{})
}

// failOnFn fails the bundle that holds the FailAt-th element it sees (a
// process-wide count: Prism runs in-process).
type failOnFn struct{ FailAt int64 }

var failOnSeen atomic.Int64

func (fn *failOnFn) ProcessElement(_ []byte) error {
	if failOnSeen.Add(1) == fn.FailAt {
		return fmt.Errorf("failing on purpose at element %d", fn.FailAt)
	}
	return nil
}

// messageKeyFn emits "beacon_id@ts" for a beacon: ts is the element
// timestamp in Unix ms, or "pub" when the timestamp lies in
// [PubFrom, PubTo] (a publish time). It checks the beacon decodes whole.
type messageKeyFn struct {
	PubFrom, PubTo int64
}

func (fn *messageKeyFn) ProcessElement(ts beam.EventTime, data []byte, emit func(string)) error {
	var b schemas.Beacon
	if err := schemas.UnmarshalBeacon(data, &b); err != nil {
		return err
	}
	at := strconv.FormatInt(int64(ts), 10)
	if int64(ts) >= fn.PubFrom && int64(ts) <= fn.PubTo {
		at = "pub"
	}
	emit(b.BeaconID + "@" + at)
	return nil
}

// testBeacon is beacon i of a test: a few events, ts attribute ms.
func testBeacon(t testing.TB, i, events int) ([]byte, int64) {
	t.Helper()
	base := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Second)
	b := schemas.Beacon{BeaconID: fmt.Sprintf("b%d", i)}
	for j := range events {
		b.Events = append(b.Events, schemas.Event{
			EventID: fmt.Sprintf("e%d-%d", i, j), Type: "video", Item: fmt.Sprintf("v_%d", j%13),
			User: "u_1", TS: base.Add(time.Duration(j) * time.Millisecond),
		})
	}
	data, err := schemas.MarshalBeacon(&b)
	if err != nil {
		t.Fatal(err)
	}
	return data, base.UnixMilli()
}

// testSub creates a fresh topic and subscription (10 s ack deadline) on the
// server at addr and returns a client and the subscription's full name.
func testSub(t testing.TB, addr string) (*pubsub.Client, string, string) {
	t.Helper()
	ctx := context.Background()
	c, err := pubsubx.NewClient(ctx, "topk-test", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	name := fmt.Sprintf("src-%d", time.Now().UnixNano())
	if err := pubsubx.EnsureTopic(ctx, c, name); err != nil {
		t.Fatal(err)
	}
	if err := pubsubx.EnsureSubscription(ctx, c, name, name, 10); err != nil {
		t.Fatal(err)
	}
	return c, pubsubx.TopicName("topk-test", name), pubsubx.SubscriptionName("topk-test", name)
}

// publish sends msgs in requests of up to 100.
func publish(t testing.TB, c *pubsub.Client, topic string, msgs []*pb.PubsubMessage) {
	t.Helper()
	for len(msgs) > 0 {
		n := min(len(msgs), 100)
		if _, err := c.TopicAdminClient.Publish(context.Background(), &pb.PublishRequest{Topic: topic, Messages: msgs[:n]}); err != nil {
			t.Fatal(err)
		}
		msgs = msgs[n:]
	}
}

// runPubsub reads sub until idle for idleStop and asserts the "id@ts" keys.
func runPubsub(t *testing.T, addr, sub string, idleStop time.Duration, pubFrom, pubTo int64, want []string) {
	t.Helper()
	spec, err := ParseSpec(fmt.Sprintf("pubsub:%s?idle_stop=%s", sub, idleStop))
	if err != nil {
		t.Fatal(err)
	}
	p, s := beam.NewPipelineWithRoot()
	beacons, dead := Read(s, spec, Options{PubsubEndpoint: addr, MaxMessages: 7, BundleTime: 300 * time.Millisecond})
	keys := beam.ParDo(s, &messageKeyFn{PubFrom: pubFrom, PubTo: pubTo}, beacons)
	if len(want) == 0 {
		passert.Empty(s, keys)
	} else {
		passert.EqualsList(s, keys, want)
	}
	passert.Empty(s, dead)
	if err := ptest.Run(p); err != nil {
		t.Fatalf("pipeline: %v", err)
	}
}

// testPubsubSource: every published beacon arrives once, unchanged (decodes
// whole, same id), stamped with its "ts" attribute or, without one, its
// publish time; all are acked, so a second run receives nothing.
// afterRun checks acks server-side, when it can.
func testPubsubSource(t *testing.T, addr string, afterRun func(t *testing.T, c *pubsub.Client, sub string)) {
	const n = 120
	c, topic, sub := testSub(t, addr)
	var msgs []*pb.PubsubMessage
	var want []string
	for i := range n {
		data, ts := testBeacon(t, i, 1+i%40)
		m := &pb.PubsubMessage{Data: data, Attributes: map[string]string{TSAttribute: strconv.FormatInt(ts, 10)}}
		key := fmt.Sprintf("b%d@%d", i, ts)
		if i%10 == 9 { // no ts attribute: publish time
			m.Attributes = nil
			key = fmt.Sprintf("b%d@pub", i)
		}
		msgs = append(msgs, m)
		want = append(want, key)
	}
	from := time.Now().Add(-time.Second).UnixMilli()
	publish(t, c, topic, msgs)
	to := time.Now().Add(time.Second).UnixMilli()

	runPubsub(t, addr, sub, 2*time.Second, from, to, want)
	if afterRun != nil {
		afterRun(t, c, sub)
	}
	runPubsub(t, addr, sub, time.Second, from, to, nil)
}

func TestPubsubSourcePstest(t *testing.T) {
	srv := pubsubx.StartEmbedded()
	defer srv.Close()
	testPubsubSource(t, srv.Addr, func(t *testing.T, _ *pubsub.Client, _ string) {
		msgs := srv.Srv.Messages()
		for _, m := range msgs {
			if m.Acks != 1 {
				t.Errorf("message %s: %d acks, %d deliveries; want 1 ack", m.ID, m.Acks, m.Deliveries)
			}
		}
	})
}

// TestPubsubSourceFailedBundle checks the delivery claim: a message is
// acked only once the bundle that emitted it has committed. A job whose
// bundle fails leaves that bundle's messages unacked, and a later run gets
// exactly the unacked messages (after the ack deadline), so nothing is lost.
func TestPubsubSourceFailedBundle(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a 10 s ack deadline")
	}
	srv := pubsubx.StartEmbedded()
	defer srv.Close()
	c, topic, sub := testSub(t, srv.Addr)
	const n = 60
	var msgs []*pb.PubsubMessage
	for i := range n {
		data, ts := testBeacon(t, i, 3)
		msgs = append(msgs, &pb.PubsubMessage{Data: data, Attributes: map[string]string{TSAttribute: strconv.FormatInt(ts, 10)}})
	}
	publish(t, c, topic, msgs)

	spec, err := ParseSpec(fmt.Sprintf("pubsub:%s?idle_stop=2s", sub))
	if err != nil {
		t.Fatal(err)
	}
	// One pull of 5 per bundle (a 1 ns bundle time); the 5th bundle fails.
	p, s := beam.NewPipelineWithRoot()
	beacons, _ := Read(s, spec, Options{PubsubEndpoint: srv.Addr, MaxMessages: 5, BundleTime: time.Nanosecond})
	failOnSeen.Store(0)
	beam.ParDo0(s, &failOnFn{FailAt: 23}, beacons)
	err = ptest.Run(p)
	if err == nil || !strings.Contains(err.Error(), "failing on purpose at element 23") {
		t.Fatalf("run 1: %v; want the bundle holding element 23 to fail it", err)
	}
	var want []string
	byID := map[string]string{}
	for i, m := range msgs {
		byID[string(m.Data)] = fmt.Sprintf("b%d@%s", i, m.Attributes[TSAttribute])
	}
	for _, m := range srv.Srv.Messages() {
		if m.Acks == 0 {
			want = append(want, byID[string(m.Data)])
		}
	}
	t.Logf("run 1 failed as planned; %d of %d messages left unacked", len(want), n)
	if len(want) == 0 || len(want) == n {
		t.Fatalf("%d unacked after the failed run, want some but not all", len(want))
	}
	time.Sleep(11 * time.Second) // the ack deadline of what run 1 pulled
	runPubsub(t, srv.Addr, sub, 2*time.Second, 0, 0, want)
	for _, m := range srv.Srv.Messages() {
		if m.Acks == 0 {
			t.Errorf("message %s still unacked after run 2", m.ID)
		}
	}
}

// TestPubsubSourceEmulator runs against the official emulator when
// PUBSUB_EMULATOR_HOST is set (scripts/emulators.sh start). The emulator
// has no way to list acks, so after the run it waits out the 10 s ack
// deadline: an unacked message would then be delivered to the second run.
func TestPubsubSourceEmulator(t *testing.T) {
	addr := pubsubx.EmulatorAddr()
	svctest.Need(t, "pubsub", addr != "", pubsubx.EnvEmulator+" is not set (scripts/emulators.sh start)")
	testPubsubSource(t, addr, func(t *testing.T, _ *pubsub.Client, _ string) {
		time.Sleep(11 * time.Second)
	})
}

// TestPullEstimator: the watermark follows the oldest message of a bundle
// minus slack, idles to wall clock minus slack on an empty pull, and never
// moves back.
func TestPullEstimator(t *testing.T) {
	fn := &pullFn{Slack: 2 * time.Second}
	ms := func(s int64) time.Time { return time.UnixMilli(s * 1000) }
	state := int64(-1 << 40)
	call := func(observe []int64, idleAt int64) int64 {
		e := fn.CreateWatermarkEstimator(state)
		for _, o := range observe {
			e.ObserveTimestamp(ms(o))
		}
		if idleAt != 0 {
			e.idle(ms(idleAt))
		}
		wm := e.CurrentWatermark().UnixMilli()
		state = fn.WatermarkEstimatorState(e)
		if state != wm {
			t.Fatalf("state %d != reported watermark %d", state, wm)
		}
		return wm / 1000
	}
	steps := []struct {
		observe []int64
		idleAt  int64
		want    int64
	}{
		{[]int64{100, 90, 95}, 0, 88},  // min 90 - 2
		{[]int64{120, 110}, 0, 108},    // min 110 - 2
		{[]int64{50}, 0, 108},          // an old straggler does not move it back
		{nil, 0, 108},                  // nothing happened
		{nil, 500, 498},                // idle: wall clock - 2
		{[]int64{300}, 600, 498},       // data and an empty pull: data wins, monotone
		{[]int64{700, 705}, 1000, 698}, // data wins over idle in the same call
	}
	for i, st := range steps {
		if got := call(st.observe, st.idleAt); got != st.want {
			t.Errorf("step %d: watermark %d s, want %d s", i, got, st.want)
		}
	}
}

// TestStreamTracker: claims are in order; a checkpoint splits at the
// claimed position and hands the claimed messages' ack ids to the residual;
// other splits are refused.
func TestStreamTracker(t *testing.T) {
	rt := newStreamTracker(streamRestriction{Shard: 2, Next: 5, End: unbounded, Mark: 9, Acks: []string{"old"}})
	if got := rt.takeAcks(); len(got) != 1 || got[0] != "old" {
		t.Fatalf("takeAcks = %v", got)
	}
	for _, id := range []string{"a", "b", "c"} {
		if !rt.claimMessage(id) {
			t.Fatalf("claim %s refused", id)
		}
	}
	if p, r, _ := rt.TrySplit(0.5); r != nil {
		t.Fatalf("split at 0.5 = %v, %v; want refused", p, r)
	}
	rt.setMark(11)
	p, r, err := rt.TrySplit(0)
	if err != nil || r == nil {
		t.Fatalf("checkpoint: %v, %v", r, err)
	}
	wantP := streamRestriction{Shard: 2, Next: 5, End: 8, Mark: 11}
	wantR := streamRestriction{Shard: 2, Next: 8, End: unbounded, Mark: 11, Acks: []string{"a", "b", "c"}}
	if fmt.Sprint(p) != fmt.Sprint(wantP) || fmt.Sprint(r) != fmt.Sprint(wantR) {
		t.Errorf("checkpoint = %+v, %+v; want %+v, %+v", p, r, wantP, wantR)
	}
	if !rt.IsDone() || rt.claimMessage("d") {
		t.Error("tracker not done after checkpoint")
	}

	// Bounded: the claim past the end fails and the tracker is done.
	rt = newStreamTracker(streamRestriction{Next: 0, End: 2})
	if !rt.TryClaim(int64(0)) || !rt.TryClaim(int64(1)) || rt.TryClaim(int64(2)) || !rt.IsDone() {
		t.Error("bounded tracker: want claims 0, 1 then done")
	}
	if !rt.IsBounded() {
		t.Error("IsBounded = false")
	}
}

// TestMessageTime: the ts attribute, else the publish time.
func TestMessageTime(t *testing.T) {
	pub := time.UnixMilli(1_800_000_000_123)
	m := func(attrs map[string]string) *pb.PubsubMessage {
		return &pb.PubsubMessage{Attributes: attrs, PublishTime: timestamppb.New(pub)}
	}
	for _, tt := range []struct {
		attrs  map[string]string
		want   int64
		wantOK bool
	}{
		{map[string]string{"ts": "1700000000000"}, 1_700_000_000_000, true},
		{nil, pub.UnixMilli(), true},
		{map[string]string{"ts": "soon"}, pub.UnixMilli(), false},
		{map[string]string{"ts": strconv.FormatInt(math.MaxInt64, 10)}, pub.UnixMilli(), false},
	} {
		got, ok := messageTime(m(tt.attrs))
		if int64(got) != tt.want || ok != tt.wantOK {
			t.Errorf("messageTime(%v) = %d, %v; want %d, %v", tt.attrs, got, ok, tt.want, tt.wantOK)
		}
	}
}
