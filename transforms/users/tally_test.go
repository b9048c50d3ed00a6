package users

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func tallyOf(items map[string][]string) *Tally {
	t := NewTally()
	for it, us := range items {
		e := t.Entry(it)
		for _, u := range us {
			e.Count++
			e.Users.Add(u)
			t.Pairs.AddHash(PairHash(Hash(u), Hash(it)))
		}
	}
	return t
}

// sameTally fails t unless got has want's pairs estimate and items, each
// with want's count and users estimate.
func sameTally(t *testing.T, what string, got, want *Tally) {
	t.Helper()
	if g, w := got.Pairs.Estimate(), want.Pairs.Estimate(); g != w {
		t.Errorf("%s: pairs %d, want %d", what, g, w)
	}
	if len(got.Items) != len(want.Items) {
		t.Fatalf("%s: %d items, want %d", what, len(got.Items), len(want.Items))
	}
	for it, we := range want.Items {
		ge := got.Items[it]
		if ge == nil || ge.Count != we.Count || ge.Users.Estimate() != we.Users.Estimate() {
			t.Errorf("%s: %s: got %+v, want count %d users %d", what, it, ge, we.Count, we.Users.Estimate())
		}
	}
}

// Property: a tally survives its binary form; merging a tally twice (a
// retried bundle) changes no estimate; Trim keeps the biggest counts; any
// corrupted input is an error, never a panic.
func TestTally(t *testing.T) {
	a := tallyOf(map[string][]string{"x": {"u1", "u2", "u2", "u3"}, "y": {"u1"}})
	b := tallyOf(map[string][]string{"x": {"u3", "u4"}, "z": {"u9", "u8"}})
	m := NewTally()
	for _, o := range []*Tally{a, b, b} {
		enc, err := o.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		d, err := UnmarshalTally(enc)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Merge(d); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]uint64{"x": 4, "y": 1, "z": 2}
	for it, w := range want {
		if got := m.Items[it].Users.Estimate(); got != w {
			t.Errorf("%s: %d users, want %d", it, got, w)
		}
	}
	// pairs: x{u1,u2,u3,u4} y{u1} z{u8,u9}
	if got := m.Pairs.Estimate(); got != 7 {
		t.Errorf("pairs %d, want 7", got)
	}
	if got := m.Items["x"].Count; got != 8 { // 4 + 2 + 2 (b merged twice)
		t.Errorf("x count %d, want 8", got)
	}
	m.Trim(2)
	if len(m.Items) != 2 || m.Items["y"] != nil {
		t.Errorf("trim 2 kept %v", fmt.Sprint(len(m.Items)))
	}
	enc, _ := a.MarshalBinary()
	for i := range enc {
		if _, err := UnmarshalTally(enc[:i]); !errors.Is(err, ErrBadSketch) {
			t.Fatalf("truncated to %d bytes: %v", i, err)
		}
		bad := append([]byte(nil), enc...)
		bad[i] ^= 0xff
		UnmarshalTally(bad) // must not panic
	}
}

// TestTallyAbsorb: uniting decoded tallies by Absorb gives what Merge
// gives, into an empty tally and into one with items, and empties each
// tally it absorbs.
func TestTallyAbsorb(t *testing.T) {
	parts := []map[string][]string{
		{"x": {"u1", "u2", "u2", "u3"}, "y": {"u1"}},
		{"x": {"u3", "u4"}, "z": {"u9", "u8"}},
		{"z": {"u9", "u7"}, "w": {"u1"}},
	}
	merged, absorbed := NewTally(), NewTally()
	for _, p := range parts {
		if err := merged.Merge(tallyOf(p)); err != nil {
			t.Fatal(err)
		}
		enc, err := tallyOf(p).MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		d, err := UnmarshalTally(enc)
		if err != nil {
			t.Fatal(err)
		}
		if err := absorbed.Absorb(d); err != nil {
			t.Fatal(err)
		}
		if len(d.Items) != 0 || d.Pairs.Estimate() != 0 {
			t.Errorf("absorbed tally not emptied: %d items", len(d.Items))
		}
	}
	sameTally(t, "absorbed (want: merged)", absorbed, merged)
}

// appendV1 writes t in tally format version 1 (what builds before
// version 2 wrote into pipeline state): each sketch framed by a 4-byte
// big-endian length around the Sketch binary format.
func appendV1(t *Tally) []byte {
	b := []byte("TKT\x01")
	frame := func(s *Sketch) {
		enc, err := s.MarshalBinary()
		if err != nil {
			panic(err)
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(enc)))
		b = append(b, enc...)
	}
	frame(&t.Pairs)
	b = binary.AppendUvarint(b, uint64(len(t.Items)))
	for it, e := range t.Items {
		b = binary.AppendUvarint(b, uint64(len(it)))
		b = append(b, it...)
		b = binary.AppendUvarint(b, e.Count)
		frame(&e.Users)
	}
	return b
}

// TestTallyFormats: a tally of exact sets, an empty sketch and a dense
// sketch survives version 2, and its version 1 encoding decodes to the
// same; every truncation of either is an error.
func TestTallyFormats(t *testing.T) {
	tl := tallyOf(map[string][]string{"x": {"u1", "u2"}, "y": {"u1"}})
	tl.Entry("empty").Count = 3
	big := tl.Entry("big")
	for i := range 5000 {
		big.Count++
		big.Users.Add(fmt.Sprint("u_", i))
		tl.Pairs.AddHash(PairHash(Hash(fmt.Sprint("u_", i)), Hash("big")))
	}
	v2, err := tl.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	for name, enc := range map[string][]byte{"v2": v2, "v1": appendV1(tl)} {
		d, err := UnmarshalTally(enc)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sameTally(t, name, d, tl)
		for i := range enc {
			if _, err := UnmarshalTally(enc[:i]); !errors.Is(err, ErrBadSketch) {
				t.Fatalf("%s truncated to %d bytes: %v", name, i, err)
			}
		}
	}
	if d, _ := UnmarshalTally(v2); d.Items["x"].Users.hll != nil || d.Items["big"].Users.hll == nil {
		t.Error("version 2 did not keep x a set and big dense")
	}
}

// FuzzUnmarshalTally: arbitrary bytes decode to an error wrapping
// ErrBadSketch or to a tally that re-encodes to the same estimates.
func FuzzUnmarshalTally(f *testing.F) {
	tl := tallyOf(map[string][]string{"x": {"u1", "u2"}, "y": {"u1"}})
	enc, _ := tl.MarshalBinary()
	f.Add(enc)
	f.Add(appendV1(tl))
	f.Fuzz(func(t *testing.T, data []byte) {
		// AbsorbBinary never panics, and its errors wrap ErrBadSketch too
		// (it may refuse what UnmarshalTally reads: another precision).
		if err := NewTally().AbsorbBinary(data); err != nil && !errors.Is(err, ErrBadSketch) && !errors.Is(err, ErrPrecision) {
			t.Fatalf("AbsorbBinary error %v does not wrap ErrBadSketch", err)
		}
		d, err := UnmarshalTally(data)
		if err != nil {
			if !errors.Is(err, ErrBadSketch) {
				t.Fatalf("error %v does not wrap ErrBadSketch", err)
			}
			return
		}
		again, err := d.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		dd, err := UnmarshalTally(again)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if dd.Pairs.Estimate() != d.Pairs.Estimate() || len(dd.Items) != len(d.Items) {
			t.Fatal("re-encoding changed the tally")
		}
		for it, e := range d.Items {
			if de := dd.Items[it]; de == nil || de.Count != e.Count || de.Users.Estimate() != e.Users.Estimate() {
				t.Fatalf("re-encoding changed %q", it)
			}
		}
	})
}

// TestTrimKeepsTheBiggest: Trim keeps exactly the items a full sort by
// count (ties: the smaller name) puts first, many of them tied.
func TestTrimKeepsTheBiggest(t *testing.T) {
	for _, keep := range []int{1, 7, 100, 999} {
		tl := NewTally()
		type kc struct {
			name  string
			count uint64
		}
		var all []kc
		for i := range 1000 {
			name := fmt.Sprintf("item%04d", (i*7919)%1000)
			c := uint64((i * 31) % 50) // 20 items share each count
			tl.Entry(name).Count = c
			all = append(all, kc{name, c})
		}
		slices.SortFunc(all, func(a, b kc) int {
			if a.count != b.count {
				return cmp.Compare(b.count, a.count)
			}
			return strings.Compare(a.name, b.name)
		})
		tl.Trim(keep)
		if len(tl.Items) != keep {
			t.Fatalf("keep %d: %d items left", keep, len(tl.Items))
		}
		for _, x := range all[:keep] {
			if tl.Items[x.name] == nil {
				t.Fatalf("keep %d: %s (count %d) dropped", keep, x.name, x.count)
			}
		}
	}
}

// TestTallyWriter: a writer's encoding decodes to the tally built from the
// same items and pairs (estimates and counts), across Reset, with sets
// and dense sketches, and an item without users is written as such.
func TestTallyWriter(t *testing.T) {
	w := NewTallyWriter()
	var u Sketch
	for round := range 2 {
		w.Reset()
		want := NewTally()
		for i := range 50 {
			item := fmt.Sprintf("item-%d-%d", round, i)
			n := 1 + i*i // up to 2,402 users: the last ones go dense
			u.ResetTally()
			e := want.Entry(item)
			e.Count = uint64(2 * n)
			for j := range n {
				h := Hash(fmt.Sprint("user", j))
				u.AddHash(h)
				e.Users.AddHash(h)
				ph := PairHash(h, Hash(item))
				w.Pairs.AddHash(ph)
				want.Pairs.AddHash(ph)
			}
			if err := w.Add(item, e.Count, &u); err != nil {
				t.Fatal(err)
			}
		}
		u.ResetTally()
		want.Entry("no-users").Count = 7
		if err := w.Add("no-users", 7, &u); err != nil {
			t.Fatal(err)
		}
		if w.Len() != 51 {
			t.Fatalf("Len %d, want 51", w.Len())
		}
		enc, err := w.AppendBinary([]byte("prefix"))
		if err != nil {
			t.Fatal(err)
		}
		if string(enc[:6]) != "prefix" {
			t.Fatalf("AppendBinary overwrote dst")
		}
		got, err := UnmarshalTally(enc[6:])
		if err != nil {
			t.Fatal(err)
		}
		sameTally(t, fmt.Sprint("round ", round), got, want)
	}
}

// TestTallyAbsorbBinary: uniting encoded tallies by AbsorbBinary gives
// what Merge of the decoded tallies gives (sets, dense sketches, version
// 1 input, items new and known); a truncated or corrupted input is an
// error that leaves the tally as it was, and never a panic.
func TestTallyAbsorbBinary(t *testing.T) {
	big := make([]string, 3000) // dense at TallyPrecision (over 1,024)
	for i := range big {
		big[i] = fmt.Sprint("b", i)
	}
	parts := []*Tally{
		tallyOf(map[string][]string{"x": {"u1", "u2", "u2", "u3"}, "y": {"u1"}}),
		tallyOf(map[string][]string{"x": {"u3", "u4"}, "z": {"u9", "u8"}, "hot": big[:2000]}),
		tallyOf(map[string][]string{"z": {"u9", "u7"}, "w": {"u1"}, "hot": big[1000:]}),
		tallyOf(map[string][]string{"x": big[:600], "w": big[:700]}), // x, w pass 1,024 united
	}
	var encs [][]byte
	merged, absorbed := NewTally(), NewTally()
	for i, p := range parts {
		enc, err := p.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			enc = appendV1(p) // the general path
		}
		encs = append(encs, enc)
		d, err := UnmarshalTally(enc)
		if err != nil {
			t.Fatal(err)
		}
		if err := merged.Merge(d); err != nil {
			t.Fatal(err)
		}
		if err := absorbed.AbsorbBinary(enc); err != nil {
			t.Fatal(err)
		}
	}
	same := func(what string, got, want *Tally) { t.Helper(); sameTally(t, what, got, want) }
	same("absorbed", absorbed, merged)
	// An item named "" is an item, not the pairs.
	unnamed := tallyOf(map[string][]string{"": {"u1", "u2"}})
	enc0, err := unnamed.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got := NewTally()
	if err := got.AbsorbBinary(enc0); err != nil {
		t.Fatal(err)
	}
	same("item named \"\"", got, unnamed)
	if n := absorbed.Items["hot"].Users.Estimate(); n < 2850 || n > 3150 {
		t.Errorf("hot: %d users, want about 3,000", n)
	}
	// Corrupt inputs: an error (or a valid tally), t unchanged on error.
	enc := encs[1]
	for i := range enc {
		base := NewTally()
		if err := base.AbsorbBinary(encs[0]); err != nil {
			t.Fatal(err)
		}
		ref := NewTally()
		ref.AbsorbBinary(encs[0])
		if err := base.AbsorbBinary(enc[:i]); !errors.Is(err, ErrBadSketch) {
			t.Fatalf("truncated to %d bytes: %v", i, err)
		}
		same(fmt.Sprint("after truncation to ", i), base, ref)
		bad := append([]byte(nil), enc...)
		bad[i] ^= 0xff
		if err := base.AbsorbBinary(bad); err != nil {
			same(fmt.Sprint("after corrupting byte ", i), base, ref)
		}
	}
}

// TestTallyImpliedPairs: a version 3 tally whose Pairs leaves out the
// pairs of the items whose users are a set (as the pre-aggregation writes
// it) reads back, by UnmarshalTally and by AbsorbBinary (twice: a retried
// piece), with every pair: the exact count while the pairs are few, within
// the sketch's error when they are many; and a Pairs that holds them
// anyway counts them once.
func TestTallyImpliedPairs(t *testing.T) {
	for _, c := range []struct {
		name             string
		items, perItem   int // items in the tally, users of each
		dense, untracked int // users of one more item (dense when > 1,024), pairs of items not in the tally
		withImplied      bool
	}{
		{"few", 20, 5, 0, 30, false},
		{"few, implied pairs also in Pairs", 20, 5, 0, 30, true},
		{"many", 300, 4, 3000, 2000, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := NewTallyWriter()
			exact := map[uint64]bool{}
			var u Sketch
			add := func(item string, n int, inPairs bool) {
				u.ResetTally()
				for j := range n {
					h := Hash(fmt.Sprint(item, "/u", j%(n/2+1))) // repeats too
					u.AddHash(h)
					ph := PairHash(h, Hash(item))
					exact[ph] = true
					if inPairs {
						w.Pairs.AddHash(ph)
					}
				}
				if err := w.Add(item, uint64(n), &u); err != nil {
					t.Fatal(err)
				}
			}
			for i := range c.items {
				add(fmt.Sprint("item", i), c.perItem, c.withImplied)
			}
			if c.dense > 0 {
				add("dense", c.dense, true) // a HyperLogLog implies nothing
				if u.IsSet() {
					t.Fatalf("%d users still a set", c.dense)
				}
			}
			for i := range c.untracked {
				ph := PairHash(Hash(fmt.Sprint("v", i)), Hash(fmt.Sprint("tail", i%7)))
				exact[ph] = true
				w.Pairs.AddHash(ph)
			}
			enc, err := w.AppendBinary(nil)
			if err != nil {
				t.Fatal(err)
			}
			want := float64(len(exact))
			check := func(how string, got uint64) {
				t.Helper()
				if len(exact) <= setMax(TallyPrecision) && float64(got) != want {
					t.Errorf("%s: %d pairs, want %v (exact)", how, got, want)
				} else if d := math.Abs(float64(got)-want) / want; d > 0.05 {
					t.Errorf("%s: %d pairs, want %v within 5%%", how, got, want)
				}
			}
			dec, err := UnmarshalTally(enc)
			if err != nil {
				t.Fatal(err)
			}
			check("UnmarshalTally", dec.Pairs.Estimate())
			abs := NewTally()
			for range 2 {
				if err := abs.AbsorbBinary(enc); err != nil {
					t.Fatal(err)
				}
			}
			check("AbsorbBinary twice", abs.Pairs.Estimate())
			// Re-encoded (version 2, every pair in Pairs) and read again.
			again, err := abs.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			re, err := UnmarshalTally(again)
			if err != nil {
				t.Fatal(err)
			}
			check("version 2 of the union", re.Pairs.Estimate())
			if without := w.Pairs.Estimate(); !c.withImplied && float64(without) >= want {
				t.Fatalf("Pairs alone holds %d of %v pairs: the case implies none", without, want)
			}
		})
	}
}

// TestUniteTopEqualsAbsorbTrim: UniteTop gives, item for item and bit for
// bit, what AbsorbBinary of every piece and then Trim give: over pieces
// of every version (3 from a TallyWriter with sets and HyperLogLogs, 2, 1,
// and a truncated one, which is an error in both), onto a tally that
// already holds items, with many items tied at the cut, and for cuts
// below, at and above the union's size.
func TestUniteTopEqualsAbsorbTrim(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	z := rand.NewZipf(r, 1.1, 1, 5000)
	piece := func(version int) []byte {
		byItem := map[string][]string{}
		for range 3000 {
			it := fmt.Sprint("i", z.Uint64())
			byItem[it] = append(byItem[it], fmt.Sprint("u", r.IntN(20000)))
		}
		if version == 3 {
			w := NewTallyWriter()
			var s Sketch
			for it, us := range byItem {
				s.ResetTally()
				for _, u := range us {
					s.Add(u)
				}
				// An item not tracked (its pairs only), or dense, or (some
				// of the others) with its pairs in Pairs too: harmless.
				untracked := r.IntN(8) == 0
				if untracked || !s.IsSet() || r.IntN(10) == 0 {
					for _, u := range us {
						w.Pairs.AddHash(PairHash(Hash(u), Hash(it)))
					}
				}
				if untracked {
					continue
				}
				if err := w.Add(it, uint64(len(us)), &s); err != nil {
					t.Fatal(err)
				}
			}
			enc, err := w.AppendBinary(nil)
			if err != nil {
				t.Fatal(err)
			}
			return enc
		}
		tl := tallyOf(byItem)
		if version == 1 {
			return appendV1(tl)
		}
		enc, err := tl.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return enc
	}
	var pieces [][]byte
	for i := range 12 {
		pieces = append(pieces, piece([]int{3, 3, 3, 2}[i%4]))
	}
	hot := NewTallyWriter() // one item dense (over 1,024 users)
	var s Sketch
	for j := range 3000 {
		s.AddHash(Hash(fmt.Sprint("h", j)))
		hot.Pairs.AddHash(PairHash(Hash(fmt.Sprint("h", j)), Hash("i1")))
	}
	if err := hot.Add("i1", 3000, &s); err != nil {
		t.Fatal(err)
	}
	henc, err := hot.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	pieces = append(pieces, henc, piece(1), pieces[0][:len(pieces[0])/2])
	start := piece(2) // the pane as it was
	from := func() *Tally {
		tl := NewTally()
		if err := tl.AbsorbBinary(start); err != nil {
			t.Fatal(err)
		}
		return tl
	}
	splitTies := 0
	for _, max := range []int{1, 10, 500, 1000, 2000, 3000, 4000, 1 << 20} {
		want, got := from(), from()
		var wantErrs []error
		for _, p := range pieces {
			wantErrs = append(wantErrs, want.AbsorbBinary(p))
		}
		want.Trim(max)
		errs := got.UniteTop(pieces, max)
		for i := range pieces {
			if (errs[i] == nil) != (wantErrs[i] == nil) {
				t.Errorf("max %d: piece %d: error %v, want %v", max, i, errs[i], wantErrs[i])
			}
		}
		if wantErrs[len(pieces)-1] == nil {
			t.Fatal("the truncated piece united")
		}
		identicalTally(t, fmt.Sprint("max ", max), got, want)
		// Count the cuts that fall inside a group of tied counts: the
		// case where keeping only the items above the floor would differ.
		all := from()
		for _, p := range pieces {
			all.AbsorbBinary(p)
		}
		if len(want.Items) < len(all.Items) {
			floor := uint64(math.MaxUint64)
			for _, e := range want.Items {
				floor = min(floor, e.Count)
			}
			in, out := 0, 0
			for it, e := range all.Items {
				if e.Count == floor {
					if want.Items[it] != nil {
						in++
					} else {
						out++
					}
				}
			}
			if in > 0 && out > 0 {
				splitTies++
			}
		}
	}
	if splitTies < 3 {
		t.Errorf("%d cuts split tied counts, want at least 3", splitTies)
	}
	// UniteTopMin: as if every piece were absorbed, the items new to the
	// pane counted under min removed (their pairs stay), then trimmed;
	// Left is what was removed.
	had := from().Items
	for _, least := range []uint64{2, 3, 7} {
		for _, top := range []int{10, 2000, 1 << 20} {
			want, got := from(), from()
			for _, p := range pieces {
				want.AbsorbBinary(p)
			}
			var wantLeft Left
			for it, e := range want.Items {
				if had[it] == nil && e.Count < least {
					delete(want.Items, it)
					wantLeft.Items++
					wantLeft.Sum += e.Count
					wantLeft.Max = max(wantLeft.Max, e.Count)
				}
			}
			want.Trim(top)
			_, left := got.UniteTopMin(pieces, top, least)
			identicalTally(t, fmt.Sprint("min ", least, " max ", top), got, want)
			if left != wantLeft || left.Items == 0 {
				t.Errorf("min %d max %d: left %+v, want %+v (and some)", least, top, left, wantLeft)
			}
		}
	}
}

// identicalTally fails t unless got and want have the same pairs and
// items with the same counts and users, sketch for sketch.
func identicalTally(t *testing.T, what string, got, want *Tally) {
	t.Helper()
	enc := func(s *Sketch) string {
		b, err := s.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if enc(&got.Pairs) != enc(&want.Pairs) {
		t.Errorf("%s: pairs differ (%d, want %d)", what, got.Pairs.Estimate(), want.Pairs.Estimate())
	}
	if len(got.Items) != len(want.Items) {
		t.Fatalf("%s: %d items, want %d", what, len(got.Items), len(want.Items))
	}
	for it, we := range want.Items {
		ge := got.Items[it]
		if ge == nil {
			t.Fatalf("%s: %q missing", what, it)
		}
		if ge.Count != we.Count || enc(&ge.Users) != enc(&we.Users) {
			t.Fatalf("%s: %q: count %d users %d, want count %d users %d", what, it, ge.Count, ge.Users.Estimate(), we.Count, we.Users.Estimate())
		}
	}
}
