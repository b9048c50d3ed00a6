package slide

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/timers"

	"github.com/topk-dev/topk/internal/statetest"
	"github.com/topk-dev/topk/transforms/summary"
)

// faultRig drives one partition of a windowsFn (a 1m window of 10 s
// buckets, one list) through bundles against a statetest.Runner.
type faultRig struct {
	t  *testing.T
	fn *windowsFn
	sp *statetest.Runner
}

const faultList = "video\x00global"

func newFaultRig(t *testing.T) *faultRig {
	return newFaultRigWith(t, []Window{{Name: "1m", Length: time.Minute, Period: 10 * time.Second}})
}

func newFaultRigWith(t *testing.T, windows []Window) *faultRig {
	cfg := BeamConfig{
		Config: Config{Bucket: 10 * time.Second, Limit: 100, Windows: windows},
		Shards: 1, Durable: true,
	}
	return &faultRig{t: t, fn: newWindowsFn(cfg), sp: statetest.New()}
}

// add runs a bundle of one element: bucket b's set with count of "a".
func (r *faultRig) add(b int64, count uint64) error {
	r.t.Helper()
	return r.addSet(b, map[string]map[string]uint64{faultList: {"a": count}})
}

// addSet runs a bundle of one element: bucket b's set of lists' counts.
func (r *faultRig) addSet(b int64, lists map[string]map[string]uint64) error {
	r.t.Helper()
	sums := map[string]*summary.Summary{}
	for l, m := range lists {
		sums[l] = summarize(m, 8)
	}
	return r.addSums(b, sums)
}

// addSums runs a bundle of one element: bucket b's set of lists'
// summaries.
func (r *faultRig) addSums(b int64, lists map[string]*summary.Summary) error {
	r.t.Helper()
	var keys []string
	var sums []*summary.Summary
	for _, l := range slices.Sorted(maps.Keys(lists)) {
		keys, sums = append(keys, l), append(sums, lists[l])
	}
	set, err := summary.AppendSet(nil, keys, sums)
	if err != nil {
		r.t.Fatal(err)
	}
	none := func(beam.EventTime, string, []byte) {}
	return r.fn.ProcessElement(context.Background(), beam.EventTime(b+1), r.sp, statetest.NoTimers{}, "p0", set, none, none)
}

// bundle runs a bundle of one element (add) that succeeds, and commits
// it.
func (r *faultRig) bundle(b int64, count uint64) {
	r.t.Helper()
	if err := r.add(b, count); err != nil {
		r.t.Fatal(err)
	}
	r.sp.Commit()
}

// faultT0 is the first bucket the fault tests add.
const faultT0 = int64(1_780_000_000_000)

// fireAll runs the slide ending at end as a bundle of its own and returns
// what it emitted: result key (window and shard) + list -> the list's
// window summary, encoded. The caller commits or aborts.
func (r *faultRig) fireAll(end int64) (map[string]string, error) {
	r.t.Helper()
	got := map[string]string{}
	emit := func(_ beam.EventTime, key string, set []byte) {
		err := summary.EachInSet(set, func(list string, smb []byte) error {
			got[key+"\x00"+list] = string(smb)
			return nil
		})
		if err != nil {
			r.t.Fatal(err)
		}
	}
	none := func(beam.EventTime, string, []byte) {}
	tc := timers.Context{Family: r.fn.Slide.Family, Tag: strconv.FormatInt(end, 10)}
	err := r.fn.OnTimer(context.Background(), beam.EventTime(end), r.sp, statetest.NoTimers{}, "p0", tc, emit, none)
	return got, err
}

// fire is fireAll returning the list's count of "a" in its 1m window (0
// if the slide emitted none).
func (r *faultRig) fire(end int64) (uint64, error) {
	r.t.Helper()
	all, err := r.fireAll(end)
	var got uint64
	for k, smb := range all {
		if !strings.HasSuffix(k, "\x00"+faultList) {
			continue
		}
		sm, err := summary.Unmarshal([]byte(smb))
		if err != nil {
			r.t.Fatal(err)
		}
		if e := sm.Find("a"); e != nil {
			got = e.Lo
		}
	}
	return got, err
}

// slide is fire, succeeding and committed.
func (r *faultRig) slide(end int64) uint64 {
	r.t.Helper()
	got, err := r.fire(end)
	if err != nil {
		r.t.Fatal(err)
	}
	r.sp.Commit()
	return got
}

// A bundle that fails after its element changed the cached State (here a
// state write fails) is retried: the retry counts the bucket once. The
// cache must not keep the failed bundle's change, which the runner
// discarded with its state writes.
func TestWindowsFnRetryAfterFailedWrite(t *testing.T) {
	r := newFaultRig(t)
	t0 := faultT0
	r.bundle(t0, 3)
	r.sp.FailWrites = 1 // the pane's write fails
	if err := r.add(t0+bucketMs, 5); !errors.Is(err, statetest.ErrDown) {
		t.Fatalf("bundle with a failed write: %v, want %v", err, statetest.ErrDown)
	}
	r.sp.Abort()
	r.bundle(t0+bucketMs, 5) // the retry
	if got := r.slide(t0 + 2*bucketMs); got != 8 {
		t.Fatalf("a counts %d after the retry, want 3 + 5 = 8", got)
	}
}

// A bundle whose state writes the runner discards after the DoFn returned
// (a later step of the bundle failed), then a bundle processed elsewhere
// (another worker, which rebuilt from Beam state), then the key back on
// this worker: its cache holds the failed bundle's State, and must see
// that Beam state moved on without it.
func TestWindowsFnCacheAfterBundleElsewhere(t *testing.T) {
	r := newFaultRig(t)
	t0 := faultT0
	r.bundle(t0, 3)
	if err := r.add(t0+bucketMs, 100); err != nil {
		t.Fatal(err)
	}
	r.sp.Abort() // the bundle failed after this step
	// Another worker takes the key: it has no cache for it.
	k := r.fn.ID + "\x00p0"
	mine, _ := cache.Load(k)
	cache.Delete(k)
	r.bundle(t0+bucketMs, 5)
	cache.Store(k, mine) // back on this worker
	if got := r.slide(t0 + 2*bucketMs); got != 8 {
		t.Fatalf("a counts %d, want 3 + 5 = 8 (the discarded bundle's 100 must not count)", got)
	}
}

// A slide whose bundle fails (here the write of the last slide fired) is
// retried and emits the window: the cache must not keep the failed
// slide's "fired", or the retry would take it for a slide armed twice and
// emit nothing, and the lists of that as_of would never be published.
func TestWindowsFnSlideRetry(t *testing.T) {
	r := newFaultRig(t)
	r.bundle(faultT0, 3)
	r.sp.FailWrites = 1
	if _, err := r.fire(faultT0 + bucketMs); !errors.Is(err, statetest.ErrDown) {
		t.Fatalf("slide with a failed write: %v, want %v", err, statetest.ErrDown)
	}
	r.sp.Abort()
	if got := r.slide(faultT0 + bucketMs); got != 3 {
		t.Fatalf("the retried slide emitted a = %d, want 3", got)
	}
}

// Bundles that fail in every way a runner sees (a state write that fails,
// a bundle discarded after the DoFn returned, the key processed meanwhile
// by another worker, or several of these before one attempt commits)
// change nothing: over two hours of buckets for two lists, with late
// buckets, every slide of every window (1m, 5m, 1h) emits what a run
// without failures emits, byte for byte. Few items, so no summary cuts
// and a State rebuilt from Beam state merges to the same summaries.
func TestWindowsFnRandomFailures(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	clean, faulty := newFaultRigWith(t, testWindows), newFaultRigWith(t, testWindows)
	lists := []string{faultList, "hashtag\x00IN"}
	failures := map[string]int{}
	emitted := 0 // window summaries emitted without failures
	// attempt runs one bundle on faulty until one attempt commits, each
	// attempt failing at random first; it returns the committed attempt's
	// output.
	attempt := func(run func() (map[string]string, error)) map[string]string {
		for {
			ck := faulty.fn.ID + "\x00p0" // the partition's cache key
			switch rng.IntN(8) {
			case 0: // a state write fails
				failures["write"]++
				faulty.sp.FailWrites = 1 + rng.IntN(3)
				if _, err := run(); err == nil {
					// the bundle made fewer writes than failWrites
					faulty.sp.FailWrites = 0
					faulty.sp.Abort()
					continue
				}
				faulty.sp.FailWrites = 0
				faulty.sp.Abort()
			case 1: // discarded after the DoFn returned
				failures["discarded"]++
				if _, err := run(); err != nil {
					t.Fatal(err)
				}
				faulty.sp.Abort()
			case 2: // committed by another worker; this one's cache left stale
				failures["elsewhere"]++
				mine, _ := cache.Load(ck)
				cache.Delete(ck)
				out, err := run()
				if err != nil {
					t.Fatal(err)
				}
				faulty.sp.Commit()
				if mine != nil {
					cache.Store(ck, mine)
				}
				return out
			default:
				out, err := run()
				if err != nil {
					t.Fatal(err)
				}
				faulty.sp.Commit()
				return out
			}
		}
	}
	for k := int64(0); k < 720; k++ { // two hours of 10 s buckets
		b := faultT0 + k*bucketMs
		buckets := []int64{b}
		if k > 3 && rng.IntN(10) == 0 {
			buckets = append(buckets, b-int64(1+rng.IntN(3))*bucketMs) // late
		}
		for _, bk := range buckets {
			set := map[string]map[string]uint64{}
			for _, l := range lists {
				if rng.IntN(4) == 0 {
					continue
				}
				m := map[string]uint64{}
				for range 1 + rng.IntN(3) {
					m[string(rune('a'+rng.IntN(5)))] += uint64(1 + rng.IntN(4))
				}
				set[l] = m
			}
			if len(set) == 0 {
				continue
			}
			if err := clean.addSet(bk, set); err != nil {
				t.Fatal(err)
			}
			clean.sp.Commit()
			attempt(func() (map[string]string, error) { return nil, faulty.addSet(bk, set) })
		}
		end := b + bucketMs
		want, err := clean.fireAll(end)
		if err != nil {
			t.Fatal(err)
		}
		clean.sp.Commit()
		emitted += len(want)
		got := attempt(func() (map[string]string, error) { return faulty.fireAll(end) })
		if !maps.Equal(got, want) {
			t.Fatalf("slide at bucket %d: with failures %d results, without %d, or they differ (failures so far %v)", k, len(got), len(want), failures)
		}
	}
	for _, f := range []string{"write", "discarded", "elsewhere"} {
		if failures[f] < 50 {
			t.Fatalf("only %d %q failures: %v", failures[f], f, failures)
		}
	}
	if emitted < 2000 {
		t.Fatalf("only %d window summaries emitted: the test compares too little", emitted)
	}
	t.Logf("failures injected: %v; %d window summaries compared", failures, emitted)
}

// A busy list's panes come back from Beam state as they were made: every
// bucket and minute, entries and Drops, equal to the summaries the test
// made in memory (never encoded). Its buckets are cut to N from thousands
// of items, so each keeps a dense summary.Drops, held and written in the
// planes encoding (summary.AppendBinary), and each minute the sum of six
// of them (the other restore tests' summaries are small, with no Drops).
// After the restore, the windows answer as the State that never lost its
// cache, byte for byte: every bucket keeps the same five items, so no
// merge cuts and the merge order cannot matter.
func TestWindowsFnRestoresBusyPanes(t *testing.T) {
	clean, restored := newFaultRigWith(t, testWindows), newFaultRigWith(t, testWindows)
	c := summary.NewCounter(0)
	made := map[int64]*summary.Summary{} // bucket start -> its summary
	bucket := func(b int64) *summary.Summary {
		c.Reset()
		for i, it := range []string{"a", "b", "c", "d", "e"} {
			c.Add(it, summary.Hash(it), uint64(3+i)+uint64(b/bucketMs%3))
		}
		// Dropped: 6,000 items (24,000 of the Drops' 131,072 cells set),
		// one in 16 counted twice (cells of 2, listed after the bitmap).
		for i := range 6000 {
			it := "tail" + strconv.FormatInt(b, 10) + "-" + strconv.Itoa(i)
			c.Add(it, summary.Hash(it), 1+uint64(i%16/15))
		}
		made[b] = c.Summary(summary.Config{N: 5})
		return made[b]
	}
	planes := 0
	step := func(k int64) {
		b := faultT0 + k*bucketMs
		sm := bucket(b)
		if enc, _ := sm.MarshalBinary(); len(enc) > 16<<10 && len(enc) < 24<<10 {
			planes++ // a 16 KiB bitmap and a short list: not sparse, not the 64 KiB array
		}
		var want map[string]string
		for _, r := range []*faultRig{clean, restored} {
			if err := r.addSums(b, map[string]*summary.Summary{faultList: sm}); err != nil {
				t.Fatal(err)
			}
			r.sp.Commit()
			got, err := r.fireAll(b + bucketMs)
			if err != nil {
				t.Fatal(err)
			}
			r.sp.Commit()
			if r == clean {
				want = got
			} else if !maps.Equal(got, want) {
				t.Fatalf("bucket %d: the restored State's %d results differ from the clean one's %d", k, len(got), len(want))
			}
		}
	}
	const minutes = 70
	for k := range int64(minutes * 6) {
		step(k)
	}
	if planes != minutes*6 {
		t.Fatalf("%d of %d buckets encoded as planes", planes, minutes*6)
	}
	key := restored.fn.ID + "\x00p0"
	cache.Delete(key) // a new worker: it rebuilds from Beam state
	e, err := restored.fn.load(context.Background(), restored.sp, "p0")
	if err != nil {
		t.Fatal(err)
	}
	levels := e.st.Levels()
	n := 0
	for li, size := range levels {
		err := e.st.Panes(li, func(list string, start int64, sm *summary.Summary, packed []byte) {
			n++
			if packed != nil {
				var err error
				if sm, err = summary.Unmarshal(packed); err != nil {
					t.Fatal(err)
				}
			}
			// What the pane holds: its buckets merged in start order.
			var want *summary.Summary
			for b := start; b < start+size; b += bucketMs {
				switch {
				case made[b] == nil:
				case want == nil:
					want = made[b]
				default:
					if want, err = summary.MergeEvents(want, made[b]); err != nil {
						t.Fatal(err)
					}
				}
			}
			if want == nil || want.Dropped == nil || !summary.Equal(sm, want) {
				t.Fatalf("level %d, pane at %d: restored %d entries, not what its buckets hold", li, start, len(sm.Entries))
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	e.mu.Unlock()
	if n < 80 { // 30 buckets (the 5m window's) and most of an hour's minutes
		t.Fatalf("restored %d panes", n)
	}
	for k := int64(minutes * 6); k < (minutes+10)*6; k++ { // ten more minutes
		step(k)
	}
}
