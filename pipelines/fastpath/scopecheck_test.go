package fastpath

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/topk-dev/topk/schemas"
)

// Scope-aware exact recount for the scale tests (scale_test.go). The
// helpers of replay_test.go key counts by (type, item) and so are right for
// global lists only; these key them by (type, scope, item), every event
// counting in each scope it belongs to (schemas.Event.Scopes), exactly as
// the fast path is specified to count it, and recount every window by
// sliding plain maps bucket by bucket (add the bucket entering, subtract
// the bucket leaving): nothing of the implementation is reused.

// scopedExact holds exact counts per 10 s bucket, per list, per item.
type scopedExact struct {
	bucketMs    int64
	buckets     map[int64]map[string]map[string]uint64 // bucket start ms -> "type\x00scope" -> item -> count
	first, last int64                                  // first and last bucket with events
}

// newScopedExact recounts events (deduplicated by event id); scopes false
// counts every event in the global scope only (preagg.Config.Scopes).
func newScopedExact(events []schemas.Event, bucket time.Duration, scopes bool) *scopedExact {
	x := &scopedExact{bucketMs: bucket.Milliseconds(), buckets: map[int64]map[string]map[string]uint64{}, first: 1 << 62, last: -1 << 62}
	seen := make(map[string]struct{}, len(events))
	var sc []string
	for i := range events {
		e := &events[i]
		if _, dup := seen[e.EventID]; dup {
			continue
		}
		seen[e.EventID] = struct{}{}
		b := e.TS.Truncate(bucket).UnixMilli()
		x.first, x.last = min(x.first, b), max(x.last, b)
		lists := x.buckets[b]
		if lists == nil {
			lists = map[string]map[string]uint64{}
			x.buckets[b] = lists
		}
		sc = e.Scopes(sc)
		if !scopes {
			sc = sc[:1]
		}
		for _, scope := range sc {
			lk := e.Type + "\x00" + scope
			m := lists[lk]
			if m == nil {
				m = map[string]uint64{}
				lists[lk] = m
			}
			m[e.Item]++
		}
	}
	return x
}

// scopeLevel names the kind of a scope: global, country or region.
func scopeLevel(scope string) string {
	switch {
	case scope == schemas.ScopeGlobal:
		return "global"
	case schemas.IsCountry(scope):
		return "country"
	}
	return "region"
}

// scopeChecks is what checkScoped asserts beyond the bounds, which it always
// checks.
type scopeChecks struct {
	K, Margin int
	MinCount  map[schemas.Window]uint64 // per window, non-global lists only
	// RequireComplete: a list whose complete is false is an error.
	RequireComplete bool
	// On lists with at least 1,000 items at or above their minimum count:
	// recall@100 must be 1 (Recall100) and recall@1000 at least MinR1000.
	Recall100 bool
	MinR1000  float64
	// Slides: a list at every period while its window holds an item at or
	// above its minimum count (at least one event for a global list).
	Slides bool
	// ExactTotal: every list's total is the exact number of events in its
	// window (streams no rule drops anything from). Totals are exact
	// whatever the summaries cut, so a total below means events were lost
	// on the way (a bucket or partition missing), above counted twice:
	// the check that tells a lost pane from an approximation's error.
	ExactTotal bool
}

// listResult is one checked list.
type listResult struct {
	Key        schemas.ListKey
	AsOf       time.Time
	Qualifying int // items whose exact count is at or above the minimum (1 for global)
	Listed     int
	CertifiedK int
	Complete   bool
	R100       float64
	R1000      float64
}

// reporter is what checkScoped needs of a *testing.T (TestCheckScoped
// records instead).
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
}

// failures caps the messages of each kind of failure and counts them all.
type failures struct {
	t     reporter
	count map[string]int
}

func (f *failures) add(kind, format string, args ...any) {
	f.t.Helper()
	if f.count == nil {
		f.count = map[string]int{}
	}
	f.count[kind]++
	if f.count[kind] <= 5 {
		f.t.Errorf(kind+": "+format, args...)
	}
}

func (f *failures) summary() {
	f.t.Helper()
	for _, k := range slices.Sorted(maps.Keys(f.count)) {
		f.t.Errorf("%s: %d lists in all", k, f.count[k])
	}
}

// checkScoped verifies every published list against the exact recount of
// its (type, scope) over [as_of - length, as_of), window by window in as_of
// order, and returns what it found per list. Properties (each failure is an
// error, the first five of a kind are shown):
//
//   - as_of is a multiple of the window's period and version its Unix second;
//   - no under-count: every entry's count >= exact, and lower <= exact;
//   - certified_k is honest: no item outside the first certified_k has an
//     exact count above the smallest exact count inside them;
//   - complete is consistent: a complete list has certified_k >= min(K, items
//     at or above the minimum);
//   - minimum counts (non-global lists): every listed item's upper bound is
//     >= the window's minimum, and a list shorter than K+Margin lists every
//     item whose exact count is >= the minimum;
//   - and what c asks for: complete, recall, slides.
func checkScoped(t reporter, lists []*schemas.List, x *scopedExact, windows []schemas.Window, c scopeChecks) []listResult {
	t.Helper()
	f := &failures{t: t}
	defer f.summary()
	n := c.K + c.Margin
	type slot struct {
		w   schemas.Window
		end int64
	}
	byEnd := map[slot][]*schemas.List{}
	for _, l := range lists {
		if !slices.Contains(windows, l.Window) {
			f.add("unexpected window", "%s@%v", l.Key(), l.AsOf)
			continue
		}
		byEnd[slot{l.Window, l.AsOf.UnixMilli()}] = append(byEnd[slot{l.Window, l.AsOf.UnixMilli()}], l)
	}
	var out []listResult
	for _, w := range windows {
		p, length := w.Period().Milliseconds(), w.Length().Milliseconds()
		from := x.first - x.first%p + p
		to := x.last - x.last%p + length
		for s := range byEnd {
			if s.w == w {
				if s.end%p != 0 {
					f.add("as_of off the period", "%s list as of %v", w, time.UnixMilli(s.end).UTC())
					continue
				}
				from, to = min(from, s.end), max(to, s.end)
			}
		}
		cur := map[string]map[string]uint64{}
		move := func(b int64, sign int) {
			for lk, items := range x.buckets[b] {
				m := cur[lk]
				if m == nil {
					m = map[string]uint64{}
					cur[lk] = m
				}
				for it, k := range items {
					if sign > 0 {
						m[it] += k
					} else if m[it] -= k; m[it] == 0 {
						delete(m, it)
					}
				}
				if len(m) == 0 {
					delete(cur, lk)
				}
			}
		}
		lo, hi := from-length, from-length // cur covers [lo, hi)
		for end := from; end <= to; end += p {
			for ; hi < end; hi += x.bucketMs {
				move(hi, +1)
			}
			for ; lo < end-length; lo += x.bucketMs {
				move(lo, -1)
			}
			published := map[string]bool{}
			for _, l := range byEnd[slot{w, end}] {
				lk := l.Type + "\x00" + l.Scope
				if published[lk] {
					f.add("published twice", "%s@%v", l.Key(), l.AsOf)
				}
				published[lk] = true
				var m uint64
				if l.Scope != schemas.ScopeGlobal {
					m = c.MinCount[w]
				}
				out = append(out, checkOne(f, l, cur[lk], m, n, c))
			}
			if !c.Slides {
				continue
			}
			for lk, items := range cur {
				if published[lk] {
					continue
				}
				typ, scope, _ := strings.Cut(lk, "\x00")
				q := uint64(1)
				if scope != schemas.ScopeGlobal {
					q = max(c.MinCount[w], 1)
				}
				for it, k := range items {
					if k >= q {
						f.add("missing slide", "no %s:%s:%s list as of %v, though %s counts %d (minimum %d)",
							typ, scope, w, time.UnixMilli(end).UTC().Format(time.RFC3339), it, k, q)
						break
					}
				}
			}
		}
	}
	return out
}

// checkOne checks one list against exact, its (type, scope)'s exact counts
// over its window; m is its minimum count (0 for global lists), n its
// capacity (K + margin).
func checkOne(f *failures, l *schemas.List, exact map[string]uint64, m uint64, n int, c scopeChecks) listResult {
	f.t.Helper()
	name := l.Key().String() + "@" + l.AsOf.UTC().Format(time.RFC3339)
	if l.Version != l.AsOf.Unix() {
		f.add("version", "%s: version %d, want as_of's Unix second", name, l.Version)
	}
	if c.ExactTotal {
		var sum uint64
		for _, k := range exact {
			sum += k
		}
		if l.Total != sum {
			f.add("total", "%s: total %d, exact %d (%+d events)", name, l.Total, sum, int64(l.Total)-int64(sum))
		}
	}
	q := max(m, 1) // the smallest count an item needs to qualify
	got := make([]string, len(l.Items))
	listed := make(map[string]bool, len(l.Items))
	for i, e := range l.Items {
		k := exact[e.Item]
		if k > e.Count {
			f.add("under-count", "%s: %s count %d, exact %d", name, e.Item, e.Count, k)
		}
		if e.Lower > k {
			f.add("lower above exact", "%s: %s lower %d, exact %d", name, e.Item, e.Lower, k)
		}
		if e.Count < m {
			f.add("listed below the minimum", "%s: %s upper bound %d below the minimum %d (exact %d)", name, e.Item, e.Count, m, k)
		}
		got[i] = e.Item
		listed[e.Item] = true
	}
	if ck := l.CertifiedK; ck > 0 {
		minIn := ^uint64(0)
		in := make(map[string]bool, ck)
		for _, e := range l.Items[:ck] {
			minIn = min(minIn, exact[e.Item])
			in[e.Item] = true
		}
		for it, k := range exact {
			if k > minIn && !in[it] {
				f.add("certified_k dishonest", "%s: certified_k %d but %s (exact %d) outside beats %d", name, ck, it, k, minIn)
				break
			}
		}
	}
	// The exact ranking of qualifying items, as a histogram of counts (a
	// window of a spam wave holds a million items: no sort of them all).
	hist := map[uint64]int{}
	qualifying := 0
	for it, k := range exact {
		if k < q {
			continue
		}
		hist[k]++
		qualifying++
		if m > 0 && len(l.Items) < n && !listed[it] {
			f.add("qualifying item missing", "%s: %s exact %d >= minimum %d, not in a list of %d entries", name, it, k, m, len(l.Items))
		}
	}
	counts := slices.Sorted(maps.Keys(hist))
	slices.Reverse(counts)
	// recall is streams.Recall's measure: the share of the first k listed
	// items whose exact count reaches the k-th largest qualifying count
	// (ties are hits), over min(k, qualifying).
	recall := func(k int) float64 {
		want := min(k, qualifying)
		if want == 0 {
			return 1
		}
		var threshold uint64
		for seen, i := 0, 0; seen < want; i++ {
			threshold = counts[i]
			seen += hist[threshold]
		}
		hits := 0
		for _, it := range got[:min(k, len(got))] {
			if exact[it] >= max(threshold, q) {
				hits++
			}
		}
		return float64(hits) / float64(want)
	}
	if l.Complete && l.CertifiedK < min(c.K, qualifying) {
		f.add("complete without certification", "%s: complete with certified_k %d of %d qualifying items", name, l.CertifiedK, qualifying)
	}
	if c.RequireComplete && !l.Complete {
		f.add("incomplete", "%s: complete false (certified_k %d, %d entries, %d items >= %d)", name, l.CertifiedK, len(l.Items), qualifying, q)
	}
	r := listResult{Key: l.Key(), AsOf: l.AsOf, Qualifying: qualifying, Listed: len(l.Items), CertifiedK: l.CertifiedK,
		Complete: l.Complete, R100: recall(100), R1000: recall(1000)}
	if qualifying >= 1000 {
		if c.Recall100 && r.R100 < 1 {
			f.add("recall@100", "%s: recall@100 %.4f, want 1", name, r.R100)
		}
		if r.R1000 < c.MinR1000 {
			f.add("recall@1000", "%s: recall@1000 %.4f, want >= %.4f", name, r.R1000, c.MinR1000)
		}
	}
	return r
}

// recallSummary is the smallest recall over lists with at least 1,000
// qualifying items, and how many lists there were, per scope level and
// window.
func recallSummary(t *testing.T, label string, rs []listResult) {
	t.Helper()
	type agg struct {
		lists, big, incomplete int
		r100, r1000            float64
	}
	per := map[string]*agg{}
	for _, r := range rs {
		k := scopeLevel(r.Key.Scope) + "/" + string(r.Key.Window)
		a := per[k]
		if a == nil {
			a = &agg{r100: 1, r1000: 1}
			per[k] = a
		}
		a.lists++
		if !r.Complete {
			a.incomplete++
		}
		if r.Qualifying >= 1000 {
			a.big++
			a.r100, a.r1000 = min(a.r100, r.R100), min(a.r1000, r.R1000)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(per)) {
		a := per[k]
		big := "none with 1,000 qualifying items"
		if a.big > 0 {
			big = fmt.Sprintf("%d with >= 1,000 qualifying items: min recall@100=%.4f recall@1000=%.4f", a.big, a.r100, a.r1000)
		}
		t.Logf("%s %-14s %6d lists checked (%d incomplete); %s", label, k, a.lists, a.incomplete, big)
	}
}

// recorder is a reporter that keeps the kinds of failure reported.
type recorder struct{ errs []string }

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestCheckScoped: the checker itself catches each violation it is meant to.
// In DE-BE within [10:00, 10:01) item a is seen 6 times, b 3, c once (1m
// minimum 3); the exact 1m lists as of 10:01 pass with no error, and each
// broken variant fails with the kind of error named.
func TestCheckScoped(t *testing.T) {
	var events []schemas.Event
	for i, it := range []string{"a", "a", "a", "a", "a", "a", "b", "b", "b", "c"} {
		events = append(events, schemas.Event{EventID: fmt.Sprint(i), Type: "video", Item: it, Country: "DE", Region: "DE-BE",
			TS: start.Add(time.Duration(i) * time.Second)})
	}
	x := newScopedExact(events, 10*time.Second, true)
	asOf := start.Add(time.Minute)
	mk := func(scope string, complete bool, ck int, items ...schemas.Entry) *schemas.List {
		for i := range items {
			items[i].Rank = i + 1
		}
		return &schemas.List{Type: "video", Scope: scope, Window: schemas.Window1m, AsOf: asOf, Version: asOf.Unix(),
			Complete: complete, CertifiedK: ck, Items: items, Total: 10}
	}
	e := func(item string, count, lower uint64) schemas.Entry {
		return schemas.Entry{Item: item, Count: count, Lower: lower}
	}
	good := func() []*schemas.List {
		return []*schemas.List{
			mk("global", true, 3, e("a", 6, 6), e("b", 3, 3), e("c", 1, 1)),
			mk("DE", true, 2, e("a", 6, 6), e("b", 3, 3)),
			mk("DE-BE", true, 2, e("a", 6, 6), e("b", 3, 3)),
		}
	}
	cfg := DefaultConfig()
	c := scopeChecks{K: 1000, Margin: 100, MinCount: cfg.MinCount, RequireComplete: true, Recall100: true, ExactTotal: true}
	for _, tc := range []struct {
		name   string
		region *schemas.List // replaces the DE-BE list; nil drops it
		want   string
	}{
		{"exact", mk("DE-BE", true, 2, e("a", 6, 6), e("b", 3, 3)), ""},
		{"under-count", mk("DE-BE", true, 2, e("a", 5, 5), e("b", 3, 3)), "under-count"},
		{"lower", mk("DE-BE", true, 2, e("a", 7, 7), e("b", 3, 3)), "lower above exact"},
		{"missing item", mk("DE-BE", true, 1, e("a", 6, 6)), "qualifying item missing"},
		{"below minimum", mk("DE-BE", true, 3, e("a", 6, 6), e("b", 3, 3), e("c", 1, 1)), "listed below the minimum"},
		{"dishonest", mk("DE-BE", true, 1, e("b", 6, 3), e("a", 6, 6)), "certified_k dishonest"},
		{"incomplete", mk("DE-BE", false, 2, e("a", 6, 6), e("b", 3, 3)), "incomplete"},
		{"complete uncertified", mk("DE-BE", true, 1, e("a", 6, 6), e("b", 3, 2)), "complete without certification"},
		{"no slide", nil, "missing slide"},
		{"lost events", func() *schemas.List { l := mk("DE-BE", true, 2, e("a", 6, 6), e("b", 3, 3)); l.Total = 9; return l }(), "total"},
	} {
		lists := good()[:2]
		if tc.region != nil {
			lists = append(lists, tc.region)
		}
		// Slides are checked in one case only: the lists here are one as_of.
		c.Slides = tc.want == "missing slide"
		r := &recorder{}
		checkScoped(r, lists, x, []schemas.Window{schemas.Window1m}, c)
		switch {
		case tc.want == "" && len(r.errs) > 0:
			t.Errorf("%s: errors %q, want none", tc.name, r.errs)
		case tc.want != "" && !slices.ContainsFunc(r.errs, func(s string) bool { return strings.HasPrefix(s, tc.want+":") }):
			t.Errorf("%s: errors %q, want one of kind %q", tc.name, r.errs, tc.want)
		}
	}
}
