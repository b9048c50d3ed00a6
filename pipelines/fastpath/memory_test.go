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
// distinct items. Three file replays over the same 5 minutes of event time,
// the whole run including the end-of-input flush of every window:
//
//   - zipf: 600,000 events, Zipf(1.1) over 1M items (the normal run,
//     logged for comparison);
//   - flood: 600,000 events, every one a new item;
//   - small flood: 200,000 events, every one a new item.
//
// The peak live heap of each run (runtime/metrics /gc/heap/live:bytes,
// sampled every 20 ms, minus the live heap before it started; the lower of
// two runs) must stay within 1.5x of the small flood's for the flood (three
// times the distinct items, the same state once the summaries are full). A per-item map anywhere in the
// job (even 100 bytes an item) would show here as 40 MB more in the flood
// than in the small flood.
func TestMemoryFlatUnderDistinctFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: three replays of up to 600k events")
	}
	const span = 5 * time.Minute
	distinct := func(n int) []schemas.Event {
		ev := streams.ZipfStream(3, 1.1, 1_000_000, n, start, float64(n)/span.Seconds(), "video")
		for i := range ev {
			ev[i].Item = "d" + strconv.Itoa(1_000_000+i) // same length as the zipf names, roughly
		}
		return ev
	}
	runs := []struct {
		name   string
		events func() []schemas.Event
	}{
		{"zipf", func() []schemas.Event {
			return streams.ZipfStream(3, 1.1, 1_000_000, 600_000, start, 600_000/span.Seconds(), "video")
		}},
		{"flood", func() []schemas.Event { return distinct(600_000) }},
		{"small flood", func() []schemas.Event { return distinct(200_000) }},
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
	if got, base := peak["flood"], peak["small flood"]; got > 1.5*base {
		t.Errorf("flood peak %.1f MB > 1.5 x the small flood's %.1f MB (a third of the distinct items): memory grows with distinct items", got, base)
	}
}

// peakLiveHeap replays the NDJSON file at path and returns the peak live
// heap above the live heap at its start, in MB. The job's memory has three
// bounds that do not depend on distinct items: summaries of N entries per
// (list, partition, bucket), the pre-aggregation's MaxDistinct keys per
// bundle before an early flush, and the rules' fixed tables (off here). The
// test makes every run reach the first two (N = 512 in 4 partitions, as
// TestReplayDense; MaxDistinct 4,096: the smallest run has 6,700 distinct
// items per 10 s bucket), so equal peaks mean nothing else grows; with the
// defaults (4,096 x 16, 2^18) the small runs would stay below the bounds
// and differ for that reason alone. Trending off: its state is per warm
// item, bounded the same way, but its scoring adds noise. Measured
// (2026-12-01): zipf 18.5 MB, flood 22.5 MB, small flood 22.4 MB.
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
	})
	close(stop)
	<-done
	mu.Lock()
	defer mu.Unlock()
	return (top - base) / (1 << 20), rep
}
