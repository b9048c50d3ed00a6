package source

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
	"github.com/topk-dev/topk/internal/pubsubx"
	"github.com/topk-dev/topk/schemas"
)

// Pub/Sub reader benchmarks. Each publishes b.N synthetic beacons first (not
// timed), then reads them all; rates are taken between the first and the
// last message received, so job start-up and the idle stop are not counted.
// Against pstest, or the official emulator when PUBSUB_EMULATOR_HOST is set.
// Bounded: run with a fixed count, e.g.
//
//	go test ./transforms/source -run '^$' -bench Pubsub -benchtime 12000x
//
// BenchmarkPubsubRead is this package's reader on Prism (a downstream DoFn
// reads each beacon's header); BenchmarkPubsubPullRaw is a bare Pull+Ack
// loop with the same client and batch size: the server's own ceiling.

type benchCase struct {
	beacon, readers, maxMessages int
}

var benchCases = []benchCase{
	{beacon: 500, readers: 1, maxMessages: 1000},
	{beacon: 500, readers: 2, maxMessages: 1000},
	{beacon: 10, readers: 1, maxMessages: 1000},
}

func (c benchCase) String() string {
	return fmt.Sprintf("beacon=%d/readers=%d/max=%d", c.beacon, c.readers, c.maxMessages)
}

// benchServer is the emulator when PUBSUB_EMULATOR_HOST is set, else a
// fresh pstest.
func benchServer(b *testing.B) (addr, target string) {
	if addr := pubsubx.EmulatorAddr(); addr != "" {
		return addr, "emulator"
	}
	srv := pubsubx.StartEmbedded()
	b.Cleanup(func() { srv.Close() })
	return srv.Addr, "pstest"
}

// benchPublish makes a subscription holding n beacons of the given size and
// returns it with the average message size.
func benchPublish(b *testing.B, addr string, n, beacon int) (sub string, bytesPerMsg float64) {
	c, topic, sub := testSub(b, addr)
	g := mustGenerator(b, fmt.Sprintf("synthetic:rate=0,items=100000,beacon=%d", beacon))
	now := time.Now()
	ts := strconv.FormatInt(now.UnixMilli(), 10)
	var msgs []*pb.PubsubMessage
	total := 0
	flush := func() {
		publish(b, c, topic, msgs)
		msgs = msgs[:0]
	}
	for i := 0; i < n; i++ {
		data, _, err := g.Beacon(int64(i), now)
		if err != nil {
			b.Fatal(err)
		}
		total += len(data)
		msgs = append(msgs, &pb.PubsubMessage{Data: append([]byte(nil), data...), Attributes: map[string]string{TSAttribute: ts}})
		if len(msgs) == 1000 {
			flush()
		}
	}
	flush()
	return sub, float64(total) / float64(n)
}

func BenchmarkPubsubRead(b *testing.B) {
	for _, c := range benchCases {
		b.Run(c.String(), func(b *testing.B) {
			addr, target := benchServer(b)
			sub, size := benchPublish(b, addr, b.N, c.beacon)
			benchFirst.Store(0)
			benchLast.Store(0)
			benchCount.Store(0)
			benchEvents.Store(0)
			spec, err := ParseSpec(fmt.Sprintf("pubsub:%s?idle_stop=2s,readers=%d", sub, c.readers))
			if err != nil {
				b.Fatal(err)
			}
			p, s := beam.NewPipelineWithRoot()
			beacons, _ := Read(s, spec, Options{PubsubEndpoint: addr, MaxMessages: c.maxMessages})
			beam.ParDo0(s, benchSinkFn, beacons)
			b.ResetTimer()
			if err := ptest.Run(p); err != nil {
				b.Fatalf("pipeline: %v", err)
			}
			b.StopTimer()
			if got := benchCount.Load(); got != int64(b.N) {
				b.Fatalf("received %d messages, want %d", got, b.N)
			}
			secs := time.Duration(benchLast.Load() - benchFirst.Load()).Seconds()
			report(b, target, float64(b.N)/secs, float64(benchEvents.Load())/secs, size)
		})
	}
}

func BenchmarkPubsubPullRaw(b *testing.B) {
	for _, c := range benchCases {
		if c.readers != 1 {
			continue
		}
		b.Run(c.String(), func(b *testing.B) {
			addr, target := benchServer(b)
			sub, size := benchPublish(b, addr, b.N, c.beacon)
			fn := &pullFn{Subscription: sub, Endpoint: addr}
			ctx := context.Background()
			if err := fn.Setup(ctx); err != nil {
				b.Fatal(err)
			}
			defer fn.Teardown()
			b.ResetTimer()
			var got, events int
			var first time.Time
			for got < b.N {
				resp, err := fn.sub.Pull(ctx, &pb.PullRequest{Subscription: sub, MaxMessages: int32(c.maxMessages), ReturnImmediately: true})
				if err != nil {
					b.Fatal(err)
				}
				if first.IsZero() && len(resp.ReceivedMessages) > 0 {
					first = time.Now()
				}
				var ids []string
				var r schemas.BeaconReader
				for _, m := range resp.ReceivedMessages {
					ids = append(ids, m.AckId)
					if err := r.Reset(m.GetMessage().GetData()); err != nil {
						b.Fatal(err)
					}
					events += r.Len()
				}
				got += len(ids)
				if len(ids) > 0 {
					fn.ack(ctx, ids)
				}
			}
			secs := time.Since(first).Seconds()
			b.StopTimer()
			report(b, target, float64(got)/secs, float64(events)/secs, size)
		})
	}
}

func report(b *testing.B, target string, msgs, events, size float64) {
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(msgs, "msgs/s")
	b.ReportMetric(events, "events/s")
	b.ReportMetric(msgs*size/1e6, "MB/s")
	b.ReportMetric(size, "bytes/msg")
	if b.N > 1 {
		b.Logf("%s: %d messages", target, b.N)
	}
}

var benchFirst, benchLast, benchCount, benchEvents atomic.Int64

func init() { register.Function1x1(benchSinkFn) }

// benchSinkFn records arrival times in process-wide counters (Prism runs
// in-process) and reads each beacon's header.
func benchSinkFn(data []byte) error {
	var r schemas.BeaconReader
	if err := r.Reset(data); err != nil {
		return err
	}
	now := time.Now().UnixNano()
	benchFirst.CompareAndSwap(0, now)
	for last := benchLast.Load(); now > last && !benchLast.CompareAndSwap(last, now); last = benchLast.Load() {
	}
	benchCount.Add(1)
	benchEvents.Add(int64(r.Len()))
	return nil
}

// BenchmarkSyntheticSource measures the unthrottled generator on Prism
// (rate=0): b.N beacons of 500 events into a sink that reads each header.
func BenchmarkSyntheticSource(b *testing.B) {
	spec, err := ParseSpec(fmt.Sprintf("synthetic:rate=0,events=%d,items=1000000,zipf=1.1,beacon=500,countries=10", b.N*500))
	if err != nil {
		b.Fatal(err)
	}
	benchFirst.Store(0)
	benchLast.Store(0)
	benchCount.Store(0)
	benchEvents.Store(0)
	p, s := beam.NewPipelineWithRoot()
	beacons, _ := Read(s, spec, Options{})
	beam.ParDo0(s, benchSinkFn, beacons)
	b.ResetTimer()
	if err := ptest.Run(p); err != nil {
		b.Fatalf("pipeline: %v", err)
	}
	b.StopTimer()
	if got := benchEvents.Load(); got != int64(b.N)*500 {
		b.Fatalf("received %d events, want %d", got, b.N*500)
	}
	secs := time.Duration(benchLast.Load() - benchFirst.Load()).Seconds()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(benchEvents.Load())/secs, "events/s")
	b.ReportMetric(float64(b.N)/secs, "beacons/s")
}
