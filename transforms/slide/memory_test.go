package slide

import (
	"fmt"
	"testing"
	"time"

	"github.com/topk-dev/topk/internal/memtest"
	"github.com/topk-dev/topk/transforms/summary"
)

// TestStateMemoryFull: the memory of one (list, partition) whose every
// bucket is full (N distinct items, each bucket's items mostly new, as a
// busy list over a long tail is) stops growing once the 1h window is
// full: its largest live heap over the third hour is at most 10% above
// the second's (within an hour it rises and falls as the 1h window's
// two-stacks flip), and the figure per (list, partition) is logged
// (BENCHMARKS.md: the job's heap is about lists x partitions x this).
// With the minutes cut to UpperN = N/2 and N/4 the state is smaller than
// with whole minutes, by at least a fifth and a third, and with the
// aggregates cut to N/4 as well, by at least 40%. (Each pane and
// aggregate that dropped items also keeps its summary.Drops, up to 64 KiB
// whatever its N: here every minute and aggregate does. Without Drops the
// last saving was above a half: 10.9 against 24.3 MB.)
func TestStateMemoryFull(t *testing.T) {
	if testing.Short() {
		t.Skip("drives three hours of full buckets")
	}
	const n = 4096 // summary.DefaultConfig's N
	var full uint64
	for _, c := range []struct {
		upperN, aggN int
		saves        float64 // the least share of the whole minutes' heap saved
	}{{0, 0, 0}, {n / 2, 0, 0.2}, {n / 4, 0, 1.0 / 3}, {n / 4, n / 4, 0.4}} {
		peak := stateMemoryFull(t, n, c.upperN, c.aggN)
		t.Logf("one (list, partition), every bucket full (N = %d, minutes' N %d, aggregates' N %d): largest live heap %.1f MB in the second hour, %.1f MB in the third", n, c.upperN, c.aggN, float64(peak[1])/1e6, float64(peak[2])/1e6)
		if peak[2] > peak[1]+peak[1]/10 {
			t.Errorf("minutes' N %d, aggregates' %d: largest heap grew from %d bytes in the second hour to %d in the third", c.upperN, c.aggN, peak[1], peak[2])
		}
		if c.upperN == 0 {
			full = peak[2]
		} else if float64(peak[2]) > float64(full)*(1-c.saves) {
			t.Errorf("minutes' N %d, aggregates' %d: largest heap %d bytes, not %.0f%% below the whole minutes' %d", c.upperN, c.aggN, peak[2], 100*c.saves, full)
		}
	}
}

// stateMemoryFull drives three hours of full buckets through one list of a
// State and returns its largest live heap by hour.
func stateMemoryFull(t *testing.T, n, upperN, aggN int) (peak [3]uint64) {
	cfg := summary.Config{N: n}
	st := NewState(Config{Bucket: 10 * time.Second, Windows: testWindows, Limit: 1100, UpperN: upperN, AggN: aggN})
	st.ShareResults = true
	t0 := int64(1_780_000_000_000) - int64(1_780_000_000_000)%3_600_000
	before := memtest.LiveHeap()
	c := summary.NewCounter(0)
	for k := int64(0); k < 3*360; k++ { // three hours of 10 s buckets
		b := t0 + k*bucketMs
		if _, err := st.Add("video\x00global", b, fullBucket(c, cfg, k)); err != nil {
			t.Fatal(err)
		}
		if err := st.Fire(b+bucketMs, func(Result) error { return nil }, nil); err != nil {
			t.Fatal(err)
		}
		if k%6 == 5 && k >= 360 { // once a minute from the second hour
			h := k / 360
			if live := memtest.LiveHeap(); live > before {
				peak[h] = max(peak[h], live-before)
			}
		}
	}
	if st.Lists() != 1 {
		t.Fatalf("%d lists", st.Lists())
	}
	return peak
}

// fullBucket is bucket k of a busy list's partition: cfg.N items, a
// quarter of them in every bucket, the rest new, so that every pane and
// aggregate stays full. c is reset and reused.
func fullBucket(c *summary.Counter, cfg summary.Config, k int64) *summary.Summary {
	c.Reset()
	for i := range cfg.N {
		item := fmt.Sprint("hot", i)
		if i >= cfg.N/4 {
			item = fmt.Sprint("tail", k, "-", i)
		}
		c.Add(item, summary.Hash(item), uint64(1+(cfg.N-i)/64))
	}
	return c.Summary(cfg)
}
