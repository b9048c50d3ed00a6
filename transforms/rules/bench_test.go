package rules

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/topk-dev/topk/schemas"
)

// benchEvents is n events over 5 minutes of event time, in time order,
// with Zipf(1.1) items over 1M and Zipf(1.1) users over 1M: a few hot
// items and heavy accounts, a long tail of both.
func benchEvents(n int) []schemas.Event {
	r := rand.New(rand.NewPCG(42, 42))
	items := rand.NewZipf(r, 1.1, 1, 1<<20)
	users := rand.NewZipf(r, 1.1, 1, 1<<20)
	out := make([]schemas.Event, n)
	for i := range out {
		out[i] = schemas.Event{
			EventID: fmt.Sprintf("%016x%016x", r.Uint64(), r.Uint64()),
			Type:    "video",
			Item:    fmt.Sprintf("v_%d", items.Uint64()),
			User:    fmt.Sprintf("u_%d", users.Uint64()),
			TS:      t0.Add(time.Duration(i) * 5 * time.Minute / time.Duration(n)),
		}
	}
	return out
}

// BenchmarkRulesCheck is the per-event cost of the stateless rules alone
// (blocklist, bots, trust lookups), what the exact recount's read pays.
func BenchmarkRulesCheck(b *testing.B) {
	cfg := DefaultConfig()
	dir := b.TempDir()
	cfg.Trust = writeFileB(b, dir, "trust", 100_000, "u_%d,0.5\n")
	cfg.Bots = writeFileB(b, dir, "bots", 1000, "u_%d\n")
	cfg.Blocklist = writeFileB(b, dir, "block", 1000, "video,v_%d\n")
	r := mustNew(b, cfg)
	events := benchEvents(1 << 20)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.Check(&events[i&(len(events)-1)])
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkFilterCheck is the per-event cost of the whole rule set in the
// stream (dedupe, blocklist, bots, trust, repeats, cap) at the default
// table sizes, tables allocated before the timer.
func BenchmarkFilterCheck(b *testing.B) {
	for _, name := range []string{"all", "none"} {
		b.Run(name, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Off = name == "none"
			dir := b.TempDir()
			cfg.Trust = writeFileB(b, dir, "trust", 100_000, "u_%d,0.5\n")
			cfg.Bots = writeFileB(b, dir, "bots", 1000, "u_%d\n")
			cfg.Blocklist = writeFileB(b, dir, "block", 1000, "video,v_%d\n")
			r := mustNew(b, cfg)
			events := benchEvents(1 << 20)
			f := r.NewFilter()
			for i := range events { // allocate the tables event time reaches
				f.Check(&events[i])
			}
			f.forget()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if i%len(events) == 0 && i > 0 {
					b.StopTimer()
					f.forget() // the same events are new again
					b.StartTimer()
				}
				f.Check(&events[i%len(events)])
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(f.MaxBytes())/(1<<20), "MB/filter")
		})
	}
}

func writeFileB(b *testing.B, dir, name string, n int, format string) string {
	b.Helper()
	var buf []byte
	for i := range n {
		buf = fmt.Appendf(buf, format, i*7+3)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		b.Fatal(err)
	}
	return p
}
