package summary

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"unsafe"
)

// MaxItemBytes bounds an item id in a decoded summary.
const MaxItemBytes = 1024

const (
	magic0, magic1 = 'T', 'S'
	formatVersion  = 1
	// formatDrops is format 1 followed by the sketch of dropped counts
	// (Summary.Dropped), written only when the summary has one.
	formatDrops = 2
)

// ErrCorrupt is wrapped by every decoding error.
var ErrCorrupt = errors.New("corrupt summary")

// MarshalBinary encodes the summary, format version 1 (all integers are
// encoding/binary uvarints):
//
//	'T' 'S' 0x01
//	N, Total, Theta, number of entries E (E <= N)
//	E times: len(item), item bytes, Lo, Hi-Lo      (in (hash, item) order)
//	sketch width W (0: no sketch); if W > 0: depth D, then D*W cells
//
// A summary with a sketch of dropped counts (Dropped) is written as format
// 2: 'T' 'S' 0x02, the same fields, then the sketch: 0x01 and its cells as
// little-endian 8-byte words (Drops.Cells), or 0x02 (sparse), the number
// of cells not 0 and for each its index as the difference from the one
// before (the first from 0) and its value as a byte, whichever is shorter;
// or, when more than dropsSparseMax cells are set and planes are shorter
// than that (counting four bytes for each cell listed), 0x03 (planes): a
// bitmap of the cells not 0 (bit b of word w is cell 64w+b, as
// little-endian 8-byte words: 16 KiB), then the cells above 1 as 0x02
// lists them. A busy bucket's sketch at 1M events/s has about a quarter
// of its cells set, nearly all to 1: planes hold it in about 20 KiB,
// where the raw form takes 64 KiB (BENCHMARKS.md, "Drops in planes").
//
// Hashes are not stored: the decoder recomputes them, so a summary can never
// carry a hash that disagrees with its item.
func (sm *Summary) MarshalBinary() ([]byte, error) { return sm.AppendBinary(nil) }

// AppendBinary appends the encoding to dst.
func (sm *Summary) AppendBinary(dst []byte) ([]byte, error) {
	version := byte(formatVersion)
	if sm.Dropped != nil {
		version = formatDrops
	}
	dst = append(dst, magic0, magic1, version)
	dst = binary.AppendUvarint(dst, uint64(sm.N))
	dst = binary.AppendUvarint(dst, sm.Total)
	dst = binary.AppendUvarint(dst, sm.Theta)
	dst = binary.AppendUvarint(dst, uint64(len(sm.Entries)))
	for i := range sm.Entries {
		e := &sm.Entries[i]
		dst = binary.AppendUvarint(dst, uint64(len(e.Item)))
		dst = append(dst, e.Item...)
		dst = binary.AppendUvarint(dst, e.Lo)
		dst = binary.AppendUvarint(dst, e.Hi-e.Lo)
	}
	if sm.Sketch == nil {
		dst = binary.AppendUvarint(dst, 0)
	} else {
		dst = binary.AppendUvarint(dst, uint64(sm.Sketch.Width))
		dst = binary.AppendUvarint(dst, uint64(sm.Sketch.Depth))
		for _, c := range sm.Sketch.Cells {
			dst = binary.AppendUvarint(dst, c)
		}
	}
	if sm.Dropped != nil {
		dst = sm.Dropped.appendBinary(dst)
	}
	return dst, nil
}

// appendBinary appends the sketch's encoding (see AppendBinary).
func (d *Drops) appendBinary(dst []byte) []byte {
	set, above := len(d.Sparse), 0
	if d.Cells != nil {
		set = 0
		for _, w := range d.Cells {
			set += bits.OnesCount64(nibblesSet(w))
			above += bits.OnesCount64(nibblesAbove1(w))
		}
	}
	// A sparse cell takes 2 to 4 bytes, a raw one half a byte.
	raw := 8*set >= dropsCells
	// Planes when shorter than the raw form, or than a sparse list of two
	// bytes a cell at least (only a dense sketch has more than
	// dropsSparseMax cells set): the bitmap, then at most four bytes for
	// each cell above 1 (a gap of up to three, its value).
	if set > dropsSparseMax && d.Cells != nil {
		other := 1 + 8*dropsWords
		if !raw {
			other = 1 + uvarintLen(uint64(set)) + 2*set
		}
		if 1+2*dropsWords+uvarintLen(uint64(above))+4*above < other {
			return d.appendPlanes(dst, above)
		}
	}
	if raw {
		dst = append(dst, 1)
		for _, w := range d.Cells {
			dst = binary.LittleEndian.AppendUint64(dst, w)
		}
		return dst
	}
	dst = append(dst, 2)
	dst = binary.AppendUvarint(dst, uint64(set))
	last := 0
	put := func(c int, v byte) {
		dst = binary.AppendUvarint(dst, uint64(c-last))
		dst = append(dst, v)
		last = c
	}
	if d.Cells == nil {
		for _, e := range d.Sparse {
			put(int(e>>4), byte(e&0xf))
		}
		return dst
	}
	for i, w := range d.Cells {
		for set := nibblesSet(w); set != 0; set &= set - 1 {
			j := bits.TrailingZeros64(set) / 4
			put(16*i+j, byte(w>>(4*j)&0xf))
		}
	}
	return dst
}

// appendPlanes appends a dense sketch with above cells above 1 as planes
// (0x03, see AppendBinary): the bitmap of cells not 0, then the cells
// above 1 listed, both made in one pass over the cells.
func (d *Drops) appendPlanes(dst []byte, above int) []byte {
	dst = slices.Grow(dst, 1+2*dropsWords+binary.MaxVarintLen64+4*above)
	dst = append(dst, 3)
	at := len(dst)
	dst = dst[:at+2*dropsWords]
	dst = binary.AppendUvarint(dst, uint64(above))
	last := 0
	for i := 0; i < len(d.Cells); i += 4 {
		var m uint64
		for j, w := range d.Cells[i : i+4] {
			m |= packNibbleBits(nibblesSet(w)) << (16 * j)
			for a := nibblesAbove1(w); a != 0; a &= a - 1 {
				k := bits.TrailingZeros64(a) / 4
				c := 16*(i+j) + k
				dst = binary.AppendUvarint(dst, uint64(c-last))
				dst = append(dst, byte(w>>(4*k)&0xf))
				last = c
			}
		}
		binary.LittleEndian.PutUint64(dst[at+2*i:], m)
	}
	return dst
}

// nibblesAbove1 has the low bit of each nibble of w above 1 set.
func nibblesAbove1(w uint64) uint64 { return (w>>1 | w>>2 | w>>3) & 0x1111111111111111 }

// packNibbleBits gathers the low bits of w's sixteen nibbles (bits 0, 4,
// ..., 60; the others 0) into the low sixteen bits, nibble i to bit i.
func packNibbleBits(x uint64) uint64 {
	x = (x | x>>3) & 0x0303030303030303
	x = (x | x>>6) & 0x000f000f000f000f
	x = (x | x>>12) & 0x000000ff000000ff
	return (x | x>>24) & 0xffff
}

// spreadNibbleBits is packNibbleBits' inverse: bit i of the low sixteen
// bits of x to bit 4i.
func spreadNibbleBits(x uint64) uint64 {
	return uint64(spreadByte[x&0xff]) | uint64(spreadByte[x>>8&0xff])<<32
}

// spreadByte[b] has bit 4i set for each bit i of b.
var spreadByte = func() (t [256]uint32) {
	for b := range t {
		for i := range 8 {
			t[b] |= uint32(b>>i&1) << (4 * i)
		}
	}
	return t
}()

func uvarintLen(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

// nibblesSet has the low bit of each nibble of w that is not 0 set.
func nibblesSet(w uint64) uint64 { return (w | w>>1 | w>>2 | w>>3) & 0x1111111111111111 }

// readDrops decodes a sketch of dropped counts (appendBinary), reusing
// old's memory.
func (d *decoder) readDrops(old *Drops) *Drops {
	kind := d.bytes(1)
	if d.err != nil {
		return nil
	}
	out := old
	if out == nil {
		out = NewDrops()
	}
	switch kind[0] {
	case 1:
		b := d.bytes(8 * dropsWords)
		if d.err != nil {
			return nil
		}
		out.makeCells()
		for i := range out.Cells {
			out.Cells[i] = binary.LittleEndian.Uint64(b[8*i:])
		}
	case 2:
		n := d.uvarint()
		if d.err == nil && (n > dropsCells || 2*n > uint64(len(d.data)-d.off)) {
			d.err = fmt.Errorf("%w: %d dropped-count cells in %d bytes", ErrCorrupt, n, len(d.data)-d.off)
		}
		if d.err != nil {
			return nil
		}
		out.Cells = nil
		out.Sparse = out.Sparse[:0]
		d.readCellList(n, 1, func(c uint64, v byte) error {
			out.Sparse = append(out.Sparse, uint32(c)<<4|uint32(v))
			return nil
		})
		if d.err != nil {
			return nil
		}
		if len(out.Sparse) > dropsSparseMax {
			out.dense()
		}
	case 3:
		b := d.bytes(2 * dropsWords)
		if d.err != nil {
			return nil
		}
		out.makeCells()
		set := 0
		for i := 0; i < len(b); i += 8 {
			m := binary.LittleEndian.Uint64(b[i:])
			set += bits.OnesCount64(m)
			for j := range 4 {
				out.Cells[i/2+j] = spreadNibbleBits(m >> (16 * j))
			}
		}
		n := d.uvarint()
		if d.err == nil && (set <= dropsSparseMax || n > uint64(set) || 2*n > uint64(len(d.data)-d.off)) {
			d.err = fmt.Errorf("%w: dropped-count planes of %d cells, %d above 1, in %d bytes", ErrCorrupt, set, n, len(d.data)-d.off)
		}
		if d.err != nil {
			return nil
		}
		d.readCellList(n, 2, func(c uint64, v byte) error {
			w, sh := &out.Cells[c/16], 4*(c%16)
			if *w>>sh&0xf != 1 {
				return fmt.Errorf("%w: dropped-count cell %d above 1 but not in the bitmap", ErrCorrupt, c)
			}
			*w += uint64(v-1) << sh
			return nil
		})
		if d.err != nil {
			return nil
		}
	default:
		d.err = fmt.Errorf("%w: dropped-count sketch kind %d", ErrCorrupt, kind[0])
		return nil
	}
	return out
}

// readCellList reads the n (gap, value) pairs of a list of cells (the
// sparse kind's, and the planes' cells above 1), checking that the cells
// increase within range and every value is in [least, 15], and calls f
// with each; an error from f stops it, as d's error.
func (d *decoder) readCellList(n uint64, least byte, f func(c uint64, v byte) error) {
	p := uint64(0)
	for i := range n {
		gap := d.uvarint()
		c := d.bytes(1)
		if d.err != nil {
			return
		}
		if (i > 0 && gap == 0) || gap >= dropsCells-p || c[0] < least || c[0] > dropsNone {
			d.err = fmt.Errorf("%w: dropped-count cell %d out of order, out of range or below %d", ErrCorrupt, i, least)
			return
		}
		p += gap
		if err := f(p, c[0]); err != nil {
			d.err = err
			return
		}
	}
}

// makeCells makes d a dense sketch, reusing its cells' memory and leaving
// their contents as they were: the caller writes every word.
func (d *Drops) makeCells() {
	if len(d.Cells) != dropsWords {
		d.Cells = make([]uint64, dropsWords)
	}
	d.Sparse = nil
}

// EncodedN reads only the capacity N of an encoded summary.
func EncodedN(data []byte) (int, error) {
	if len(data) < 3 || data[0] != magic0 || data[1] != magic1 {
		return 0, fmt.Errorf("%w: missing TS magic", ErrCorrupt)
	}
	if data[2] != formatVersion && data[2] != formatDrops {
		return 0, fmt.Errorf("%w: unknown version %d", ErrCorrupt, data[2])
	}
	n, k := binary.Uvarint(data[3:])
	if k <= 0 || n > MaxN {
		return 0, fmt.Errorf("%w: bad N", ErrCorrupt)
	}
	return int(n), nil
}

// UnmarshalBinary decodes data into sm, reusing sm's buffers. Arbitrary
// bytes give an error, never a panic, and never an allocation larger than the
// input justifies; after an error sm's sketch cells and Drops are unspecified.
func (sm *Summary) UnmarshalBinary(data []byte) error {
	return sm.unmarshal(data, func(ne int) []Entry { return grow(sm.Entries, ne) }, false)
}

// UnmarshalAliased decodes data into a new summary whose items are not
// copied: each is a string over data's own bytes. So data must never be
// written again while the summary, or any summary that took entries from
// it (a merge, a cut), is in use. It is for bytes their owner made once and
// only reads (the sliding windows' packed panes, transforms/slide): the
// decode then allocates the entries only, and an item shared by many
// summaries is held once.
func UnmarshalAliased(data []byte) (*Summary, error) {
	sm := new(Summary)
	if err := sm.unmarshal(data, func(ne int) []Entry { return make([]Entry, ne) }, true); err != nil {
		return nil, err
	}
	return sm, nil
}

// OwnItems copies sm's items into one buffer of their own (one
// allocation, the items' bytes only), so that sm no longer keeps alive
// the bytes they were decoded over (UnmarshalAliased) or the summaries
// they were merged from. For a summary decoded from bytes that are
// garbage at once (a decompressed pane, transforms/slide): aliased, each
// aggregate merged from it kept the whole decompressed encoding alive
// (its counts, its Drops) for its items' sake.
func (sm *Summary) OwnItems() {
	n := 0
	for i := range sm.Entries {
		n += len(sm.Entries[i].Item)
	}
	buf := make([]byte, n)
	off := 0
	for i := range sm.Entries {
		e := &sm.Entries[i]
		if e.Item == "" {
			continue
		}
		k := copy(buf[off:], e.Item)
		e.Item = unsafe.String(&buf[off], k)
		off += k
	}
}

// unmarshal is UnmarshalBinary decoding the entries into entries(E), a
// slice of length E (checked against the input's size before the call);
// alias: items are strings over data (UnmarshalAliased), not copies.
func (sm *Summary) unmarshal(data []byte, entries func(ne int) []Entry, alias bool) error {
	d := decoder{data: data}
	if len(data) < 3 || data[0] != magic0 || data[1] != magic1 {
		return fmt.Errorf("%w: missing TS magic", ErrCorrupt)
	}
	if data[2] != formatVersion && data[2] != formatDrops {
		return fmt.Errorf("%w: unknown version %d", ErrCorrupt, data[2])
	}
	d.off = 3
	n := d.uvarint()
	total := d.uvarint()
	theta := d.uvarint()
	ne := d.uvarint()
	if d.err != nil {
		return d.err
	}
	if n < 1 || n > MaxN {
		return fmt.Errorf("%w: N %d outside [1, %d]", ErrCorrupt, n, MaxN)
	}
	if ne > n {
		return fmt.Errorf("%w: %d entries for N %d", ErrCorrupt, ne, n)
	}
	// Each entry takes at least 3 bytes: bound the allocation by the input.
	if ne > uint64(len(data)-d.off)/3 {
		return fmt.Errorf("%w: %d entries in %d bytes", ErrCorrupt, ne, len(data)-d.off)
	}
	// Reuse sm's buffers: the streaming merges decode thousands of summaries
	// into one scratch value.
	out := Summary{N: int(n), Total: total, Theta: theta, Entries: entries(int(ne))}
	oldSketch, oldDrops := sm.Sketch, sm.Dropped
	for i := range out.Entries {
		l := d.uvarint()
		if d.err == nil && l > MaxItemBytes {
			return fmt.Errorf("%w: item of %d bytes", ErrCorrupt, l)
		}
		b := d.bytes(int(l))
		lo := d.uvarint()
		over := d.uvarint()
		if d.err != nil {
			return d.err
		}
		if lo+over < lo {
			return fmt.Errorf("%w: entry %d bounds overflow", ErrCorrupt, i)
		}
		var item string
		if alias {
			item = unsafe.String(unsafe.SliceData(b), len(b))
		} else {
			item = string(b)
		}
		out.Entries[i] = Entry{Item: item, Hash: Hash(item), Lo: lo, Hi: lo + over}
	}
	// Encoders write key order: one pass checks it and finds an item
	// given twice (next to each other in key order); input out of order
	// is sorted and checked again.
	if i, sorted := keyOrder(out.Entries); i > 0 {
		return fmt.Errorf("%w: item %q twice", ErrCorrupt, out.Entries[i].Item)
	} else if !sorted {
		out.sortByKey()
		if i, _ := keyOrder(out.Entries); i > 0 {
			return fmt.Errorf("%w: item %q twice", ErrCorrupt, out.Entries[i].Item)
		}
	}
	w := d.uvarint()
	if d.err != nil {
		return d.err
	}
	if w > 0 {
		depth := d.uvarint()
		if d.err != nil {
			return d.err
		}
		if err := checkSketchDims(int(min(w, MaxSketchWidth+1)), int(min(depth, MaxSketchDepth+1))); err != nil {
			return fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		cells := w * depth
		if cells > uint64(len(data)-d.off) { // one byte per cell at least
			return fmt.Errorf("%w: %d sketch cells in %d bytes", ErrCorrupt, cells, len(data)-d.off)
		}
		if oldSketch != nil && len(oldSketch.Cells) == int(cells) {
			out.Sketch = oldSketch
			out.Sketch.Width, out.Sketch.Depth = int(w), int(depth)
		} else {
			out.Sketch = &Sketch{Width: int(w), Depth: int(depth), Cells: make([]uint64, cells)}
		}
		for i := range out.Sketch.Cells {
			out.Sketch.Cells[i] = d.uvarint()
		}
		if d.err != nil {
			return d.err
		}
	}
	if data[2] == formatDrops {
		if out.Dropped = d.readDrops(oldDrops); d.err != nil {
			return d.err
		}
	}
	if d.off != len(data) {
		return fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(data)-d.off)
	}
	*sm = out
	return nil
}

// keyOrder reports whether es is in key order, and the index of an entry
// whose key equals the one before it (0: none), stopping at the first.
func keyOrder(es []Entry) (dup int, sorted bool) {
	sorted = true
	for i := 1; i < len(es); i++ {
		a, b := &es[i-1], &es[i]
		switch {
		case a.Hash < b.Hash:
		case a.Hash > b.Hash:
			sorted = false
		case a.Item == b.Item:
			return i, sorted
		case a.Item > b.Item:
			sorted = false
		}
	}
	return 0, sorted
}

func grow(e []Entry, n int) []Entry {
	if cap(e) >= n {
		return e[:n]
	}
	return make([]Entry, n)
}

// Unmarshal decodes a summary.
func Unmarshal(data []byte) (*Summary, error) {
	sm := new(Summary)
	if err := sm.UnmarshalBinary(data); err != nil {
		return nil, err
	}
	return sm, nil
}

type decoder struct {
	data []byte
	off  int
	err  error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.data[d.off:])
	if n <= 0 {
		d.err = fmt.Errorf("%w: bad varint at byte %d", ErrCorrupt, d.off)
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) bytes(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.data)-d.off {
		d.err = fmt.Errorf("%w: truncated at byte %d", ErrCorrupt, d.off)
		return nil
	}
	b := d.data[d.off : d.off+n]
	d.off += n
	return b
}

// Equal reports whether two summaries hold the same state.
func Equal(a, b *Summary) bool {
	if a.N != b.N || a.Total != b.Total || a.Theta != b.Theta || !slices.Equal(a.Entries, b.Entries) {
		return false
	}
	if (a.Sketch == nil) != (b.Sketch == nil) || (a.Dropped == nil) != (b.Dropped == nil) {
		return false
	}
	if a.Dropped != nil && !dropsEqual(a.Dropped, b.Dropped) {
		return false
	}
	return a.Sketch == nil || (a.Sketch.Width == b.Sketch.Width && a.Sketch.Depth == b.Sketch.Depth && slices.Equal(a.Sketch.Cells, b.Sketch.Cells))
}
