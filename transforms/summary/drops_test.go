package summary

import (
	"bytes"
	"errors"
	"slices"
	"strconv"
	"testing"
)

// junkBuckets returns six buckets' summaries (N = 4,096) of a spam wave:
// each bucket holds 4,300 junk keys seen once (its own) and 40 real items
// seen 1 to 3 times in every bucket, so every bucket overflows by a few
// hundred keys of count 1 and its Theta is 1; and the exact counts of all.
func junkBuckets(t *testing.T) ([]*Summary, map[string]uint64) {
	t.Helper()
	exact := map[string]uint64{}
	var out []*Summary
	for b := range 6 {
		c := NewCounter(0)
		add := func(it string, n uint64) {
			c.Add(it, Hash(it), n)
			exact[it] += n
		}
		for i := range 4300 {
			add("#junk_"+strconv.Itoa(b)+"_"+strconv.Itoa(i), 1)
		}
		for i := range 40 {
			add("#t"+strconv.Itoa(i), uint64(1+i%3))
		}
		sm := c.Summary(DefaultConfig())
		if sm.Theta != 1 || sm.Dropped == nil {
			t.Fatalf("bucket %d: Theta %d, Dropped %v: want an overflowing bucket", b, sm.Theta, sm.Dropped != nil)
		}
		out = append(out, sm)
	}
	return out, exact
}

// checkBounds fails when any item's bounds in sm do not hold its exact
// count: lo <= count <= hi for tracked items, count <= Bound otherwise.
func checkBounds(t *testing.T, name string, sm *Summary, exact map[string]uint64) {
	t.Helper()
	tracked := map[string]bool{}
	for _, e := range sm.Entries {
		tracked[e.Item] = true
		if c := exact[e.Item]; e.Lo > c || c > e.Hi {
			t.Fatalf("%s: %s count %d outside [%d, %d]", name, e.Item, c, e.Lo, e.Hi)
		}
	}
	for it, c := range exact {
		if !tracked[it] && c > sm.Bound(Hash(it)) {
			t.Fatalf("%s: untracked %s count %d above its bound %d", name, it, c, sm.Bound(Hash(it)))
		}
	}
}

// TestDropsSharpenTheta: merging six overflowing buckets, a junk key seen
// once keeps a hi near 1 where Theta alone gives it 1 plus every other
// bucket's Theta (6), so real items seen in every bucket rank above the
// junk; and every bound holds, in every merge order the pipeline uses.
func TestDropsSharpenTheta(t *testing.T) {
	bs, exact := junkBuckets(t)
	stripped := func(sm *Summary) *Summary { c := sm.WithN(sm.N); c.Dropped = nil; return c }
	var with, without *Summary = bs[0], stripped(bs[0])
	var m Merger
	for i, b := range bs {
		if i > 0 {
			var err error
			if with, err = MergeEvents(with, b); err != nil {
				t.Fatal(err)
			}
			if without, err = MergeEvents(without, stripped(b)); err != nil {
				t.Fatal(err)
			}
		}
		data, err := b.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if err := m.AddEncoded(data); err != nil {
			t.Fatal(err)
		}
	}
	if with.Dropped == nil || without.Dropped != nil {
		t.Fatalf("Dropped: %v with, %v without", with.Dropped != nil, without.Dropped != nil)
	}
	checkBounds(t, "MergeEvents", with, exact)
	checkBounds(t, "without Drops", without, exact)
	if !Equal(m.Result(), with) {
		t.Fatal("Merger of encoded buckets differs from MergeEvents in memory")
	}
	into := new(Summary)
	if err := MergeEventsInto(into, bs[0], bs[1], 4096); err != nil {
		t.Fatal(err)
	}
	if pair, _ := MergeEvents(bs[0], bs[1]); !Equal(into, pair) {
		t.Fatal("MergeEventsInto differs from MergeEvents")
	}
	// How the junk ranks: tracked junk keys with hi above their count, 1.
	junkOver1 := func(sm *Summary) (n int) {
		for _, e := range sm.Entries {
			if e.Item[1] == 'j' && e.Hi > 1 {
				n++
			}
		}
		return n
	}
	overWith, overWithout := junkOver1(with), junkOver1(without)
	t.Logf("junk keys tracked with hi > 1: %d with Drops, %d without (Theta %d)", overWith, overWithout, with.Theta)
	if overWithout == 0 {
		t.Fatal("without Drops no junk key has hi > 1: the stream does not exercise Theta")
	}
	if overWith*10 > overWithout {
		t.Fatalf("Drops sharpen too little: %d junk keys with hi > 1, %d without", overWith, overWithout)
	}
	// The answer ranks every real item it tracks (seen in every bucket,
	// 6 to 18 times) above every junk key. (A real item seen once in each
	// bucket can be cut from every bucket it is in, like a junk key: it is
	// then untracked, with a bound that holds.)
	realIn := func(sm *Summary) (n int) {
		for _, e := range sm.Entries {
			if e.Item[1] == 't' {
				n++
			}
		}
		return n
	}
	junkAmongReal := func(sm *Summary) (n int) {
		for _, e := range sm.Answer(realIn(sm)).Entries {
			if e.Item[1] == 'j' {
				n++
			}
		}
		return n
	}
	if r := realIn(with); r < 35 {
		t.Fatalf("%d of 40 real items tracked", r)
	}
	if n := junkAmongReal(with); n > 0 {
		t.Fatalf("%d junk keys rank among the real items with Drops", n)
	}
	// Without Drops the junk reaches the real items' least count (6),
	// with them it stays far below.
	maxJunk := func(sm *Summary) (m uint64) {
		for _, e := range sm.Entries {
			if e.Item[1] == 'j' {
				m = max(m, e.Hi)
			}
		}
		return m
	}
	if mw, mo := maxJunk(with), maxJunk(without); mo < 6 || mw >= 6 {
		t.Fatalf("largest junk hi %d with Drops, %d without: want under 6 and at least 6", mw, mo)
	}
}

// TestDropsUnknownSide: a side with Theta > 0 and no Drops (a summary
// encoded before Drops existed, or a union of partitions) bounds its
// untracked items by Theta only, so the merge keeps no Drops, and its
// bounds hold.
func TestDropsUnknownSide(t *testing.T) {
	bs, exact := junkBuckets(t)
	old := bs[1].WithN(4096)
	old.Dropped = nil
	m, err := MergeEvents(bs[0], old)
	if err != nil {
		t.Fatal(err)
	}
	if m.Dropped != nil {
		t.Fatal("a merge with a side of unknown drops has Drops")
	}
	sub := map[string]uint64{}
	for it, c := range exact {
		if it[1] == 'j' && it[len("#junk_")] > '1' {
			continue // only buckets 0 and 1 are merged
		}
		sub[it] = c
	}
	for i := range 40 {
		sub["#t"+strconv.Itoa(i)] = uint64(2 * (1 + i%3))
	}
	checkBounds(t, "unknown side", m, sub)
	// A junk key of bucket 0 tracked there gets bucket 1's whole Theta.
	if e := m.Find("#junk_0_0"); e != nil && e.Hi != 1+old.Theta {
		t.Fatalf("junk key of bucket 0: hi %d, want 1 + Theta %d", e.Hi, old.Theta)
	}
	// Further cuts add nothing to a Drops that does not exist.
	m.Cut(100)
	if m.Dropped != nil {
		t.Fatal("a cut of a summary without Drops made one")
	}
}

func TestDropsEncoding(t *testing.T) {
	bs, _ := junkBuckets(t)
	dense := bs[0].WithN(4096)
	dense.Dropped.dense()
	for i := range dense.Dropped.Cells {
		dense.Dropped.Cells[i] = 0x123456789abcdef1 // every cell set: the raw form
	}
	planes := bs[0].WithN(4096)
	planes.Dropped = busyBucketDrops()
	kinds := map[string]byte{"sparse": 2, "dense": 1, "planes": 3}
	for name, sm := range map[string]*Summary{"sparse": bs[0], "dense": dense, "planes": planes} {
		b, err := sm.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if b[2] != formatDrops {
			t.Fatalf("%s: format %d", name, b[2])
		}
		got, err := Unmarshal(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !Equal(got, sm) {
			t.Fatalf("%s: changed in a round trip", name)
		}
		db := sm.Dropped.appendBinary(nil)
		if !bytes.HasSuffix(b, db) || db[0] != kinds[name] {
			t.Fatalf("%s: Drops kind %d, want %d", name, db[0], kinds[name])
		}
		if name == "planes" && len(db) > 24<<10 {
			t.Errorf("planes: %d bytes, want under 24 KiB (64 KiB raw)", len(db))
		}
		// Every prefix is rejected, never a panic.
		for n := 0; n < len(b); n += 1 + n/50 {
			if _, err := Unmarshal(b[:n]); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%s: %d of %d bytes decoded (%v)", name, n, len(b), err)
			}
		}
		t.Logf("%s: %d bytes, %d of them the Drops", name, len(b), len(db))
	}
	// Without Drops the encoding is format 1, as before.
	plain := bs[0].WithN(4096)
	plain.Dropped = nil
	if b, _ := plain.MarshalBinary(); b[2] != formatVersion {
		t.Fatalf("a summary without Drops encoded as format %d", b[2])
	}
	// Corrupt Drops sections of an otherwise good summary.
	sm := &Summary{N: 1, Theta: 1, Dropped: NewDrops()}
	good, _ := sm.MarshalBinary()
	// good ends in the Drops: sparse, no cells.
	if !bytes.HasSuffix(good, []byte{2, 0}) {
		t.Fatalf("empty Drops encoded as % x", good)
	}
	for name, tail := range map[string][]byte{
		"kind 4":         {4},
		"zero cell":      {2, 1, 5, 0},
		"cell above 15":  {2, 1, 5, 16},
		"out of order":   {2, 2, 5, 1, 0, 1},
		"out of range":   {2, 1, 0x80, 0x80, 0x08, 1}, // cell 2^17 of 4 x 2^15
		"raw, short":     {1, 0, 0},
		"trailing bytes": {2, 0, 0},
	} {
		bad := append(bytes.Clone(good[:len(good)-2]), tail...)
		if _, err := Unmarshal(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: decoded (%v)", name, err)
		}
	}
	if _, err := Unmarshal(good); err != nil {
		t.Fatalf("empty Drops: %v", err)
	}
	// Planes: a bitmap of 9,000 cells (more than dropsSparseMax), then the
	// cells above 1.
	bitmap := func(cells int) []byte {
		b := make([]byte, 2*dropsWords)
		for c := range cells {
			b[c/8] |= 1 << (c % 8)
		}
		return b
	}
	planesTail := func(cells int, above ...byte) []byte {
		return append(append([]byte{3}, bitmap(cells)...), above...)
	}
	ok := append(bytes.Clone(good[:len(good)-2]), planesTail(9000, 1, 5, 3)...)
	if got, err := Unmarshal(ok); err != nil || got.Dropped.cell(5) != 3 || got.Dropped.cell(4) != 1 || got.Dropped.cell(9000) != 0 {
		t.Fatalf("planes: %v", err)
	}
	for name, tail := range map[string][]byte{
		"planes, too few cells":        planesTail(100, 0),
		"planes, above 1 not set":      planesTail(9000, 1, 0x90, 0x4e, 2), // cell 10,000
		"planes, 1 listed":             planesTail(9000, 1, 5, 1),
		"planes, above 15":             planesTail(9000, 1, 5, 16),
		"planes, out of order":         planesTail(9000, 2, 5, 2, 0, 2),
		"planes, more listed than set": planesTail(8193, 0x82, 0x40),
		"planes, short bitmap":         {3, 0xff, 0xff},
		"planes, trailing bytes":       planesTail(9000, 0, 0),
	} {
		bad := append(bytes.Clone(good[:len(good)-2]), tail...)
		if _, err := Unmarshal(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: decoded (%v)", name, err)
		}
	}
}

// busyBucketDrops is a sketch like a busy bucket's at 1M events/s (about
// a quarter of the cells 1, one in a hundred 2 or 3) with its last cell
// 15: the planes form.
func busyBucketDrops() *Drops {
	d := NewDrops()
	d.dense()
	x := uint64(7)
	for c := range dropsCells {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		v := uint64(0)
		switch r := x % 400; {
		case r < 4:
			v = 2 + r%2
		case r < 100:
			v = 1
		}
		d.Cells[c/16] |= v << (4 * (c % 16))
	}
	d.Cells[dropsWords-1] |= 0xf << 60
	return d
}

// randomDrops returns a sketch with every cell random (dense) or n random
// cells set (sparse).
func randomDrops(x *uint64, n int) *Drops {
	next := func() uint64 {
		*x ^= *x << 13
		*x ^= *x >> 7
		*x ^= *x << 17
		return *x
	}
	d := NewDrops()
	if n < 0 {
		d.dense()
		for i := range d.Cells {
			d.Cells[i] = next()
		}
		return d
	}
	for range n {
		d.Sparse = append(d.Sparse, uint32(next()%dropsCells)<<4|uint32(1+next()%dropsNone))
	}
	d.settle()
	return d
}

// TestDropsAdd: Add equals a cell-by-cell add saturating at 15, whichever
// form each side has (the sixteen-cells-a-word add of two arrays, a list
// into an array, two lists merged, a list made an array when it grows past
// dropsSparseMax).
func TestDropsAdd(t *testing.T) {
	x := uint64(0x9e3779b97f4a7c15)
	for _, ns := range [][2]int{{-1, -1}, {-1, 500}, {500, -1}, {700, 900}, {dropsSparseMax - 10, 100}} {
		a, b := randomDrops(&x, ns[0]), randomDrops(&x, ns[1])
		listed := a.Cells == nil && b.Cells == nil && len(a.Sparse)+len(b.Sparse) <= dropsSparseMax
		want := make([]uint64, dropsCells)
		for c := range want {
			want[c] = min(a.cell(c)+b.cell(c), dropsNone)
		}
		a.Add(b)
		for c := range want {
			if a.cell(c) != want[c] {
				t.Fatalf("%v: cell %d: %d, want %d", ns, c, a.cell(c), want[c])
			}
		}
		if listed != (a.Cells == nil) {
			t.Errorf("%v: sparse %v after Add", ns, a.Cells == nil)
		}
	}
}

// TestDropsRecord: every item recorded keeps a bound of at least its hi,
// in a list and after the list became an array, and Record keeps the
// larger value of a cell.
func TestDropsRecord(t *testing.T) {
	d := NewDrops()
	var hs []uint64
	rec := func(n int) {
		d.reserve(n)
		for range n {
			h := Hash("dropped" + strconv.Itoa(len(hs)))
			hs = append(hs, h)
			d.Record(h, uint64(1+len(hs)%14))
		}
		d.settle()
	}
	check := func(name string) {
		t.Helper()
		for i, h := range hs {
			if b := d.Bound(h); b < uint64(1+(i+1)%14) {
				t.Fatalf("%s: item %d dropped with %d, bound %d", name, i, 1+(i+1)%14, b)
			}
		}
	}
	rec(300)
	if d.Cells != nil || len(d.Sparse) > 4*300 {
		t.Fatalf("300 drops: dense %v, %d cells listed", d.Cells != nil, len(d.Sparse))
	}
	check("list")
	if !slices.IsSorted(d.Sparse) {
		t.Fatal("list out of order after settle")
	}
	rec(dropsSparseMax / DropsDepth)
	if d.Cells == nil {
		t.Fatal("still a list past dropsSparseMax")
	}
	check("array")
}
