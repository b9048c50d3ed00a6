package fastpath

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/topk-dev/topk/internal/streams"
	"github.com/topk-dev/topk/schemas"
)

// The fast path at scale (issue 9's tests): every (type, scope, window) list
// at every as_of against an exact recount by (type, scope, item)
// (scopecheck_test.go).

// genScoped returns the stream of spec as a slice.
func genScoped(spec streams.ScopedSpec) []schemas.Event {
	var events []schemas.Event
	streams.GenScoped(spec, func(e *schemas.Event) { events = append(events, *e) })
	return events
}

// TestReplayScopes: a stream of three types from 8 countries and their 24
// ISO regions, replayed with the default configuration (scopes on, minimum
// counts 3/5/10). Every published list of every (type, scope, window) at
// every as_of, against the exact recount of its scope over [as_of-length,
// as_of): no under-count, lower <= exact, certified_k honest, complete
// never false, non-global lists hold exactly the items at or above the
// minimum (within bounds), recall@100 = 1 and recall@1000 >= 0.999 on every
// list with at least 1,000 items at or above its minimum, and every window
// slides (a list at every period while its window holds a qualifying item).
func TestReplayScopes(t *testing.T) {
	spec := streams.ScopedSpec{
		Seed: 9, Events: 240_000, Start: start, Span: 12 * time.Minute,
		Items: 200_000, Zipf: 1.1, HashtagItems: 50_000,
		HashtagShare: 0.15, SearchShare: 0.25, Countries: 8,
	}
	if testing.Short() {
		spec.Events, spec.Span = 60_000, 6*time.Minute
	}
	events := genScoped(spec)
	began := time.Now()
	rep, lists := replay(t, events, nil)
	if rep.Events != int64(len(events)) || rep.Bad != 0 || rep.LateDropped != 0 {
		t.Fatalf("report %+v, want %d events, none bad or late", rep, len(events))
	}
	cfg := DefaultConfig()
	x := newScopedExact(events, cfg.Preagg.Bucket, true)
	rs := checkScoped(t, lists, x, cfg.Windows, scopeChecks{
		K: cfg.Lists.K, Margin: cfg.Lists.Margin, MinCount: cfg.MinCount,
		RequireComplete: true, Recall100: true, MinR1000: 0.999, Slides: true, ExactTotal: true,
	})
	t.Logf("scopes: %d events, %d lists checked, replay %.0f events/s, %v in all", len(events), len(rs), rep.EventsPerS, time.Since(began).Round(time.Second))
	recallSummary(t, "scopes", rs)
}

// denseStream: n events of one type at rate events/s, two thirds drawn from
// Zipf(s = 1.0) over items (the ranks around 1,000 have close counts) and
// one third one-off items, a long tail no summary can hold.
func denseStream(seed, items uint64, n int, rate float64) []schemas.Event {
	events := streams.ZipfStream(seed, 1.0, items, n, start, rate, "video")
	for i := range events {
		if i%3 == 2 {
			events[i].Item = "once" + strconv.Itoa(i)
		}
	}
	return events
}

// TestReplayDense: every 10 s bucket holds about 40,000 events and 25,000
// distinct items, far more than the summaries track (N = 512 in each of 4
// partitions: 2,048 per list and bucket, still above K + margin; a closed
// minute keeps 256 per partition, 1,024 per list, and a window's
// aggregates 448), so the approximation itself is exercised: merges drop
// items and raise Theta.
// Same properties as TestReplayScopes: no under-count, lower <= exact,
// certified_k honest, complete consistent with certified_k, every window
// slides; recall@100 = 1 on every list with 1,000 items, and recall@1000 at
// least denseMinR1000, the figure measured (see the log).
func TestReplayDense(t *testing.T) {
	n, rate := 480_000, 4000.0 // 12 buckets of 40,000
	if testing.Short() {
		n = 240_000 // 6 buckets as dense
	}
	events := denseStream(7, 200_000, n, rate)
	began := time.Now()
	rep, lists := replay(t, events, func(c *Config) {
		c.Preagg.Summary.N, c.Preagg.Partitions = 512, 4
		c.MinuteN, c.AggN = 256, 448 // both cut: 1,024 and 1,792 entries per list
		c.Trending = false
		c.SourceOpts.BundleBeacons = denseBundleBeacons
	})
	if rep.Events != int64(n) || rep.Bad != 0 || rep.LateDropped != 0 {
		t.Fatalf("report %+v, want %d events, none bad or late", rep, n)
	}
	cfg := DefaultConfig()
	x := newScopedExact(events, cfg.Preagg.Bucket, true)
	distinct := map[string]bool{}
	for _, items := range x.buckets[x.first] {
		for it := range items {
			distinct[it] = true
		}
	}
	rs := checkScoped(t, lists, x, cfg.Windows, scopeChecks{
		K: cfg.Lists.K, Margin: cfg.Lists.Margin, MinCount: cfg.MinCount,
		RequireComplete: false, Recall100: true, MinR1000: denseMinR1000, Slides: true, ExactTotal: true,
	})
	t.Logf("dense: %d events, %d distinct items in the first bucket, %d lists checked, replay %.0f events/s, %v in all",
		n, len(distinct), len(rs), rep.EventsPerS, time.Since(began).Round(time.Second))
	recallSummary(t, "dense", rs)
}

// TestReplayDenseDefaults: the dense replay at issue 9's density with the
// configuration a job runs with (N = 4,096 in each of 16 partitions,
// minutes and aggregates cut to 1,100 a partition; only trending is off,
// which this test does not check), the file read in bundles of one second
// of the stream (40 beacons, 20,000 events) as live, so a bucket's counts
// reach the bucket merge as ten partial summaries. Each 10 s bucket holds
// 200,000 events, a third of them one-off items and the rest Zipf(1.0)
// over a million items: about 120,000 distinct items a bucket against the
// 65,536 a list's bucket tracks (asserted: a stream that does not overflow
// the summaries exercises nothing), and the ranks around 1,000 a few
// events apart. The checks are TestReplayScopes': no under-count,
// lower <= exact, certified_k honest, complete never false, recall@100 = 1
// and recall@1000 >= 0.999 on every list, every window slides.
func TestReplayDenseDefaults(t *testing.T) {
	const perBucket = 200_000
	buckets := 7 // the 1m window full, then sliding
	if testing.Short() {
		buckets = 3
	}
	n := perBucket * buckets
	events := denseStream(11, 1_000_000, n, perBucket/10)
	cfg := DefaultConfig()
	x := newScopedExact(events, cfg.Preagg.Bucket, true)
	tracked := cfg.Preagg.Summary.N * cfg.Preagg.Partitions
	for b, lists := range x.buckets {
		for key, items := range lists {
			if len(items) <= tracked {
				t.Fatalf("bucket %d list %q: %d distinct items, not more than the %d a bucket tracks: the stream does not exercise the cut", b, key, len(items), tracked)
			}
		}
	}
	began := time.Now()
	rep, lists := replay(t, events, func(c *Config) {
		c.Trending = false
		c.SourceOpts.BundleBeacons = 40
	})
	if rep.Events != int64(n) || rep.Bad != 0 || rep.LateDropped != 0 {
		t.Fatalf("report %+v, want %d events, none bad or late", rep, n)
	}
	rs := checkScoped(t, lists, x, cfg.Windows, scopeChecks{
		K: cfg.Lists.K, Margin: cfg.Lists.Margin, MinCount: cfg.MinCount,
		RequireComplete: true, Recall100: true, MinR1000: 0.999, Slides: true, ExactTotal: true,
	})
	t.Logf("dense, defaults: %d events, %d lists checked, replay %.0f events/s, %v in all", n, len(rs), rep.EventsPerS, time.Since(began).Round(time.Second))
	recallSummary(t, "dense-defaults", rs)
}

// denseMinR1000 is the recall@1000 TestReplayDense requires of every list:
// measured on cc3f842 (two runs, identical), the smallest was 0.945 (1m and
// 5m lists of the first minute; 1h lists 0.962), 0.939 with -short; with
// the minutes at 256 and the aggregates at 448 entries per partition
// (2026-12-03, two runs identical) 0.935 for 1m and 5m, 0.960 for 1h; with
// N = 512 x 4 partitions 115 of the 119 lists are not complete (certified_k
// below 1,000), which this test therefore does not require. Read in
// bundles of denseBundleBeacons with the partials cut once per bucket
// (2026-12-05, partials of 8N, 4 runs): 0.942-0.947 for 1m and 5m, 0.961
// for 1h; with each bundle's partials cut to N (before) it was 0.755 and
// 0.863, and recall@100 0.98. With summary.Drops (2026-12-06, three runs
// identical, and -short): 1.000 for 1m and 5m, 0.992 for 1h, against
// 0.945 and 0.959 on fb03088 just before it.
const denseMinR1000 = 0.99

// denseBundleBeacons: TestReplayDense's file is read in bundles of 10
// beacons (5,000 events), so a 10 s bucket of 40,000 events spans eight or
// nine pre-aggregation bundles, as it does live (1 s bundles), at fixed
// places in the file so every run is the same.
const denseBundleBeacons = 10

// TestMinCount: a quiet region's lists. In DE-BE, within the minute
// [10:01, 10:02), item a is seen 6 times, b 3, c 2, d once; DE-BY sees a
// and e 4 times each. With the default minimums (1m: 3, 5m: 5, 1h: 10)
// the DE-BE 1m list as of 10:02 is exactly {a: 6, b: 3}, its 5m list as
// of 10:05 exactly {a: 6}, the DE 5m list {a: 10}; each is shorter than
// K, exact, and complete; a list of the region whose window holds no item
// at the minimum (1h) is empty if published at all. Every list of the run
// also passes checkScoped's properties, complete never false.
func TestMinCount(t *testing.T) {
	var events []schemas.Event
	id := 0
	add := func(item, country, region string, n int, at time.Time) {
		for range n {
			id++
			events = append(events, schemas.Event{EventID: "m" + strconv.Itoa(id), Type: "video", Item: item,
				Country: country, Region: region, TS: at.Add(time.Duration(id) * time.Millisecond)})
		}
	}
	// A global background: 200 items over three minutes, no country.
	for i := range 3000 {
		add("g"+strconv.Itoa(i%200), "", "", 1, start.Add(time.Duration(i)*60*time.Millisecond))
	}
	t0 := start.Add(time.Minute)
	add("a", "DE", "DE-BE", 6, t0.Add(5*time.Second))
	add("b", "DE", "DE-BE", 3, t0.Add(15*time.Second))
	add("c", "DE", "DE-BE", 2, t0.Add(25*time.Second))
	add("d", "DE", "DE-BE", 1, t0.Add(35*time.Second))
	add("a", "DE", "DE-BY", 4, t0.Add(45*time.Second))
	add("e", "DE", "DE-BY", 4, t0.Add(50*time.Second))
	slices.SortStableFunc(events, func(a, b schemas.Event) int { return a.TS.Compare(b.TS) })

	_, lists := replay(t, events, func(c *Config) { c.Trending = false })
	cfg := DefaultConfig()
	checkScoped(t, lists, newScopedExact(events, cfg.Preagg.Bucket, true), cfg.Windows, scopeChecks{
		K: cfg.Lists.K, Margin: cfg.Lists.Margin, MinCount: cfg.MinCount, RequireComplete: true, Slides: true, ExactTotal: true,
	})
	// Every list says the minimum it was cut at (grading needs it): the
	// window's for countries and regions, none for global.
	for _, l := range lists {
		want := cfg.MinCount[l.Window]
		if l.Scope == schemas.ScopeGlobal {
			want = 0
		}
		if l.MinCount != want {
			t.Errorf("%s as of %s: min_count %d, want %d", l.Key(), l.AsOf, l.MinCount, want)
		}
	}
	find := func(scope string, w schemas.Window, asOf time.Time) *schemas.List {
		for _, l := range lists {
			if l.Type == "video" && l.Scope == scope && l.Window == w && l.AsOf.Equal(asOf) {
				return l
			}
		}
		return nil
	}
	for _, tc := range []struct {
		scope string
		w     schemas.Window
		asOf  time.Time
		want  map[string]uint64
	}{
		{"DE-BE", schemas.Window1m, t0.Add(time.Minute), map[string]uint64{"a": 6, "b": 3}},
		{"DE-BE", schemas.Window5m, t0.Add(4 * time.Minute), map[string]uint64{"a": 6}},
		{"DE-BY", schemas.Window1m, t0.Add(time.Minute), map[string]uint64{"a": 4, "e": 4}},
		{"DE", schemas.Window1m, t0.Add(time.Minute), map[string]uint64{"a": 10, "b": 3, "e": 4}},
		{"DE", schemas.Window5m, t0.Add(4 * time.Minute), map[string]uint64{"a": 10}},
		{"DE-BE", schemas.Window1h, start.Add(time.Hour), nil},
	} {
		name := fmt.Sprintf("%s:%s@%s", tc.scope, tc.w, tc.asOf.Format(time.TimeOnly))
		l := find(tc.scope, tc.w, tc.asOf)
		if l == nil {
			if tc.want != nil {
				t.Errorf("%s: not published", name)
			}
			t.Logf("%s: not published", name)
			continue
		}
		got := map[string]uint64{}
		for _, e := range l.Items {
			if e.Lower != e.Count {
				t.Errorf("%s: %s bounds [%d, %d], want exact", name, e.Item, e.Lower, e.Count)
			}
			got[e.Item] = e.Count
		}
		t.Logf("%s: %v, complete %v, certified_k %d", name, got, l.Complete, l.CertifiedK)
		if !maps.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
			t.Errorf("%s: got %v, want %v", name, got, tc.want)
		}
		if !l.Complete || l.CertifiedK != len(l.Items) {
			t.Errorf("%s: complete %v certified_k %d of %d, want complete and all certified", name, l.Complete, l.CertifiedK, len(l.Items))
		}
	}
}

// TestSpamWave: issue 9's item 5 at its full rate, over a shorter stream.
// The replay had 1,250 hashtag events per 10 s bucket (15% of 4M
// events over 80 minutes, Zipf 1.1 over 500,000 tags) and a wave of
// 1,000,000 distinct junk tags (a quarter used twice) in 3 minutes. Here the
// same hashtag background (videos and searches, which count in lists of
// their own, are left out) runs for 12 minutes with the same wave in
// minutes 4-7, at the default memory budget (16 partitions x N = 4,096).
// Every hashtag list, before, during and after the wave: no under-count,
// lower <= exact, certified_k honest, complete consistent with certified_k,
// every window slides; recall@100 = 1 on lists with 1,000 qualifying items
// when spamRecall100 is set. Recall per window and phase is logged.
func TestSpamWave(t *testing.T) {
	spec := streams.ScopedSpec{
		Seed: 5, Events: 90_000, Start: start, Span: 12 * time.Minute,
		Items: 1000, Zipf: 1.1, HashtagItems: 500_000, HashtagShare: 1,
		SpamItems: 1_000_000, SpamFrom: 4 * time.Minute, SpamFor: 3 * time.Minute,
	}
	if testing.Short() {
		spec.Events, spec.Span, spec.SpamFrom, spec.SpamItems = 60_000, 8*time.Minute, 3*time.Minute, 250_000
	}
	events := genScoped(spec)
	began := time.Now()
	rep, lists := replay(t, events, func(c *Config) { c.Trending = false })
	if rep.Events != int64(len(events)) || rep.Bad != 0 || rep.LateDropped != 0 {
		t.Fatalf("report %+v, want %d events, none bad or late", rep, len(events))
	}
	var tags []*schemas.List
	for _, l := range lists {
		if l.Type == "hashtag" {
			tags = append(tags, l)
		}
	}
	cfg := DefaultConfig()
	x := newScopedExact(events, cfg.Preagg.Bucket, true)
	rs := checkScoped(t, tags, x, cfg.Windows, scopeChecks{
		K: cfg.Lists.K, Margin: cfg.Lists.Margin, MinCount: cfg.MinCount,
		Recall100: spamRecall100, Slides: true, ExactTotal: true,
	})
	t.Logf("spam: %d events (%d junk), %d hashtag lists checked, replay %.0f events/s, %v in all",
		len(events), spec.SpamItems+(spec.SpamItems+3)/4, len(rs), rep.EventsPerS, time.Since(began).Round(time.Second))
	waveFrom, waveTo := start.Add(spec.SpamFrom), start.Add(spec.SpamFrom+spec.SpamFor)
	phase := func(r listResult) string {
		from := r.AsOf.Add(-r.Key.Window.Length())
		switch {
		case !r.AsOf.After(waveFrom):
			return "before"
		case from.Before(waveTo):
			return "during"
		}
		return "after"
	}
	type agg struct {
		n, incomplete int
		r100, r1000   float64
	}
	per := map[string]*agg{}
	for _, r := range rs {
		k := string(r.Key.Window) + " " + phase(r)
		a := per[k]
		if a == nil {
			a = &agg{r100: 1, r1000: 1}
			per[k] = a
		}
		a.n++
		a.r100, a.r1000 = min(a.r100, r.R100), min(a.r1000, r.R1000)
		if !r.Complete {
			a.incomplete++
		}
		if r.Key.Window != schemas.Window1h && r.AsOf.Sub(waveFrom) >= 0 && r.AsOf.Sub(waveTo) <= 5*time.Minute && r.AsOf.Second() == 0 {
			t.Logf("spam %s @%s: recall@100=%.4f recall@1000=%.4f certified_k=%d complete=%v (%s)",
				r.Key.Window, r.AsOf.Format(time.TimeOnly), r.R100, r.R1000, r.CertifiedK, r.Complete, phase(r))
		}
	}
	r100, r1000 := 1.0, 1.0
	for _, r := range rs {
		if r.Qualifying >= 1000 {
			r100, r1000 = min(r100, r.R100), min(r1000, r.R1000)
		}
	}
	if r100 < 1 || r1000 < 0.99 {
		t.Logf("spam: issue 9's goal (recall@100 = 1, recall@1000 >= 0.99 on every list through the wave) NOT MET: min recall@100=%.4f recall@1000=%.4f", r100, r1000)
	}
	for _, k := range slices.Sorted(maps.Keys(per)) {
		a := per[k]
		t.Logf("spam %-10s %4d lists: min recall@100=%.4f min recall@1000=%.4f, %d incomplete", k, a.n, a.r100, a.r1000, a.incomplete)
	}
	if testing.Short() {
		return
	}
	for w, f := range spamFloors {
		a := per[string(w)+" during"]
		if a == nil {
			t.Fatalf("no %s list during the wave", w)
		}
		if a.r100 < f[0] || a.r1000 < f[1] {
			t.Errorf("%s during the wave: min recall@100 %.4f, recall@1000 %.4f; want at least %.2f and %.2f (measured with summary.Drops; 0.91-0.96 and 0.38-0.90 without)", w, a.r100, a.r1000, f[0], f[1])
		}
	}
}

// spamFloors is the least recall@100 and recall@1000 TestSpamWave accepts
// per window during the wave: a little under what summary.Drops gives
// (2026-12-05: recall@100 1 on every window, recall@1000 1m 0.932, 5m
// 0.732, 1h 0.965), so that losing the Drops' sharper bounds fails the
// test.
var spamFloors = map[schemas.Window][2]float64{
	schemas.Window1m: {0.98, 0.90},
	schemas.Window5m: {0.98, 0.70},
	schemas.Window1h: {0.98, 0.95},
}

// spamRecall100: whether TestSpamWave requires recall@100 = 1 (issue 9's
// goal) on every hashtag list with 1,000 qualifying items. With
// summary.Drops (2026-12-05) it was 1 on every list in every run here
// (without Drops the wave brought it to 0.91, 0.96 and 0.96 on the 1m, 5m
// and 1h lists), but the margin is a tie or two at the 100th rank, which
// the bundling of a loaded machine can move, so the test asserts
// spamFloors (0.98) instead; recall@1000 (0.93, 0.73, 0.97; the goal is
// 0.99) is the part of item 5 still open. BENCHMARKS.md ("The spam
// wave", "Drops") has why, and what was tried.
const spamRecall100 = false
