package users

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkAdd is the cost of adding a user (Zipf over 1M users) to a
// sketch, and the encoded size of the sketch after n users.
func BenchmarkAdd(b *testing.B) {
	for _, n := range []int{100, 10_000, 1_000_000} {
		b.Run(fmt.Sprint("users", n), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			z := rand.NewZipf(r, 1.1, 1, uint64(n-1))
			hs := make([]uint64, 1<<16)
			for i := range hs {
				hs[i] = Hash(fmt.Sprint("u_", z.Uint64()))
			}
			s := New()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				s.AddHash(hs[i&(len(hs)-1)])
			}
			b.StopTimer()
			enc, _ := s.MarshalBinary()
			b.ReportMetric(float64(len(enc)), "bytes/sketch")
		})
	}
}

// TestSketchBytes logs the encoded size of a sketch of n distinct users
// (BENCHMARKS.md).
func TestSketchBytes(t *testing.T) {
	for _, n := range []int{1, 10, 100, 1000, 3000, 10_000, 100_000} {
		s := New()
		for i := range n {
			s.Add(fmt.Sprint("u_", i))
		}
		enc, _ := s.MarshalBinary()
		t.Logf("%7d users: %5d bytes encoded, estimate %d", n, len(enc), s.Estimate())
	}
}
