package store

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/topk-dev/topk/schemas"
)

// BenchmarkWriteHour writes one real hour of exact counts (the Parquet exact
// table at $TOPK_EXACT_COUNTS, e.g. ARCHIVE/exact/hour=.../counts.parquet
// from pipelines/exact) into a fresh store, then recomputes its 24 hours:
// the recount's Bigtable phase alone. The store is BIGTABLE_EMULATOR_HOST's
// emulator when set (its memory and CPU are then outside this process),
// else an in-process bttest.
//
//	TOPK_EXACT_COUNTS=/tmp/a/exact/hour=2026-11-30T10/counts.parquet \
//	  go test -run '^$' -bench WriteHour -benchtime 1x ./transforms/exact/store/
func BenchmarkWriteHour(b *testing.B) {
	path := os.Getenv("TOPK_EXACT_COUNTS")
	if path == "" {
		b.Skip("TOPK_EXACT_COUNTS is not set")
	}
	counts, err := parquet.ReadFile[schemas.ExactCount](path)
	if err != nil {
		b.Fatal(err)
	}
	hour := counts[0].Hour.UTC()
	b.Logf("%d counts of hour %s", len(counts), HourKey(hour))
	ctx := context.Background()
	for b.Loop() {
		var s *Store
		b.StopTimer()
		if os.Getenv("BIGTABLE_EMULATOR_HOST") != "" {
			s = open(b)
		} else {
			addr, stop, err := Embedded()
			if err != nil {
				b.Fatal(err)
			}
			s = open(b, EmulatorOptions(addr)...)
			b.Cleanup(stop)
		}
		b.StartTimer()
		start := time.Now()
		if err := s.WriteHour(ctx, hour, counts, 1000); err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		if err := s.Recompute24h(ctx, hour.Add(time.Hour), 1000); err != nil {
			b.Fatal(err)
		}
		end := time.Now()
		b.ReportMetric(mid.Sub(start).Seconds(), "write-s")
		b.ReportMetric(end.Sub(mid).Seconds(), "recompute24h-s")
		b.ReportMetric(float64(len(counts))/end.Sub(start).Seconds(), "rows/s")
		b.ReportMetric(float64(s.topScans.Load()), "list-scans")
	}
}
