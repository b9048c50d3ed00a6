// Package topn selects the first n elements of a slice in a total order
// without sorting it all: the summaries' cuts (transforms/summary) and the
// users tallies' trims (transforms/users) pick a few thousand of many.
// Hand-written because the standard library has sorting but no selection,
// and the one generic quickselect needed is 40 lines.
package topn

import "slices"

// Select reorders xs so that xs[:n] holds the n first elements of xs in
// the total order cmp (in no particular order) and xs[n:] the rest: an
// N-of-many selection (quickselect, median-of-three pivots) in linear
// expected time instead of a full sort. cmp must be a total order (no two
// distinct elements compare equal), so the chosen set is deterministic.
func Select[T any](xs []T, n int, cmp func(a, b T) int) {
	lo, hi := 0, len(xs)
	if n <= 0 || n >= hi {
		return
	}
	for depth := 0; hi-lo > 16; depth++ {
		if depth > 64 { // pathological pivots: finish with a sort
			slices.SortFunc(xs[lo:hi], cmp)
			return
		}
		// Median of three as pivot, moved to the end.
		m := lo + (hi-lo)/2
		if cmp(xs[m], xs[lo]) < 0 {
			xs[m], xs[lo] = xs[lo], xs[m]
		}
		if cmp(xs[hi-1], xs[lo]) < 0 {
			xs[hi-1], xs[lo] = xs[lo], xs[hi-1]
		}
		if cmp(xs[m], xs[hi-1]) < 0 {
			xs[m], xs[hi-1] = xs[hi-1], xs[m]
		}
		pivot := xs[hi-1]
		i := lo
		for j := lo; j < hi-1; j++ {
			if cmp(xs[j], pivot) < 0 {
				xs[i], xs[j] = xs[j], xs[i]
				i++
			}
		}
		xs[i], xs[hi-1] = xs[hi-1], xs[i]
		switch {
		case i == n || i+1 == n:
			return
		case n < i:
			hi = i
		default:
			lo = i + 1
		}
	}
	slices.SortFunc(xs[lo:hi], cmp)
}
