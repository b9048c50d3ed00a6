package users

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
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
	if got, want := absorbed.Pairs.Estimate(), merged.Pairs.Estimate(); got != want {
		t.Errorf("pairs %d, Merge gives %d", got, want)
	}
	if len(absorbed.Items) != len(merged.Items) {
		t.Fatalf("%d items, Merge gives %d", len(absorbed.Items), len(merged.Items))
	}
	for it, me := range merged.Items {
		ae := absorbed.Items[it]
		if ae == nil || ae.Count != me.Count || ae.Users.Estimate() != me.Users.Estimate() {
			t.Errorf("%s: absorbed %+v, merged count %d users %d", it, ae, me.Count, me.Users.Estimate())
		}
	}
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
		if got, want := d.Pairs.Estimate(), tl.Pairs.Estimate(); got != want {
			t.Errorf("%s: pairs %d, want %d", name, got, want)
		}
		if len(d.Items) != len(tl.Items) {
			t.Fatalf("%s: %d items, want %d", name, len(d.Items), len(tl.Items))
		}
		for it, e := range tl.Items {
			de := d.Items[it]
			if de == nil || de.Count != e.Count || de.Users.Estimate() != e.Users.Estimate() {
				t.Errorf("%s: %s decoded %+v, want count %d users %d", name, it, de, e.Count, e.Users.Estimate())
			}
		}
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
