package users

import (
	"errors"
	"fmt"
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
