package slide

import (
	"fmt"
	"runtime"
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
// The closed minutes, the buckets a minute old and the fronts' block
// aggregates are held packed (see pane), the minutes and the 1h window's
// packed aggregates compressed as well, and the 1h window's rebuilt
// blocks held packed too (see TwoStacks.top): at least a third less than
// with everything decoded (10.7 against 29.9 MB when written). With the
// minutes cut to UpperN = N/2 and N/4 the state is smaller than with
// whole minutes, by at least 5% and 10% (9.7 and 9.1 MB), and with the
// aggregates cut to N/4 as well by at least 25% (7.4 MB); compression
// (with the rebuilt blocks it lets wait packed) saves at least 30% of
// that state (11.2 MB packed without it; 27% before the rebuilt blocks
// were packed, 8.2 MB). (Each pane and aggregate
// that dropped items also keeps its summary.Drops, up to 64 KiB whatever
// its N and packed or not: here every minute and aggregate does.) The
// figures are without the compressor's own buffers, made once a process
// (about 3.5 MB; until 2026-12-07 they counted in the first compressed
// case: 15.6-16.2 MB). The buckets above hold exactly N items, so they keep
// no Drops; a busy list's buckets at 1M events/s are cut to N from many
// more items (the bucket merge's partials keep up to 8N each), and each
// keeps a dense Drops (64 KiB decoded, about 20 KiB encoded: see
// summary.AppendBinary's planes): the last case, buckets cut from 4N
// items, logs that state (10.1 against 7.4 MB at the defaults when
// written; 10.9 before the 1h window's rebuilt blocks were packed, 11.4
// before decompressed minutes were let go and 12.6 before the planes: the
// figure for a busy list's heap).
func TestStateMemoryFull(t *testing.T) {
	if testing.Short() {
		t.Skip("drives three hours of full buckets")
	}
	const n = 4096 // summary.DefaultConfig's N
	// The compressor's encoder and decoder are made once a process, at the
	// first zip (about 3.5 MB, its history buffers): made here, before any
	// case's baseline, they count in none. (Made inside the first zipped
	// case, they counted there, and which case that was depended on the
	// tests run before this one.)
	// Each of its pooled encoders (one a processor) grows its history to
	// the largest input it has seen: a full bucket, through every one.
	warm := fullBucket(summary.NewCounter(0), summary.Config{N: n}, 4, 0)
	for range 2 * runtime.GOMAXPROCS(0) {
		zipped, err := pack(warm, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := (&pane{packed: zipped, zipped: true}).get(); err != nil {
			t.Fatal(err)
		}
	}
	warm = nil
	var unpacked, full, unzipped uint64
	for _, c := range []struct {
		upperN, aggN  int
		noPack, noZip bool
		saves         float64 // the least share of the whole minutes' heap saved
	}{{0, 0, true, false, 0}, {0, 0, false, false, 0}, {n / 2, 0, false, false, 0.05}, {n / 4, 0, false, false, 0.1}, {n / 4, n / 4, false, true, 0}, {n / 4, n / 4, false, false, 0.25}} {
		peak := stateMemoryFull(t, n, 1, c.upperN, c.aggN, c.noPack, c.noZip)
		t.Logf("one (list, partition), every bucket full (N = %d, minutes' N %d, aggregates' N %d, packed %v, minutes compressed %v): largest live heap %.1f MB in the second hour, %.1f MB in the third", n, c.upperN, c.aggN, !c.noPack, !c.noPack && !c.noZip, float64(peak[1])/1e6, float64(peak[2])/1e6)
		if peak[2] > peak[1]+peak[1]/10 {
			t.Errorf("minutes' N %d, aggregates' %d: largest heap grew from %d bytes in the second hour to %d in the third", c.upperN, c.aggN, peak[1], peak[2])
		}
		switch {
		case c.noPack:
			unpacked = peak[2]
		case c.upperN == 0:
			full = peak[2]
			if float64(full) > float64(unpacked)*2/3 {
				t.Errorf("packed: largest heap %d bytes, not a third below the unpacked state's %d", full, unpacked)
			}
		case c.noZip:
			unzipped = peak[2]
		case float64(peak[2]) > float64(full)*(1-c.saves):
			t.Errorf("minutes' N %d, aggregates' %d: largest heap %d bytes, not %.0f%% below the whole minutes' %d", c.upperN, c.aggN, peak[2], 100*c.saves, full)
		case unzipped > 0 && float64(peak[2]) > float64(unzipped)*0.7:
			t.Errorf("minutes compressed: largest heap %d bytes, not 30%% below the same state's uncompressed %d", peak[2], unzipped)
		}
	}
	peak := stateMemoryFull(t, n, 4, n/4, n/4, false, false)
	t.Logf("one (list, partition), every bucket cut from 4N items (with Drops, as a busy list's at 1M events/s), minutes and aggregates at N/4: largest live heap %.1f MB in the second hour, %.1f MB in the third", float64(peak[1])/1e6, float64(peak[2])/1e6)
	if peak[2] > peak[1]+peak[1]/10 {
		t.Errorf("buckets with Drops: largest heap grew from %d bytes in the second hour to %d in the third", peak[1], peak[2])
	}
}

// stateMemoryFull drives three hours of full buckets (each cut to n from
// mult x n items) through one list of a State and returns its largest
// live heap by hour.
func stateMemoryFull(t *testing.T, n, mult, upperN, aggN int, noPack, noZip bool) (peak [3]uint64) {
	cfg := summary.Config{N: n}
	st := NewState(Config{Bucket: 10 * time.Second, Windows: testWindows, Limit: 1100, UpperN: upperN, AggN: aggN})
	st.noPack, st.noZip = noPack, noZip
	st.ShareResults = true
	t0 := int64(1_780_000_000_000) - int64(1_780_000_000_000)%3_600_000
	before := memtest.LiveHeap()
	c := summary.NewCounter(0)
	for k := int64(0); k < 3*360; k++ { // three hours of 10 s buckets
		b := t0 + k*bucketMs
		if _, err := st.Add("video\x00global", b, fullBucket(c, cfg, mult, k)); err != nil {
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

// fullBucket is bucket k of a busy list's partition: mult x cfg.N items
// (cut to cfg.N, so with a Drops when mult > 1: the items past the first
// cfg.N counted once or twice), cfg.N/4 of them in every bucket, the rest
// new, so that every pane and aggregate stays full. c is reset and
// reused.
func fullBucket(c *summary.Counter, cfg summary.Config, mult int, k int64) *summary.Summary {
	c.Reset()
	for i := range mult * cfg.N {
		item := fmt.Sprint("hot", i)
		if i >= cfg.N/4 {
			item = fmt.Sprint("tail", k, "-", i)
		}
		n := 1 + (cfg.N-i)/64 // the first N
		if i >= cfg.N {
			// The long tail a cut drops: 1, one in 64 twice, as the
			// dropped items of a busy list's bucket are.
			n = 1 + i%64/63
		}
		c.Add(item, summary.Hash(item), uint64(n))
	}
	return c.Summary(cfg)
}
