package users

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/axiomhq/hyperloglog"
)

// Property: the estimate of n distinct users is within 4 standard errors
// (4 x 0.81%) of n, and adding the same users again changes nothing.
func TestEstimateWithinError(t *testing.T) {
	for _, n := range []int{0, 1, 10, 1000, 20_000, 300_000} {
		s := New()
		for i := range n {
			s.Add(fmt.Sprintf("u_%d", i))
		}
		before := s.Estimate()
		for i := range n {
			s.Add(fmt.Sprintf("u_%d", i))
		}
		got := s.Estimate()
		if got != before {
			t.Fatalf("n=%d: re-adding the same users moved the estimate %d -> %d", n, before, got)
		}
		if err := math.Abs(float64(got) - float64(n)); err > 4*0.0081*float64(n)+1 {
			t.Fatalf("n=%d: estimate %d", n, got)
		}
	}
}

// Property: one account posting 500 times counts once.
func TestOneAccountManyPostsCountsOnce(t *testing.T) {
	s := New()
	for range 500 {
		s.Add("u_spam")
	}
	if got := s.Estimate(); got != 1 {
		t.Fatalf("estimate %d, want 1", got)
	}
}

// Property: a window merged from bucket sketches estimates the users of the
// union (users repeat across buckets), and merging is order independent.
func TestMergeBucketsIsUnion(t *testing.T) {
	buckets := make([]*Sketch, 60)
	for b := range buckets {
		buckets[b] = New()
		for i := range 200 { // the same 150 users every minute, plus 50 new
			u := i
			if i >= 150 {
				u = 150 + b*50 + (i - 150)
			}
			buckets[b].Add(fmt.Sprintf("u_%d", u))
		}
	}
	want := 150 + 60*50
	fwd, rev := New(), New()
	for b := range buckets {
		if err := fwd.Merge(buckets[b]); err != nil {
			t.Fatal(err)
		}
		if err := rev.Merge(buckets[len(buckets)-1-b]); err != nil {
			t.Fatal(err)
		}
	}
	if f, r := fwd.Estimate(), rev.Estimate(); f != r || math.Abs(float64(f)-float64(want)) > 0.04*float64(want) {
		t.Fatalf("merged estimates %d, %d; want %d", f, r, want)
	}
}

// Property: AddWeighted estimates the sum of the distinct users' weights,
// and a user is in or out the same way every time.
func TestWeightedEstimatesWeightSum(t *testing.T) {
	s := New()
	const n = 100_000
	sum := 0.0
	for i := range n {
		w := float64(i%10) / 10 // 0, 0.1, ... 0.9
		sum += w
		h := Hash(fmt.Sprintf("u_%d", i))
		s.AddWeighted(h, w)
		s.AddWeighted(h, w)
		if Keep(h, w) != Keep(h, w) {
			t.Fatal("Keep is not a function of its input")
		}
	}
	if got := float64(s.Estimate()); math.Abs(got-sum) > 0.03*sum {
		t.Fatalf("estimate %v, want about %v", got, sum)
	}
	low := New()
	for i := range 3000 {
		low.AddWeighted(Hash(fmt.Sprintf("new_%d", i)), 0.05)
	}
	if got := low.Estimate(); got > 250 {
		t.Fatalf("3,000 accounts of weight 0.05: estimate %d, want about 150", got)
	}
}

// Property: encode/decode is lossless, including the empty sketch.
func TestRoundTrip(t *testing.T) {
	for _, n := range []int{0, 3, 5000, 50_000} {
		s := New()
		for i := range n {
			s.Add(fmt.Sprintf("u_%d", i))
		}
		b, err := s.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var d Sketch
		if err := d.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		if d.Estimate() != s.Estimate() {
			t.Fatalf("n=%d: decoded %d, want %d", n, d.Estimate(), s.Estimate())
		}
	}
	var s Sketch
	for _, bad := range [][]byte{nil, []byte("TK"), []byte("XYZ\x01"), []byte("TKU\x03"), []byte("TKU\x01garbage"), []byte("TKU\x02S\x0c\x02\x01\x00\x00\x00\x01\x00\x00\x00"), []byte("TKU\x02X")} {
		if err := s.UnmarshalBinary(bad); !errors.Is(err, ErrBadSketch) {
			t.Fatalf("%q: err %v, want ErrBadSketch", bad, err)
		}
	}
}

func sketchOf(data []byte) *Sketch {
	s := New()
	for i := 0; i+2 <= len(data); i += 2 {
		s.Add(string(data[i : i+2]))
	}
	return s
}

// FuzzUnmarshalBinary: decoding arbitrary bytes returns an error or a
// sketch that estimates, merges and re-encodes without panicking; for
// sketches built from the input, a round trip is lossless and merge after
// encode/decode equals merge in memory.
func FuzzUnmarshalBinary(f *testing.F) {
	for _, n := range []int{0, 1, 100, 20_000} {
		s := New()
		for i := range n {
			s.Add(fmt.Sprint(i))
		}
		b, _ := s.MarshalBinary()
		f.Add(b)
	}
	f.Add([]byte("TKU\x01\x02\x0e"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var d Sketch
		if err := d.UnmarshalBinary(data); err == nil {
			d.Estimate()
			c := d.Clone()
			_ = c.Merge(sketchOf(data))
			_ = sketchOf(data).Merge(&d)
			if _, err := d.MarshalBinary(); err != nil {
				t.Fatalf("re-encode: %v", err)
			}
		} else if !errors.Is(err, ErrBadSketch) {
			t.Fatalf("error %v does not wrap ErrBadSketch", err)
		}

		half := len(data) / 2
		a, b := sketchOf(data[:half]), sketchOf(data[half:])
		ea, err := a.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		eb, _ := b.MarshalBinary()
		var da, db Sketch
		if err := da.UnmarshalBinary(ea); err != nil {
			t.Fatal(err)
		}
		if err := db.UnmarshalBinary(eb); err != nil {
			t.Fatal(err)
		}
		if da.Estimate() != a.Estimate() {
			t.Fatalf("round trip %d, want %d", da.Estimate(), a.Estimate())
		}
		mem := a.Clone()
		if err := mem.Merge(b); err != nil {
			t.Fatal(err)
		}
		if err := da.Merge(&db); err != nil {
			t.Fatal(err)
		}
		if da.Estimate() != mem.Estimate() {
			t.Fatalf("merge after decode %d, in memory %d", da.Estimate(), mem.Estimate())
		}
		again, _ := da.MarshalBinary()
		var dd Sketch
		if err := dd.UnmarshalBinary(again); err != nil || dd.Estimate() != mem.Estimate() {
			t.Fatalf("second round trip: %v, %d want %d", err, dd.Estimate(), mem.Estimate())
		}
		_ = bytes.Equal
	})
}

// TestExpect: a sketch readied for many users starts dense and estimates
// as a sparse one does; one readied for few stays sparse (small).
func TestExpect(t *testing.T) {
	for _, n := range []int{10, 600, 1100, 5000, 50000} {
		sparse, ready := Sketch{p: TallyPrecision}, Sketch{p: TallyPrecision}
		ready.Expect(n)
		for i := range n {
			h := PairHash(uint64(i)<<32, 42)
			sparse.AddHash(h)
			ready.AddHash(h)
		}
		se, re := float64(sparse.Estimate()), float64(ready.Estimate())
		if d := math.Abs(re-float64(n)) / float64(n); d > 0.05 {
			t.Errorf("%d users, readied: estimate %v (sparse %v)", n, re, se)
		}
		enc, err := ready.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if n == 10 && len(enc) > 200 {
			t.Errorf("10 users readied: %d bytes, want a sparse sketch", len(enc))
		}
		if n >= 1100 && len(enc) < 1<<TallyPrecision {
			t.Errorf("%d users readied: %d bytes, want a dense sketch", n, len(enc))
		}
	}
}

// Property: however a stream of users is split into sketches (exact sets,
// sets that overflow into dense HyperLogLogs, sketches readied dense) and
// in whatever order they are merged, encoded or not, the result estimates
// exactly what one sketch fed every user does (dense if any part was
// readied dense); below m/4 users that is otherwise the exact count.
func TestSetsAndDenseAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 9))
	for trial := range 200 {
		n := []int{0, 1, 5, 300, 1023, 1024, 1025, 1500, 5000}[trial%9]
		parts := 1 + r.IntN(6)
		one := Sketch{p: TallyPrecision}
		sks := make([]*Sketch, parts)
		for i := range sks {
			sks[i] = &Sketch{p: TallyPrecision}
			if r.IntN(4) == 0 {
				sks[i].Expect(r.IntN(2400))
				if sks[i].hll != nil { // readied dense: so is the union
					one.Expect(1 << 20)
				}
			}
		}
		distinct := map[uint64]bool{}
		for i := range n {
			h := Hash(fmt.Sprint("u_", i%(n/2+1))) // repeats
			if r.IntN(3) == 0 {
				h = Hash(fmt.Sprint("u_", i))
			}
			distinct[h] = true
			one.AddHash(h)
			sks[r.IntN(parts)].AddHash(h)
		}
		acc := &Sketch{p: TallyPrecision}
		for _, i := range r.Perm(parts) {
			o := sks[i]
			if r.IntN(2) == 0 {
				enc, err := o.MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				o = &Sketch{}
				if err := o.UnmarshalBinary(enc); err != nil {
					t.Fatal(err)
				}
			}
			if err := acc.Merge(o); err != nil {
				t.Fatal(err)
			}
		}
		got, want := acc.Estimate(), one.Estimate()
		if got != want {
			t.Fatalf("trial %d (n=%d, %d parts): merged %d, one sketch %d", trial, n, parts, got, want)
		}
		if d := len(distinct); d <= setMax(TallyPrecision) && one.hll == nil && want != uint64(d) {
			t.Fatalf("trial %d: %d distinct, estimate %d", trial, d, want)
		}
	}
	// Exact up to m/4, a HyperLogLog's error above.
	s := Sketch{p: TallyPrecision}
	for i := range setMax(TallyPrecision) {
		s.Add(fmt.Sprint("x", i))
		if s.Estimate() != uint64(i+1) {
			t.Fatalf("%d users: estimate %d", i+1, s.Estimate())
		}
	}
	if s.hll != nil {
		t.Fatal("a set of m/4 users turned dense")
	}
	s.Add("one more")
	if s.Estimate(); s.hll == nil {
		t.Fatal("a set past m/4 users is not dense")
	}
	if e := float64(s.Estimate()); math.Abs(e-1025) > 4*0.0163*1025 {
		t.Fatalf("1025 users dense: estimate %v", e)
	}
}

// Version 1 (the library's encoding, written before exact sets) still
// decodes, dense or sparse, and merges with the new forms.
func TestReadsVersion1(t *testing.T) {
	for _, n := range []int{3, 5000} {
		h, err := hyperloglog.NewSketch(TallyPrecision, true)
		if err != nil {
			t.Fatal(err)
		}
		want := &Sketch{p: TallyPrecision}
		for i := range n {
			x := Hash(fmt.Sprint("u_", i))
			h.InsertHash(x)
			want.AddHash(x)
		}
		lib, err := h.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var s Sketch
		if err := s.UnmarshalBinary(append([]byte("TKU\x01"), lib...)); err != nil {
			t.Fatal(err)
		}
		if got := s.Estimate(); got != h.Estimate() {
			t.Fatalf("n=%d: decoded %d, library %d", n, got, h.Estimate())
		}
		if d := math.Abs(float64(s.Estimate()) - float64(want.Estimate())); d > 4*0.0163*float64(n)+1 {
			t.Fatalf("n=%d: version 1 %d, version 2 %d", n, s.Estimate(), want.Estimate())
		}
		if err := s.Merge(want); err != nil {
			t.Fatal(err)
		}
	}
}

// A set merges with a HyperLogLog of any precision (it becomes one of the
// other's precision); two HyperLogLogs of different precisions do not.
func TestMergePrecisions(t *testing.T) {
	dense14 := New()
	dense14.Expect(1 << 20)
	for i := range 5000 {
		dense14.Add(fmt.Sprint("a", i))
	}
	set12 := &Sketch{p: TallyPrecision}
	for i := range 100 {
		set12.Add(fmt.Sprint("b", i))
	}
	if err := set12.Merge(dense14); err != nil {
		t.Fatalf("set into dense of another precision: %v", err)
	}
	if e := float64(set12.Estimate()); math.Abs(e-5100) > 4*0.0081*5100 {
		t.Fatalf("union of 5,000 and 100 users: %v", e)
	}
	dense12 := &Sketch{p: TallyPrecision}
	dense12.Expect(1 << 20)
	dense12.Add("c")
	before := dense12.Estimate()
	if err := dense12.Merge(dense14); !errors.Is(err, ErrPrecision) {
		t.Fatalf("dense 12 with dense 14: %v, want ErrPrecision", err)
	}
	if dense12.Estimate() != before {
		t.Fatal("a failed merge changed the sketch")
	}
}
