package zipf

import (
	"math"
	"testing"
)

// The empirical frequencies of the first ranks match the exact Zipf pmf
// within a few standard deviations, on both sides of s = 1.
func TestMatchesPMF(t *testing.T) {
	for _, s := range []float64{0.8, 1.1, 1.4} {
		const n, draws = 1000, 400_000
		z := New(7, s, n)
		counts := make([]int, n+1)
		for range draws {
			k := z.Next()
			if k < 1 || k > n {
				t.Fatalf("s=%v: draw %d outside [1,%d]", s, k, n)
			}
			counts[k]++
		}
		var norm float64
		for k := 1; k <= n; k++ {
			norm += math.Pow(float64(k), -s)
		}
		for _, k := range []int{1, 2, 3, 10, 100} {
			p := math.Pow(float64(k), -s) / norm
			want := p * draws
			sd := math.Sqrt(draws * p * (1 - p))
			if got := float64(counts[k]); math.Abs(got-want) > 5*sd {
				t.Errorf("s=%v rank %d: got %v draws, want %.0f ± %.0f", s, k, got, want, 5*sd)
			}
		}
	}
}

func TestDeterministic(t *testing.T) {
	a, b := New(42, 1.1, 1e6), New(42, 1.1, 1e6)
	for range 1000 {
		if a.Next() != b.Next() {
			t.Fatal("same seed, different streams")
		}
	}
}
