package archive

import (
	"context"
	"strconv"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/topk-dev/topk/internal/pubsubx"
)

// BenchmarkArchivePstest measures the archiver end to end on pstest: unary
// Pull, decode, Parquet (zstd) write with fsync, ack. b.N beacons of 100
// events each are published first; the time includes the final IdleStop.
func BenchmarkArchivePstest(b *testing.B) {
	emb := pubsubx.StartEmbedded()
	defer emb.Close()
	e := newEnv(b, emb.Addr, b.TempDir())
	pub := e.client.Publisher(e.topic)
	var rs []*pubsub.PublishResult
	for i := 0; i < b.N; i++ {
		ev := genEvents("b"+strconv.Itoa(i)+"-", h0.Add(time.Duration(i)*time.Second), time.Millisecond, 100)
		rs = append(rs, pub.Publish(context.Background(), &pubsub.Message{Data: beacon(b, "b", ev...)}))
	}
	for _, r := range rs {
		if _, err := r.Get(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	pub.Stop()
	e.clock.Set(h0)
	b.ResetTimer()
	start := time.Now()
	st, err := e.run(b, func(c *Config) { c.IdleStop = 200 * time.Millisecond })
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(st.Events)/time.Since(start).Seconds(), "events/s")
	if st.Events != int64(b.N)*100 {
		b.Fatalf("archived %d events, want %d", st.Events, b.N*100)
	}
}
