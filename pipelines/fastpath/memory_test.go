package fastpath

import (
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/topk-dev/topk/internal/streams"
	"github.com/topk-dev/topk/schemas"
)

// TestMemoryFlatUnderDistinctFlood: the counting state must not grow with
// distinct items. Three file replays of 600,000 events over the same 5
// minutes of event time, the whole run including the end-of-input flush of
// every window:
//
//   - zipf: Zipf(1.1) over 1M items (the normal run, logged for
//     comparison);
//   - flood: every event a new item (600,000 distinct items);
//   - repeat: 20,000 distinct items, every one of them in every 10 s
//     bucket once (so each bucket is as dense as the flood's: 20,000
//     events, 20,000 distinct items).
//
// The peak live heap of each run (runtime/metrics /gc/heap/live:bytes,
// sampled every 20 ms, minus the live heap before it started; the lower of
// two runs) must stay within 1.5x of repeat's for the flood (30 times the
// distinct items, the same buckets). A per-item map anywhere in the job
// (even 100 bytes an item) would show here as 58 MB more in the flood
// than in repeat.
//
// Why buckets of the same density: a bucket's partial summaries wait in
// the shuffle until the bucket closes, and since they are cut once per
// bucket (transforms/counter), not per bundle, they hold the bucket's
// distinct items, up to the pre-aggregation's MaxDistinct keys per flush:
// memory that follows a bucket's density (bounded per flush), not the
// stream's distinct items. (Before 2026-12-05 this test compared the flood
// with 200,000 new items over the same 5 minutes, a third of the density,
// which only held while each flush was cut to N per partition.) The files
// are read in bundles of 20 beacons (10,000 events), as live: read in one
// call, Prism holds a bundle's whole output until it ends, which grows
// with the file (a 1.2M-event flood at 42 MB against 23 MB for 600k, cut
// per bundle or not).
func TestMemoryFlatUnderDistinctFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: three replays of 600k events")
	}
	const (
		n      = 600_000
		rate   = 2000.0 // events a second of event time: 20,000 a bucket
		repeat = 20_000
	)
	named := func(item func(i int) int) []schemas.Event {
		ev := streams.ZipfStream(3, 1.1, 1_000_000, n, start, rate, "video")
		for i := range ev {
			ev[i].Item = "d" + strconv.Itoa(1_000_000+item(i)) // same length as the zipf names, roughly
		}
		return ev
	}
	runs := []struct {
		name   string
		events func() []schemas.Event
	}{
		{"zipf", func() []schemas.Event {
			return streams.ZipfStream(3, 1.1, 1_000_000, n, start, rate, "video")
		}},
		{"flood", func() []schemas.Event { return named(func(i int) int { return i }) }},
		{"repeat", func() []schemas.Event { return named(func(i int) int { return i % repeat }) }},
	}
	peak := map[string]float64{}
	for _, r := range runs {
		path := writeNDJSON(t, r.events()) // the slice is garbage from here on
		// The lower of two runs: a run's peak also holds whatever Prism
		// has in flight when the GC samples it, a few MB that vary with
		// the machine's load (CI saw the flood at 26 MB once, 22.5 MB
		// usually); retained state is in both runs.
		mb, rep := peakLiveHeap(t, path)
		if again, _ := peakLiveHeap(t, path); again < mb {
			mb = again
		}
		peak[r.name] = mb
		t.Logf("%-11s %7d events: peak live heap %.1f MB above the start, %.0f events/s", r.name, rep.Events, mb, rep.EventsPerS)
	}
	// Against the Zipf run the ratio is logged, not asserted: with these
	// small bounds the flood fills the pre-aggregation's per-bundle maps
	// and the Zipf run does not, so the two differ by a bounded few MB and
	// their ratio wandered from 1.2 to 1.6 with the machine's load.
	t.Logf("flood / zipf: %.2f", peak["flood"]/peak["zipf"])
	if got, base := peak["flood"], peak["repeat"]; got > 1.5*base {
		t.Errorf("flood peak %.1f MB > 1.5 x repeat's %.1f MB (buckets as dense, 1/30 of the distinct items): memory grows with distinct items", got, base)
	}
}

// peakLiveHeap replays the NDJSON file at path and returns the peak live
// heap above the live heap at its start, in MB. The job's memory has three
// bounds that do not depend on distinct items: summaries of N entries per
// (list, partition, bucket), the pre-aggregation's MaxDistinct keys per
// bundle before an early flush, and the rules' fixed tables (off here). The
// test makes the flood and repeat reach the first two (N = 512 in 4
// partitions, as TestReplayDense; MaxDistinct 4,096: both have 20,000
// distinct items per 10 s bucket), so equal peaks mean nothing else grows;
// with the defaults (4,096 x 16, 2^20) they would stay below the bounds.
// Trending off: its state is per warm item, bounded the same way, but its
// scoring adds noise. Measured (2026-12-05, two runs): zipf 12.3, 13.8 MB,
// flood 28.1, 29.4 MB, repeat 23.5, 24.3 MB.
func peakLiveHeap(t *testing.T, path string) (float64, Report) {
	t.Helper()
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	live := func() float64 {
		metrics.Read(sample)
		return float64(sample[0].Value.Uint64())
	}
	runtime.GC()
	runtime.GC()
	base := live()
	var mu sync.Mutex
	top := base
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				v := live()
				mu.Lock()
				top = max(top, v)
				mu.Unlock()
			}
		}
	}()
	rep, _ := replayFile(t, path, func(c *Config) {
		c.Trending = false
		c.Preagg.Summary.N, c.Preagg.Partitions, c.Preagg.MaxDistinct = 512, 4, 4096
		c.SourceOpts.BundleBeacons = 20
	})
	close(stop)
	<-done
	mu.Lock()
	defer mu.Unlock()
	return (top - base) / (1 << 20), rep
}
