package summary

import (
	"slices"
	"sync"

	"github.com/topk-dev/topk/internal/topn"
)

// his is scratch space for cutTop's selection over hi values.
var his = sync.Pool{New: func() any { return new([]uint64) }}

// cutTop appends to dst, in their order in es, the entries of es whose hi is
// at least floor and that are among the first n of those in rank order
// (cmpRank; n <= 0: no limit), and returns it with the largest hi left out
// (0 if none). dst may be es[:0]: entries are only moved towards the front.
//
// It picks exactly the set topn.Select(·, n, cmpRank) puts first, without
// reordering es: the n-th largest hi h is found from the hi values alone (a
// selection over 8-byte integers, not over 40-byte entries compared through
// their items), every entry above h is kept, and only the entries tied at h are
// ranked (lo descending, then hash) to fill the rest. So the cut keeps
// key order and needs no sort afterwards.
//
// With fp not nil, every entry dropped is recorded in *fp, created on the
// first drop if *fp is nil (see Summary.Dropped).
func cutTop(dst, es []Entry, n int, floor uint64, fp **Drops) ([]Entry, uint64) {
	var dropped uint64
	eligible := len(es)
	if floor > 0 {
		eligible = 0
		for i := range es {
			if es[i].Hi >= floor {
				eligible++
			} else {
				dropped = max(dropped, es[i].Hi)
			}
		}
	}
	if n <= 0 || eligible <= n {
		if eligible == len(es) {
			return append(dst, es...), dropped // copy (or memmove in place)
		}
		reserve(fp, len(es)-eligible)
		// Copy runs of kept entries, not one entry at a time.
		for i := 0; i < len(es); {
			if es[i].Hi < floor {
				record(fp, &es[i])
				i++
				continue
			}
			j := i + 1
			for j < len(es) && es[j].Hi >= floor {
				j++
			}
			dst = append(dst, es[i:j]...)
			i = j
		}
		settle(fp)
		return dst, dropped
	}
	// h: the n-th largest hi among the eligible entries.
	p := his.Get().(*[]uint64)
	hs := (*p)[:0]
	for i := range es {
		if es[i].Hi >= floor {
			hs = append(hs, es[i].Hi)
		}
	}
	h := nthLargest(hs, n)
	*p = hs
	his.Put(p)
	// Every entry above h is in; fill the rest from the ties at h in rank
	// order.
	above, ties := 0, 0
	for i := range es {
		switch hi := es[i].Hi; {
		case hi > h:
			above++
		case hi == h:
			ties++
		case hi >= floor:
			dropped = max(dropped, hi)
		}
	}
	need := n - above
	reserve(fp, len(es)-n)
	var keepTie []int // indices of the ties kept, ascending; nil: all ties kept
	if ties > need {
		dropped = max(dropped, h)
		keepTie = cutTies(es, h, ties, need)
	}
	t := 0
	for i := range es {
		e := es[i]
		switch {
		case e.Hi > h:
		case e.Hi < h:
			record(fp, &e)
			continue
		case keepTie == nil:
		case t < len(keepTie) && keepTie[t] == i:
			t++
		default:
			record(fp, &e)
			continue
		}
		dst = append(dst, e)
	}
	settle(fp)
	return dst, dropped
}

// reserve makes room in *fp (creating it) for m drops, when fp is not nil.
func reserve(fp **Drops, m int) {
	if fp == nil || m <= 0 {
		return
	}
	if *fp == nil {
		*fp = NewDrops()
	}
	(*fp).reserve(m)
}

// settle orders *fp's cells after records, when fp is not nil.
func settle(fp **Drops) {
	if fp != nil && *fp != nil {
		(*fp).settle()
	}
}

// record notes e as dropped in *fp, when fp is not nil (after reserve).
func record(fp **Drops, e *Entry) {
	if fp != nil {
		(*fp).Record(e.Hash, e.Hi)
	}
}

// nthLargest returns the n-th largest of xs (1 <= n <= len(xs)), reordering
// xs: a quickselect with a three-way partition, so the long runs of equal
// small counts a summary holds end a round instead of degrading it.
func nthLargest(xs []uint64, n int) uint64 {
	k := n - 1 // its index in descending order
	lo, hi := 0, len(xs)
	for depth := 0; hi-lo > 16; depth++ {
		if depth > 64 { // pathological pivots: finish with a sort
			break
		}
		a, b, c := xs[lo], xs[lo+(hi-lo)/2], xs[hi-1]
		p := max(min(a, b), min(max(a, b), c)) // median of three
		// xs[lo:gt] > p, xs[gt:i] == p, xs[lt:hi] < p
		gt, i, lt := lo, lo, hi
		for i < lt {
			switch x := xs[i]; {
			case x > p:
				xs[gt], xs[i] = xs[i], xs[gt]
				gt++
				i++
			case x < p:
				lt--
				xs[lt], xs[i] = xs[i], xs[lt]
			default:
				i++
			}
		}
		switch {
		case k < gt:
			hi = gt
		case k < lt:
			return p
		default:
			lo = lt
		}
	}
	slices.SortFunc(xs[lo:hi], func(a, b uint64) int {
		switch {
		case a > b:
			return -1
		case a < b:
			return 1
		}
		return 0
	})
	return xs[k]
}

// cutTies returns the indices, ascending, of the need entries of es first
// in rank order among its ties entries whose hi is h: lo descending, then
// hash, then item (cmpRank). The ties of a small count can be thousands
// of entries (a partition's share of a list cut at a count of one or
// two), so the cut is made like cutTop's on hi: the need-th largest lo
// from the lo values alone, then among the entries at that lo the
// smallest hashes, each a selection over 8-byte integers; entries are
// compared through cmpRank only where two hashes at the cut are equal.
func cutTies(es []Entry, h uint64, ties, need int) []int {
	idx := make([]int, 0, ties)
	p := his.Get().(*[]uint64)
	defer his.Put(p)
	ks := (*p)[:0]
	for i := range es {
		if es[i].Hi == h {
			idx = append(idx, i)
			ks = append(ks, es[i].Lo)
		}
	}
	l := nthLargest(ks, need)
	above := 0
	ks = ks[:0]
	for _, i := range idx {
		switch lo := es[i].Lo; {
		case lo > l:
			above++
		case lo == l:
			ks = append(ks, ^es[i].Hash) // largest first: smallest hash first
		}
	}
	left := need - above // taken from the entries at lo l
	hc := ^nthLargest(ks, left)
	*p = ks
	below, at := 0, 0
	for _, k := range ks {
		switch hash := ^k; {
		case hash < hc:
			below++
		case hash == hc:
			at++
		}
	}
	if below+at > left {
		// Distinct items with one hash at the cut: ranked by item too.
		topn.Select(idx, need, func(a, b int) int { return cmpRank(es[a], es[b]) })
		keep := idx[:need]
		slices.Sort(keep)
		return keep
	}
	keep := idx[:0]
	for _, i := range idx {
		if lo := es[i].Lo; lo > l || lo == l && es[i].Hash <= hc {
			keep = append(keep, i)
		}
	}
	return keep
}
