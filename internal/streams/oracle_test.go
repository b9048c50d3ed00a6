package streams

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/topk-dev/topk/schemas"
)

var t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

func ev(id, typ, item string, sec int) schemas.Event {
	return schemas.Event{EventID: id, Type: typ, Item: item, TS: t0.Add(time.Duration(sec) * time.Second)}
}

// TestExactCounts checks the oracle against a hand count: duplicates by
// event_id dropped (first wins, even outside the window), the window
// half-open [from, to), zero bounds unbounded, type part of the key.
func TestExactCounts(t *testing.T) {
	events := []schemas.Event{
		ev("1", "video", "a", 0),
		ev("2", "video", "a", 10),
		ev("3", "video", "b", 10),
		ev("2", "video", "b", 20), // duplicate of "2": dropped
		ev("4", "hashtag", "a", 30),
		ev("5", "video", "a", 60), // at `to` below: excluded
		ev("6", "video", "c", -1), // before `from`: excluded
		ev("6", "video", "c", 5),  // duplicate of an excluded event: still dropped
		ev("", "video", "d", 1),   // empty ids never dedupe
		ev("", "video", "d", 2),
	}
	tests := []struct {
		name     string
		from, to time.Time
		want     map[string]uint64
	}{
		{"unbounded", time.Time{}, time.Time{}, map[string]uint64{
			Key("video", "a"): 3, Key("video", "b"): 1, Key("hashtag", "a"): 1, Key("video", "c"): 1, Key("video", "d"): 2}},
		{"[0s, 60s)", t0, t0.Add(time.Minute), map[string]uint64{
			Key("video", "a"): 2, Key("video", "b"): 1, Key("hashtag", "a"): 1, Key("video", "d"): 2}},
		{"from only", t0.Add(10 * time.Second), time.Time{}, map[string]uint64{
			Key("video", "a"): 2, Key("video", "b"): 1, Key("hashtag", "a"): 1}},
		{"to only", time.Time{}, t0.Add(10 * time.Second), map[string]uint64{
			Key("video", "a"): 1, Key("video", "c"): 1, Key("video", "d"): 2}},
		{"empty window", t0.Add(time.Hour), t0.Add(2 * time.Hour), map[string]uint64{}},
	}
	for _, tc := range tests {
		got := ExactCounts(events, tc.from, tc.to)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
	if typ, item := SplitKey(Key("video", "a/b")); typ != "video" || item != "a/b" {
		t.Errorf("SplitKey = %q, %q", typ, item)
	}
}

// TestExactCountsOnRealSlice checks the oracle on the first 20 NASA requests
// against counts read by hand from the log.
func TestExactCountsOnRealSlice(t *testing.T) {
	events, err := Load("nasa-http")
	if err != nil {
		t.Fatal(err)
	}
	got := ExactCounts(events[:20], time.Time{}, time.Time{})
	// zcat nasa-access-log-small.gz | head -20 | awk '{print $7}' | sort | uniq -c
	want := map[string]uint64{
		"/":                                                 1,
		"/facts/about_ksc.html":                             1,
		"/history/apollo/":                                  1,
		"/images/KSC-logosmall.gif":                         2,
		"/images/NASA-logosmall.gif":                        3,
		"/images/ksclogo-medium.gif":                        1,
		"/images/launch-logo.gif":                           1,
		"/shuttle/countdown/":                               2,
		"/shuttle/countdown/count.gif":                      2,
		"/shuttle/countdown/countdown.html":                 1,
		"/shuttle/countdown/liftoff.html":                   1,
		"/shuttle/countdown/video/livevideo.gif":            1,
		"/shuttle/missions/sts-71/images/KSC-95EC-0916.jpg": 1,
		"/shuttle/missions/sts-73/mission-sts-73.html":      1,
		"/shuttle/missions/sts-73/sts-73-patch-small.gif":   1,
	}
	wantKeys := map[string]uint64{}
	for item, c := range want {
		wantKeys[Key("path", item)] = c
	}
	if fmt.Sprint(got) != fmt.Sprint(wantKeys) {
		t.Errorf("got %v\nwant %v", got, wantKeys)
	}
}

// TestTopK checks the order (count descending, key ascending on ties), the
// cut at k, and that k <= 0 or k beyond the keys returns everything.
func TestTopK(t *testing.T) {
	counts := map[string]uint64{"d": 1, "b": 5, "a": 5, "c": 7, "e": 0}
	all := []KV{{"c", 7}, {"a", 5}, {"b", 5}, {"d", 1}, {"e", 0}}
	if got := TopK(counts, 0); !slices.Equal(got, all) {
		t.Errorf("TopK(0) = %v, want %v", got, all)
	}
	if got := TopK(counts, 10); !slices.Equal(got, all) {
		t.Errorf("TopK(10) = %v, want %v", got, all)
	}
	if got := TopK(counts, 2); !slices.Equal(got, all[:2]) {
		t.Errorf("TopK(2) = %v, want %v", got, all[:2])
	}
	if got := TopK(nil, 3); len(got) != 0 {
		t.Errorf("TopK(nil) = %v", got)
	}
}

// TestRecall checks recall at k with ties at the k-th count: any item tied
// with the k-th exact count is a hit, items below it or unknown are misses,
// repeated keys count once, and only the first k answers are graded.
func TestRecall(t *testing.T) {
	exact := TopK(map[string]uint64{"a": 9, "b": 7, "c": 5, "d": 5, "e": 5, "f": 2}, 0)
	tests := []struct {
		name string
		got  []string
		k    int
		want float64
	}{
		{"exact answer", []string{"a", "b", "c"}, 3, 1},
		{"tie at k: d instead of c", []string{"a", "b", "d"}, 3, 1},
		{"tie at k: e, in any order", []string{"e", "a", "b"}, 3, 1},
		{"below the cut", []string{"a", "b", "f"}, 3, 2.0 / 3},
		{"unknown key", []string{"a", "zz", "b"}, 3, 2.0 / 3},
		{"repeated key counts once", []string{"a", "a", "a"}, 3, 1.0 / 3},
		{"short answer", []string{"a"}, 3, 1.0 / 3},
		{"only the first k graded", []string{"f", "a", "b", "c"}, 3, 2.0 / 3},
		{"all ties at k=4 hit", []string{"a", "c", "d", "e"}, 4, 1},
		{"k beyond exact", []string{"a", "b", "c", "d", "e", "f"}, 10, 1},
		{"k beyond exact, partial", []string{"a", "b", "c"}, 10, 3.0 / 6},
		{"k = 0", nil, 0, 1},
		{"empty answer", nil, 2, 0},
	}
	for _, tc := range tests {
		if got := Recall(tc.got, exact, tc.k); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: Recall = %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := Recall([]string{"x"}, nil, 5); got != 1 {
		t.Errorf("Recall against an empty truth = %v, want 1", got)
	}
}

// TestZipfStream checks that the synthetic stream is deterministic for a
// seed (and differs across seeds), has the documented ids, items and steady
// ts, and is skewed: rank 1 is the most frequent item, and ranks 1 and 2
// come close to the Zipf ratio 2^s.
func TestZipfStream(t *testing.T) {
	start := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	a := ZipfStream(42, 1.1, 10_000, 100_000, start, 1000, "video")
	b := ZipfStream(42, 1.1, 10_000, 100_000, start, 1000, "video")
	c := ZipfStream(43, 1.1, 10_000, 100_000, start, 1000, "video")
	if !slices.Equal(a, b) {
		t.Fatal("same seed, different streams")
	}
	if slices.Equal(a, c) {
		t.Fatal("different seeds, same stream")
	}
	if len(a) != 100_000 || a[0].EventID != "z42-0" || a[99_999].EventID != "z42-99999" {
		t.Fatalf("ids: %q .. %q", a[0].EventID, a[len(a)-1].EventID)
	}
	var v schemas.Validator
	for i, e := range a {
		if want := start.Add(time.Duration(i) * time.Millisecond); !e.TS.Equal(want) {
			t.Fatalf("event %d ts %v, want %v", i, e.TS, want)
		}
		if err := v.Validate(&e, start); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	top := TopK(ExactCounts(a, time.Time{}, time.Time{}), 2)
	if top[0].Key != Key("video", "i1") || top[1].Key != Key("video", "i2") {
		t.Fatalf("top 2 = %v, want i1, i2", top)
	}
	if r := float64(top[0].Count) / float64(top[1].Count); math.Abs(r-math.Pow(2, 1.1)) > 0.15 {
		t.Errorf("count(i1)/count(i2) = %.3f, want about 2^1.1 = %.3f", r, math.Pow(2, 1.1))
	}
	if got := ZipfStream(1, 0.8, 5, 0, start, 1, "t"); len(got) != 0 {
		t.Errorf("n = 0 gave %d events", len(got))
	}
}
