package users

import (
	"errors"
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

// BenchmarkUnitePieces is the trend scorer's union of one pane: 60
// pre-aggregation tallies (a minute of 1 s flushes) of up to 1,024 items
// each, Zipf(1.1) item popularity over the universe's items with ten
// times as many events as users for the hottest, cut to 2,000 items and
// encoded. The pieces are decoded and absorbed (decode), absorbed from
// their bytes (bytes), each then trimmed, or united with the cut as they
// go (unitetop: Tally.UniteTop, the scorer's way). Over 4,096 items the
// pieces mostly repeat the pane's items; over 409,600 most of a piece's
// items are new to the pane (a busy list's long tail: the map inserts of
// the scorer's profiles). One op is one pane.
func BenchmarkUnitePieces(b *testing.B) {
	unite := map[string]func(pane *Tally, pieces [][]byte) error{
		"decode": func(pane *Tally, pieces [][]byte) error {
			for _, p := range pieces {
				t, err := UnmarshalTally(p)
				if err == nil {
					err = pane.Absorb(t)
				}
				if err != nil {
					return err
				}
			}
			pane.Trim(2000)
			return nil
		},
		"bytes": func(pane *Tally, pieces [][]byte) error {
			for _, p := range pieces {
				if err := pane.AbsorbBinary(p); err != nil {
					return err
				}
			}
			pane.Trim(2000)
			return nil
		},
		"unitetop": func(pane *Tally, pieces [][]byte) error {
			return errors.Join(pane.UniteTop(pieces, 2000)...)
		},
	}
	for _, universe := range []uint64{4096, 409_600} {
		pieces := benchPieces(b, universe)
		for _, how := range []string{"decode", "bytes", "unitetop"} {
			b.Run(fmt.Sprintf("items=%d/%s", universe, how), func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					pane := NewTally()
					if err := unite[how](pane, pieces); err != nil {
						b.Fatal(err)
					}
					if _, err := pane.MarshalBinary(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// benchPieces encodes BenchmarkUnitePieces' 60 tallies over universe
// items.
func benchPieces(b *testing.B, universe uint64) [][]byte {
	r := rand.New(rand.NewPCG(3, 4))
	z := rand.NewZipf(r, 1.1, 1, universe-1)
	var pieces [][]byte
	for range 60 {
		w := NewTallyWriter()
		users := map[uint64][]uint64{}
		for range 20_000 {
			it := z.Uint64()
			u := r.Uint64() % 5_000_000
			users[it] = append(users[it], Hash(fmt.Sprint("u", u)))
		}
		var s Sketch
		n := 0
		for it, us := range users {
			// As the pre-aggregation writes them: up to 1,024 items with
			// their users, and in Pairs only the pairs their sets do not
			// imply (the other items', and a dense item's).
			name := fmt.Sprint("item", it)
			if n == 1024 {
				for _, h := range us {
					w.Pairs.AddHash(PairHash(h, Hash(name)))
				}
				continue
			}
			n++
			s.ResetTally()
			for _, h := range us {
				s.AddHash(h)
			}
			if !s.IsSet() {
				for _, h := range us {
					w.Pairs.AddHash(PairHash(h, Hash(name)))
				}
			}
			if err := w.Add(name, uint64(len(us)), &s); err != nil {
				b.Fatal(err)
			}
		}
		enc, err := w.AppendBinary(nil)
		if err != nil {
			b.Fatal(err)
		}
		pieces = append(pieces, enc)
	}
	return pieces
}
