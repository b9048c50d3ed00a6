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
func TestStateMemoryFull(t *testing.T) {
	if testing.Short() {
		t.Skip("drives three hours of full buckets")
	}
	const n = 4096 // summary.DefaultConfig's N
	cfg := summary.Config{N: n}
	st := NewState(Config{Bucket: 10 * time.Second, Windows: testWindows, Limit: 1100})
	st.ShareResults = true
	t0 := int64(1_780_000_000_000) - int64(1_780_000_000_000)%3_600_000
	before := memtest.LiveHeap()
	var peak [3]uint64 // by hour
	c := summary.NewCounter(0)
	for k := int64(0); k < 3*360; k++ { // three hours of 10 s buckets
		b := t0 + k*bucketMs
		c.Reset()
		for i := range n {
			// A quarter of each bucket's items recur in every bucket,
			// the rest are new: every pane and aggregate stays full.
			item := fmt.Sprint("hot", i)
			if i >= n/4 {
				item = fmt.Sprint("tail", k, "-", i)
			}
			c.Add(item, summary.Hash(item), uint64(1+(n-i)/64))
		}
		if _, err := st.Add("video\x00global", b, c.Summary(cfg)); err != nil {
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
	t.Logf("one (list, partition), every bucket full (N = %d): largest live heap %.1f MB in the second hour, %.1f MB in the third", n, float64(peak[1])/1e6, float64(peak[2])/1e6)
	if peak[2] > peak[1]+peak[1]/10 {
		t.Errorf("largest heap grew from %d bytes in the second hour to %d in the third", peak[1], peak[2])
	}
	if st.Lists() != 1 {
		t.Fatalf("%d lists", st.Lists())
	}
}
