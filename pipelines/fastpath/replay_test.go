package fastpath

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/topk-dev/topk/internal/prismopt/prismtest"
	"github.com/topk-dev/topk/internal/streams"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/publish"
	"github.com/topk-dev/topk/transforms/source"
)

func TestMain(m *testing.M) { prismtest.Main(m) }

// writeNDJSON writes events to a temporary NDJSON file in slice order.
func writeNDJSON(t *testing.T, events []schemas.Event) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "events.ndjson")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for i := range events {
		if err := enc.Encode(&events[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return path
}

// replay runs the fast path on Prism over a file of events and returns the
// report and every published list.
func replay(t *testing.T, events []schemas.Event, mutate func(*Config)) (Report, []*schemas.List) {
	t.Helper()
	rep, out := replayFile(t, writeNDJSON(t, events), mutate)
	return rep, readLists(t, out)
}

// replayFile runs the fast path over the NDJSON file at path and returns
// its report and the directory its lists went to.
func replayFile(t *testing.T, path string, mutate func(*Config)) (Report, string) {
	t.Helper()
	out := t.TempDir()
	cfg := DefaultConfig()
	spec, err := source.ParseSpec("file:" + path)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Source = spec
	// One call reads the whole file (these files take seconds), so the
	// bundles are the same in every run. When the pre-aggregation's
	// summaries were cut per bundle that decided recall (2026-12-05:
	// TestReplayDense's first-minute lists had recall@1000 0.866 in one
	// run of four with the default 1 s checkpoints); they are cut once
	// per bucket now (transforms/counter), and TestReplayDense reads in
	// small bundles on purpose (Options.BundleBeacons). The checkpoints
	// themselves are tested in transforms/source (TestFileSourceResumes).
	cfg.SourceOpts.BundleTime = 10 * time.Minute
	cfg.Publish.ListsOut = out
	cfg.DeadLetterDir = filepath.Join(out, "deadletter")
	if mutate != nil {
		mutate(&cfg)
	}
	rep, err := Run(context.Background(), cfg, BeamRunner, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rep, out
}

// readLists reads every top list under out (not the trending lists).
func readLists(t *testing.T, out string) []*schemas.List {
	t.Helper()
	var lists []*schemas.List
	if err := publish.EachTopList(out, func(l *schemas.List) error {
		lists = append(lists, l)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return lists
}

// exactIndex answers exact counts of any bucket-aligned window from per-bucket
// maps (an independent recount: plain maps over the raw events).
type exactIndex struct {
	bucket  time.Duration
	buckets map[int64]map[string]uint64 // bucket start ms -> "type\x00item" -> count
}

func newExactIndex(events []schemas.Event, bucket time.Duration) *exactIndex {
	x := &exactIndex{bucket: bucket, buckets: map[int64]map[string]uint64{}}
	seen := map[string]bool{}
	for i := range events {
		e := &events[i]
		if seen[e.EventID] {
			continue
		}
		seen[e.EventID] = true
		b := e.TS.Truncate(bucket).UnixMilli()
		m := x.buckets[b]
		if m == nil {
			m = map[string]uint64{}
			x.buckets[b] = m
		}
		m[streams.Key(e.Type, e.Item)]++
	}
	return x
}

func (x *exactIndex) window(from, to time.Time) map[string]uint64 {
	out := map[string]uint64{}
	for b := from.UnixMilli(); b < to.UnixMilli(); b += x.bucket.Milliseconds() {
		for k, c := range x.buckets[b] {
			out[k] += c
		}
	}
	return out
}

// checkLists verifies every published list against the exact recount of its
// window and returns the smallest recall at 100 and 1,000 seen.
func checkLists(t *testing.T, lists []*schemas.List, x *exactIndex, K int) (minR100, minR1000 float64) {
	t.Helper()
	minR100, minR1000 = 1, 1
	for _, l := range lists {
		from := l.AsOf.Add(-l.Window.Length())
		counts := x.window(from, l.AsOf)
		exact := map[string]uint64{}
		for k, c := range counts {
			if typ, item := streams.SplitKey(k); typ == l.Type {
				exact[item] = c
			}
		}
		name := l.Key().String() + "@" + l.AsOf.Format(time.RFC3339)
		if l.Version != l.AsOf.Unix() {
			t.Fatalf("%s: version %d, want as_of's Unix second", name, l.Version)
		}
		got := make([]string, len(l.Items))
		listed := map[string]bool{}
		for i, e := range l.Items {
			c := exact[e.Item]
			if c > e.Count {
				t.Fatalf("%s: %s under-counted: count %d, exact %d", name, e.Item, e.Count, c)
			}
			if c < e.Lower {
				t.Fatalf("%s: %s lower %d above exact %d", name, e.Item, e.Lower, c)
			}
			got[i] = e.Item
			listed[e.Item] = true
		}
		// Certification: nothing outside the first certified_k beats them.
		if k := l.CertifiedK; k > 0 {
			minIn := ^uint64(0)
			in := map[string]bool{}
			for _, e := range l.Items[:k] {
				minIn = min(minIn, exact[e.Item])
				in[e.Item] = true
			}
			for item, c := range exact {
				if !in[item] && c > minIn {
					t.Fatalf("%s: certified_k %d but %s (exact %d) outside beats %d", name, k, item, c, minIn)
				}
			}
		}
		if l.Complete && l.CertifiedK < min(K, len(exact)) {
			t.Fatalf("%s: complete with certified_k %d of %d items", name, l.CertifiedK, len(exact))
		}
		ranking := make([]streams.KV, 0, len(exact))
		for item, c := range exact {
			ranking = append(ranking, streams.KV{Key: item, Count: c})
		}
		slices.SortFunc(ranking, func(a, b streams.KV) int {
			if a.Count != b.Count {
				if a.Count > b.Count {
					return -1
				}
				return 1
			}
			return strings.Compare(a.Key, b.Key)
		})
		minR100 = min(minR100, streams.Recall(got, ranking, 100))
		minR1000 = min(minR1000, streams.Recall(got, ranking, 1000))
	}
	return minR100, minR1000
}

// checkSlides: for every window length, a list exists at every period
// whose window holds at least one event: lists slide, never skip or reset.
// (A window with no events at all has nothing to publish; readers keep the
// previous version, marked stale by the API once it is old.)
func checkSlides(t *testing.T, lists []*schemas.List, x *exactIndex, windows []schemas.Window) {
	t.Helper()
	var first, last int64 = 1 << 62, -1 << 62
	for b := range x.buckets {
		first, last = min(first, b), max(last, b)
	}
	have := map[string]bool{}
	for _, l := range lists {
		have[string(l.Window)+"@"+l.AsOf.UTC().Format(time.RFC3339)] = true
	}
	bucket := x.bucket.Milliseconds()
	for _, w := range windows {
		p, n := w.Period().Milliseconds(), w.Length().Milliseconds()
		for end := first - first%p + p; end-n <= last; end += p {
			nonEmpty := false
			for b := end - n; b < end && !nonEmpty; b += bucket {
				nonEmpty = len(x.buckets[b]) > 0
			}
			at := time.UnixMilli(end).UTC()
			if nonEmpty && !have[string(w)+"@"+at.Format(time.RFC3339)] {
				t.Fatalf("no %s list at %s", w, at.Format(time.RFC3339))
			}
		}
	}
}

var start = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

// TestReplayZipf: a synthetic Zipf stream replayed from a file; every list of
// every window holds its bounds against an exact recount, slides without a
// gap, and reaches recall 1.0 at 100 and >= 0.99 at 1,000.
func TestReplayZipf(t *testing.T) {
	n := 400_000
	if testing.Short() {
		n = 100_000
	}
	events := streams.ZipfStream(42, 1.1, 1_000_000, n, start, 1000, "video")
	rep, lists := replay(t, events, nil)
	if rep.Events != int64(n) || rep.Bad != 0 || rep.LateDropped != 0 {
		t.Fatalf("report %+v, want %d events, none bad or late", rep, n)
	}
	x := newExactIndex(events, 10*time.Second)
	checkSlides(t, lists, x, DefaultConfig().Windows)
	r100, r1000 := checkLists(t, lists, x, 1000)
	t.Logf("zipf: %d lists, min recall@100=%.4f min recall@1000=%.4f, %.0f events/s", len(lists), r100, r1000, rep.EventsPerS)
	if r100 < 1 || r1000 < 0.99 {
		t.Errorf("min recall@100=%.4f @1000=%.4f, want 1 and >= 0.99", r100, r1000)
	}
}

// TestReplayRealStreams replays the real click streams. MovieLens ratings
// span 1995-2016 in no particular order: the test sorts them by time and maps
// the span onto one hour, keeping their order and relative spacing, so the
// windows hold enough events to rank.
func TestReplayRealStreams(t *testing.T) {
	for _, name := range streams.Names() {
		t.Run(name, func(t *testing.T) {
			events, err := streams.Load(name)
			if err != nil {
				t.Fatal(err)
			}
			if name == "ml-latest-small" {
				events = compressTime(events, start, time.Hour)
			}
			rep, lists := replay(t, events, nil)
			if rep.Events != int64(len(events)) || rep.LateDropped != 0 {
				t.Fatalf("report %+v, want %d events and none late", rep, len(events))
			}
			x := newExactIndex(events, 10*time.Second)
			checkSlides(t, lists, x, DefaultConfig().Windows)
			r100, r1000 := checkLists(t, lists, x, 1000)
			t.Logf("%s: %d events, %d lists, min recall@100=%.4f min recall@1000=%.4f", name, len(events), len(lists), r100, r1000)
			if r100 < 1 || r1000 < 0.99 {
				t.Errorf("min recall@100=%.4f @1000=%.4f, want 1 and >= 0.99", r100, r1000)
			}
		})
	}
}

// compressTime sorts events by time and maps [first, last] onto [at, at+span].
func compressTime(events []schemas.Event, at time.Time, span time.Duration) []schemas.Event {
	out := slices.Clone(events)
	slices.SortStableFunc(out, func(a, b schemas.Event) int { return a.TS.Compare(b.TS) })
	first, last := out[0].TS, out[len(out)-1].TS
	total := last.Sub(first)
	for i := range out {
		frac := float64(out[i].TS.Sub(first)) / float64(total)
		out[i].TS = at.Add(time.Duration(frac * float64(span))).Truncate(time.Millisecond)
	}
	return out
}
