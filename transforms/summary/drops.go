package summary

import (
	"cmp"
	"slices"
)

// Drops is a bounded sketch of the counts a summary left out: every item
// untracked in the summary has a count of at most Drops.Bound of its hash.
// It sharpens Theta, which bounds every untracked item alike.
//
// Why: merges add Theta. In a spam wave every 10 s bucket overflows by a
// few junk keys and its Theta becomes 1 or 2; a junk key seen once in one
// bucket then gets every other bucket's Theta added to its hi, as much as
// a real item seen in each of them, and ranked by hi the two cannot be
// told apart (BENCHMARKS.md, "The spam wave"). With Drops, a bucket that
// never saw the junk key adds what its cells say: 0 for most keys.
//
// Shape: DropsDepth rows of DropsWidth saturating four-bit cells, each
// item mapped to one cell per row like a count-min sketch (Cormode and
// Muthukrishnan 2005). Unlike one, a cut records an item it drops as the
// maximum of the cell and the item's hi, not the sum: every item a cut
// drops has count <= its hi <= each of its cells. A merge of two
// summaries of disjoint event sets adds the cells, since an item
// untracked on both sides has count <= the sum of its two bounds. So a
// cell holds the largest drop of each merged part that mapped to it,
// summed over the parts, where Theta sums the largest drop of each part
// over all items: a key dropped once with count 1 keeps a bound near 1,
// not the window's Theta. A cell that reaches 15 means "no bound" (Theta
// applies). The bounds are deterministic, as Theta's.
//
// Measured (BENCHMARKS.md, "Drops"): through the spam wave of
// pipelines/fastpath's TestSpamWave, the least recall@100 of the 1m, 5m
// and 1h hashtag lists went from 0.91, 0.96 and 0.96 to 1, and
// recall@1000 from 0.38, 0.81 and 0.90 to 0.93, 0.73 and 0.97; on an
// ordinary 80-minute replay the 1h lists' mean count - lower per entry
// fell from 0.40 to 0.04 and their share complete rose from 91% to 97%.
// Tried and
// not kept: a Bloom filter of the dropped keys (an item it holds gets the
// whole Theta, which for a window's aggregate is a sum over its buckets:
// 5m recall@1000 0.34), one-byte cells (half the cells in the same 64
// KiB: 1m recall@1000 0.90, 1h 0.89), and discarding a Drops once most
// of its cells are set (sides with and without then mix: 5m 0.32).
//
// Memory is bounded (DropsDepth*DropsWidth four-bit cells, 64 KiB, at
// most) whatever the number of items, and only summaries that dropped
// something have one. Few drops are kept as a sorted list of the cells
// they set (4 bytes a cell: a bucket that left out 300 keys lists 1,200
// cells, 5 KiB), more (over 8,192 cells) as the whole array.
type Drops struct {
	// Cells, when not nil, holds the DropsDepth rows of DropsWidth
	// four-bit cells, sixteen to a word (cell i is nibble i%16 of word
	// i/16, from the low end), so that a merge adds them sixteen at a
	// time.
	Cells []uint64
	// Sparse, when Cells is nil, lists the cells not 0 in index order,
	// each as index<<4 | value.
	Sparse []uint32
	// settled is how many of Sparse's cells were in order when Records
	// began (reserve): settle sorts only the rest and merges.
	settled int
}

// DropsWidth (a power of two) and DropsDepth size every Drops.
// Four-bit cells rather than bytes: twice the cells in the same memory
// halve how many a spam wave's drops fill (a junk key's bound is the least
// of its DropsDepth cells), and a drop's bound above 14 is Theta's order
// anyway.
const (
	DropsWidth = 1 << 15
	DropsDepth = 4
	dropsCells = DropsWidth * DropsDepth
	dropsWords = dropsCells / 16
	dropsNone  = 15 // a saturated cell: no bound
	// dropsSparseMax is the most cells a sparse Drops lists (4 bytes
	// each: 32 KiB, half the array's 64 KiB); past it, the array.
	dropsSparseMax = dropsWords
)

// NewDrops returns an empty sketch (every untracked count 0).
func NewDrops() *Drops { return &Drops{} }

// dropsBlock is the cells of one cache line (64 bytes): an item's cells,
// one in each row, all lie in one block chosen by its hash, 32 cells of
// each row there (a blocked sketch, as blocked Bloom filters: Putze,
// Sanders and Singler, "Cache-, hash- and space-efficient Bloom filters",
// WEA 2007), so that a bound or a record reads one line, not DropsDepth.
const (
	dropsBlock     = 128
	dropsBlocks    = dropsCells / dropsBlock
	dropsRowSeg    = dropsBlock / DropsDepth // a row's cells in a block
	dropsBlockBits = 10                      // log2(dropsBlocks)
	dropsSegBits   = 5                       // log2(dropsRowSeg)
)

// Compile-time checks that the bit counts match the sizes above.
var (
	_ [dropsBlocks - 1<<dropsBlockBits]struct{}
	_ [1<<dropsBlockBits - dropsBlocks]struct{}
	_ [dropsRowSeg - 1<<dropsSegBits]struct{}
	_ [1<<dropsSegBits - dropsRowSeg]struct{}
)

// dropsBase is the first cell of the block of remixed hash m.
func dropsBase(m uint64) int { return int(m&(dropsBlocks-1)) * dropsBlock }

// dropsCell is row i's cell for remixed hash m: in m's block (its low
// dropsBlockBits bits), at dropsSegBits more bits of m for each row.
func dropsCell(m uint64, i int) int {
	return dropsBase(m) + i*dropsRowSeg + dropsOff(m, i)
}

// dropsOff is row i's cell for remixed hash m within its block's row.
func dropsOff(m uint64, i int) int {
	return int(m >> (dropsBlockBits + dropsSegBits*uint(i)) & (dropsRowSeg - 1))
}

// dropsHash remixes an item's hash for dropsCell, so that its cells are
// independent of the bits the partition and the count-min sketch use.
func dropsHash(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	return h
}

// cell returns cell c's value.
func (d *Drops) cell(c int) uint64 {
	if d.Cells != nil {
		return d.Cells[c>>4] >> (4 * (c & 15)) & 0xf
	}
	i, ok := slices.BinarySearchFunc(d.Sparse, uint32(c), func(e, c uint32) int { return cmp.Compare(e>>4, c) })
	if !ok {
		return 0
	}
	return uint64(d.Sparse[i] & 0xf)
}

// dense makes d an array.
func (d *Drops) dense() {
	if d.Cells != nil {
		return
	}
	d.Cells = make([]uint64, dropsWords)
	for _, e := range d.Sparse {
		c := e >> 4
		d.Cells[c>>4] |= uint64(e&0xf) << (4 * (c & 15))
	}
	d.Sparse = nil
}

// Record notes that the item of hash h was dropped with count at most hi.
// A sparse d lists the cells unordered until settle.
func (d *Drops) Record(h, hi uint64) {
	v := min(hi, dropsNone)
	if v == 0 {
		return
	}
	m := dropsHash(h) // all four cells in one cache line
	for i := range DropsDepth {
		c := dropsCell(m, i)
		if d.Cells == nil {
			d.Sparse = append(d.Sparse, uint32(c)<<4|uint32(v))
			continue
		}
		w, sh := &d.Cells[c>>4], 4*uint(c&15)
		if old := *w >> sh & 0xf; v > old {
			*w += (v - old) << sh
		}
	}
}

// reserve makes room for m more Records: an array if the list would grow
// past dropsSparseMax.
func (d *Drops) reserve(m int) {
	if d.Cells == nil && len(d.Sparse)+DropsDepth*m > dropsSparseMax {
		d.dense()
	}
	d.settled = len(d.Sparse)
}

// settle orders a sparse d's cells after Records, keeping the largest
// value of each: the Records' cells are sorted and merged into the cells
// that were in order before them (reserve).
func (d *Drops) settle() {
	if d.Cells != nil {
		return
	}
	old, added := d.Sparse[:min(d.settled, len(d.Sparse))], d.Sparse[min(d.settled, len(d.Sparse)):]
	d.settled = 0
	if len(added) == 0 {
		return
	}
	slices.Sort(added) // by index, then value
	out := make([]uint32, 0, len(old)+len(added))
	keep := func(e uint32) {
		if n := len(out); n > 0 && out[n-1]>>4 == e>>4 {
			out[n-1] = max(out[n-1], e) // the larger value
			return
		}
		out = append(out, e)
	}
	for len(old) > 0 || len(added) > 0 {
		if len(added) == 0 || (len(old) > 0 && old[0] <= added[0]) {
			keep(old[0])
			old = old[1:]
		} else {
			keep(added[0])
			added = added[1:]
		}
	}
	d.Sparse = out
}

// Bound is an upper bound of the count of an untracked item of hash h;
// ^uint64(0) when its cells saturated (no bound beyond Theta).
func (d *Drops) Bound(h uint64) uint64 {
	m := dropsHash(h)
	var v [DropsDepth]uint64
	if d.Cells != nil {
		for i := range DropsDepth {
			c := dropsCell(m, i)
			v[i] = d.Cells[c>>4] >> (4 * (c & 15)) & 0xf
		}
	} else {
		// The block's cells are a run of the list: find its start, read
		// the run.
		base := dropsBase(m)
		j, _ := slices.BinarySearch(d.Sparse, uint32(base)<<4)
		for ; j < len(d.Sparse); j++ {
			e := d.Sparse[j]
			o := int(e>>4) - base
			if o >= dropsBlock {
				break
			}
			if i := o / dropsRowSeg; o%dropsRowSeg == dropsOff(m, i) {
				v[i] = uint64(e & 0xf)
			}
		}
	}
	b := v[0]
	for _, x := range v[1:] {
		b = min(b, x)
	}
	if b == dropsNone {
		return ^uint64(0)
	}
	return b
}

// Add adds o's cells to d's, each saturating at 15. Two arrays add
// sixteen cells a word (a SWAR add: the low three bits of each nibble
// summed without carrying into the next, the top bits and carries
// combined by hand, and every nibble that overflowed set to 0xf); two
// lists merge; a list adds to an array cell by cell.
func (d *Drops) Add(o *Drops) {
	switch {
	case d.Cells == nil && o.Cells == nil:
		d.addSparse(o.Sparse)
		return
	case d.Cells == nil:
		d.dense()
	}
	if o.Cells == nil {
		for _, e := range o.Sparse {
			c := e >> 4
			w, sh := &d.Cells[c>>4], 4*(c&15)
			v := min(*w>>sh&0xf+uint64(e&0xf), dropsNone)
			*w = *w&^(0xf<<sh) | v<<sh
		}
		return
	}
	const low3, high = 0x7777777777777777, 0x8888888888888888
	dc := d.Cells[:dropsWords]
	for i, y := range o.Cells[:dropsWords] {
		x := dc[i]
		s := x&low3 + y&low3
		t := (x ^ y) & high
		over := (x&y | s&t) & high
		dc[i] = s ^ t | (over>>3)*0xf
	}
}

// addSparse merges the list os into d's list (both in index order).
func (d *Drops) addSparse(os []uint32) {
	if len(d.Sparse)+len(os) > dropsSparseMax {
		d.dense()
		d.Add(&Drops{Sparse: os})
		return
	}
	ds := d.Sparse
	out := make([]uint32, 0, len(ds)+len(os))
	for len(ds) > 0 && len(os) > 0 {
		switch a, b := ds[0], os[0]; {
		case a>>4 < b>>4:
			out = append(out, a)
			ds = ds[1:]
		case a>>4 > b>>4:
			out = append(out, b)
			os = os[1:]
		default:
			out = append(out, a&^0xf|min(a&0xf+b&0xf, dropsNone))
			ds, os = ds[1:], os[1:]
		}
	}
	out = append(out, ds...)
	d.Sparse = append(out, os...)
}

// Clone returns a copy of d.
func (d *Drops) Clone() *Drops { return d.CopyInto(nil) }

// CopyInto copies d into dst's memory (new memory if dst is nil) and
// returns the copy.
func (d *Drops) CopyInto(dst *Drops) *Drops {
	if dst == nil {
		dst = &Drops{}
	}
	if d.Cells != nil {
		dst.Cells = append(dst.Cells[:0], d.Cells...)
		dst.Sparse = nil
		return dst
	}
	dst.Cells = nil
	dst.Sparse = append(dst.Sparse[:0], d.Sparse...)
	return dst
}

// dropsEqual reports whether two sketches hold the same cells, in
// whichever form.
func dropsEqual(a, b *Drops) bool {
	if a.Cells == nil && b.Cells == nil {
		return slices.Equal(a.Sparse, b.Sparse)
	}
	for c := range dropsCells {
		if a.cell(c) != b.cell(c) {
			return false
		}
	}
	return true
}
