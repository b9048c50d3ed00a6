package topn

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// Select picks exactly the set a full sort would put first, for any n and
// inputs with runs of equal keys broken by a second key.
func TestSelect(t *testing.T) {
	type kv struct{ k, id int }
	cmp := func(a, b kv) int {
		if a.k != b.k {
			return b.k - a.k // descending, like the callers' counts
		}
		return a.id - b.id
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{0, 1, 16, 17, 1000, 5000} {
		for _, n := range []int{0, 1, 5, 17, 100, 999, size - 1, size, size + 1} {
			xs := make([]kv, size)
			for i := range xs {
				xs[i] = kv{r.IntN(20), i}
			}
			want := slices.Clone(xs)
			slices.SortFunc(want, cmp)
			Select(xs, n, cmp)
			m := max(0, min(n, size))
			got := slices.Clone(xs[:m])
			slices.SortFunc(got, cmp)
			if !slices.Equal(got, want[:m]) {
				t.Fatalf("size %d n %d: first n differ from a sort's", size, n)
			}
			if len(xs) != size {
				t.Fatalf("size %d n %d: length changed", size, n)
			}
		}
	}
}
