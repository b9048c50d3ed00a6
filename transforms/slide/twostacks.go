package slide

import "github.com/topk-dev/topk/transforms/summary"

// pane is one time range's summary: a bucket, or a minute merged from its
// buckets. Panes are immutable once built: a late pane replaces its pane
// with a new merged summary, never changes one in place, so the two-stacks
// aggregates that point at the old one stay consistent until rebuilt.
type pane struct {
	start int64 // Unix ms
	sm    *summary.Summary
}

// TwoStacks is a sliding-window aggregator over panes in start order
// (Tangwongsan, Hirzel and Schneider, "Sliding-window aggregation
// algorithms", Encyclopedia of Big Data Technologies, 2019; the "two-stacks"
// queue of Hirzel et al., "Sliding-window aggregation algorithms: tutorial",
// DEBS 2017). Panes enter at the back and leave at the front. The back is a
// list of panes with one running aggregate; the front is a stack whose every
// node holds the aggregate of itself and every pane behind it in the front.
// A query merges two summaries (the front top's aggregate and the back's);
// a push merges one; an eviction pops one, and when the front is empty it
// first flips the back onto it, one merge per pane. Each pane is merged into
// a front aggregate once in its life, so a slide costs about three merges
// amortized, whatever the window's length (sixty minute summaries for 1h).
//
// Chosen over FlatFAT (O(log n) merges per slide, a tree over a circular
// array) and DABA (worst-case O(1), twice the bookkeeping): the windows here
// hold 6 to 60 panes, a flip of 60 merges once an hour per list is cheap,
// and two-stacks needs only one operation, the merge of disjoint event sets
// (summary.MergeEvents), which is associative in its guarantee: every merge
// order yields valid bounds. The aggregate need not be invertible: panes
// that leave the window are never subtracted.
type TwoStacks struct {
	// N, when > 0, is the entries every aggregate keeps (panes are held as
	// they are): a window's aggregates merge many panes, and the window's
	// answer per partition is cut to Config.Limit, so they need not keep
	// as many entries as a pane. 0: the older side's N (MergeEvents).
	N       int
	front   []pane // front[len-1] is the oldest; sm is the aggregate from it to the bottom
	back    []pane // oldest first
	backAgg *summary.Summary
	last    int64 // start of the newest pane pushed
	merges  int   // merges done, for tests and benchmarks
}

// Len is the number of panes in the window.
func (t *TwoStacks) Len() int { return len(t.front) + len(t.back) }

// Push adds a pane newer than every pane held. sm is not modified.
func (t *TwoStacks) Push(start int64, sm *summary.Summary) error {
	if t.Len() > 0 && start <= t.last {
		panic("slide: pane pushed out of order") // callers push in start order
	}
	t.last = start
	t.back = append(t.back, pane{start: start, sm: sm})
	if t.backAgg == nil {
		t.backAgg = sm
		return nil
	}
	agg, err := t.merge(t.backAgg, sm)
	if err != nil {
		return err
	}
	t.merges++
	t.backAgg = agg
	return nil
}

// Evict removes every pane that starts before start.
func (t *TwoStacks) Evict(start int64) error {
	for {
		if len(t.front) == 0 {
			if len(t.back) == 0 || t.back[0].start >= start {
				return nil
			}
			if err := t.flip(); err != nil {
				return err
			}
		}
		top := t.front[len(t.front)-1]
		if top.start >= start {
			return nil
		}
		t.front[len(t.front)-1] = pane{}
		t.front = t.front[:len(t.front)-1]
	}
}

// flip moves the back onto the empty front, newest first, so the front's
// top is the oldest pane and holds the aggregate of all of them.
func (t *TwoStacks) flip() error {
	var agg *summary.Summary
	for i := len(t.back) - 1; i >= 0; i-- {
		p := t.back[i]
		if agg == nil {
			agg = p.sm
		} else {
			var err error
			if agg, err = t.merge(p.sm, agg); err != nil {
				return err
			}
			t.merges++
		}
		t.front = append(t.front, pane{start: p.start, sm: agg})
		t.back[i] = pane{}
	}
	t.back = t.back[:0]
	t.backAgg = nil
	return nil
}

// Query is the merge of every pane held; nil when empty. The result may be
// shared with the aggregator: do not modify it.
func (t *TwoStacks) Query() (*summary.Summary, error) {
	var f *summary.Summary
	if n := len(t.front); n > 0 {
		f = t.front[n-1].sm
	}
	switch {
	case f == nil:
		return t.backAgg, nil
	case t.backAgg == nil:
		return f, nil
	}
	t.merges++
	return summary.MergeEvents(f, t.backAgg)
}

// merge merges two disjoint event sets into an aggregate of t's N, never
// wider than the wider side.
func (t *TwoStacks) merge(a, b *summary.Summary) (*summary.Summary, error) {
	if n := max(a.N, b.N); t.N > 0 && t.N < n {
		return summary.MergeEventsN(a, b, t.N)
	}
	return summary.MergeEvents(a, b)
}

// Reset empties the aggregator (its N stays).
func (t *TwoStacks) Reset() { *t = TwoStacks{N: t.N, merges: t.merges} }
