// Package grade grades the fast path against the exact path: the 1h list
// published at an hour's end against the exact recount of that hour. It
// reports recall at 100 and at 1,000 (ties at the cut count as hits), the
// largest over-count against the list's own bound, any under-count (which
// the contract forbids), and the largest rank displacement in the top 100.
// A grade is an alert when recall at 100 is below 0.99, when any entry
// over-counts by more than max_overcount, or when any entry under-counts.
package grade

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/topk-dev/topk/schemas"
)

// Grade is the result for one (type, scope) hour.
type Grade struct {
	Type, Scope string
	Hour        time.Time // the graded hour's start; the list's as_of is Hour+1h
	ListVersion int64
	Recall100   float64
	Recall1000  float64
	// MaxOvercount is the largest count - exact over the list's entries;
	// Bound is the list's max_overcount.
	MaxOvercount uint64
	Bound        uint64
	// UnderCounts is the number of entries whose count is below the exact
	// count: always a breach.
	UnderCounts int
	// MaxDisplacement is the largest |listed rank - exact rank| over the
	// list's first 100 entries (exact ranks by count, ties sharing the best
	// rank; an item outside the exact ranking counts as rank len+1).
	MaxDisplacement int
	Alert           bool
	Reasons         []string
}

// Of grades a published list against exact counts (item -> count) of the
// same (type, scope) and hour. It checks that the list covers that hour.
func Of(l *schemas.List, exact map[string]int64, hour time.Time) (Grade, error) {
	if l.Window != schemas.Window1h {
		return Grade{}, fmt.Errorf("grade: list window %s, want 1h", l.Window)
	}
	if !l.AsOf.Equal(hour.Add(time.Hour)) {
		return Grade{}, fmt.Errorf("grade: list as_of %s does not end hour %s", l.AsOf, hour)
	}
	g := Grade{Type: l.Type, Scope: l.Scope, Hour: hour, ListVersion: l.Version, Bound: l.MaxOvercount}
	type kc struct {
		item string
		n    int64
	}
	ranking := make([]kc, 0, len(exact))
	for it, n := range exact {
		ranking = append(ranking, kc{it, n})
	}
	slices.SortFunc(ranking, func(a, b kc) int {
		if c := cmp.Compare(b.n, a.n); c != 0 {
			return c
		}
		return strings.Compare(a.item, b.item)
	})
	// Ties share the best rank.
	rank := make(map[string]int, len(ranking))
	for i, x := range ranking {
		r := i + 1
		if i > 0 && x.n == ranking[i-1].n {
			r = rank[ranking[i-1].item]
		}
		rank[x.item] = r
	}
	recall := func(k int) float64 {
		want := min(k, len(ranking))
		if want == 0 {
			return 1
		}
		cut := ranking[want-1].n
		hits := 0
		for _, e := range l.Items[:min(k, len(l.Items))] {
			if exact[e.Item] >= cut && exact[e.Item] > 0 {
				hits++
			}
		}
		return float64(min(hits, want)) / float64(want)
	}
	g.Recall100, g.Recall1000 = recall(100), recall(1000)
	for i, e := range l.Items {
		x := exact[e.Item]
		if int64(e.Count) < x {
			g.UnderCounts++
		} else if over := uint64(int64(e.Count) - x); over > g.MaxOvercount {
			g.MaxOvercount = over
		}
		if i < 100 {
			r, ok := rank[e.Item]
			if !ok {
				r = len(ranking) + 1
			}
			if d := abs(r - e.Rank); d > g.MaxDisplacement {
				g.MaxDisplacement = d
			}
		}
	}
	if g.Recall100 < 0.99 {
		g.Reasons = append(g.Reasons, fmt.Sprintf("recall@100 %.3f < 0.99", g.Recall100))
	}
	if g.MaxOvercount > g.Bound {
		g.Reasons = append(g.Reasons, fmt.Sprintf("over-count %d above the list's bound %d", g.MaxOvercount, g.Bound))
	}
	if g.UnderCounts > 0 {
		g.Reasons = append(g.Reasons, fmt.Sprintf("%d entries under-count", g.UnderCounts))
	}
	g.Alert = len(g.Reasons) > 0
	return g, nil
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
