package trend

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sync"
)

// Binary state format, version 1 (the whole state: trendbeam keeps it as
// the rings value, split.go; all integers little-endian or varint):
//
//	"tr" 0x01                      magic and version
//	uvarint hours                  hourly ring length the state was written with
//	varint  last, first            Unix ms of the last input and of the earliest history
//	byte    flags                  bit 0: History coverage was asked for
//	uvarint total                  the last input's total
//	ring    cut.recent, cut.hourly the list's cut shares
//	uvarint n                      tracked items, sorted by name, each:
//	  uvarint len, bytes name
//	  byte    flags                bit 0: listed
//	  float64 peak                 IEEE 754 bits, little-endian
//	  varint  peakAt, seen
//	  uvarint count
//	  ring    recent (12), hourly (hours)
//
// A ring of n float32 is a bitmap of ceil(n/8) bytes (bit i set: slot i is
// not zero) followed by the set slots' IEEE 754 bits, little-endian, in slot
// order: young items cost a few bytes, a full week about 4 bytes a slot.
//
// When hours differs from the Config's, the hourly history is dropped (its
// ring positions would mean other hours); everything else is kept.

var magic = []byte{'t', 'r', 1}

// ErrBadState wraps every state decoding error.
var ErrBadState = errors.New("trend: bad state")

// MarshalBinary encodes the scorer's state (format above).
func (sc *Scorer) MarshalBinary() ([]byte, error) {
	if sc.lazy {
		return nil, fmt.Errorf("%w: MarshalBinary needs the whole state (MarshalSplit)", ErrRings)
	}
	b := make([]byte, 0, 64+len(sc.items)*(48+4*len(sc.cut.hourly)/2))
	b = sc.appendHeader(append(b, magic...))
	its := sc.sortedItems()
	b = binary.AppendUvarint(b, uint64(len(its)))
	for _, it := range its {
		n := it.name
		b = binary.AppendUvarint(b, uint64(len(n)))
		b = append(b, n...)
		var f byte
		if it.listed {
			f |= 1
		}
		b = appendItem(append(b, f), it)
		b = appendRing(b, it.hourly)
	}
	return b, nil
}

// appendHeader appends what both formats have after the magic: the ring
// length, last, first, flags, total and the cut's rings.
func (sc *Scorer) appendHeader(b []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(sc.cut.hourly)))
	b = binary.AppendVarint(b, sc.last)
	b = binary.AppendVarint(b, sc.first)
	var flags byte
	if sc.coverageSet {
		flags |= 1
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, sc.total)
	b = appendRing(b, sc.cut.recent[:])
	return appendRing(b, sc.cut.hourly)
}

// readHeader reads appendHeader's fields into sc and returns the ring
// length the state was written with (the cut's hourly ring is kept only
// when it is sc's).
func (sc *Scorer) readHeader(r *reader) int {
	hours := r.uvarint("hours")
	if r.err == nil && (hours < 1 || hours > 24*31) {
		r.fail("hours")
	}
	sc.last = r.varint("last")
	sc.first = r.varint("first")
	flags := r.bytes(1, "flags")
	if r.err == nil {
		if flags[0]&^1 != 0 {
			r.fail("flags")
		}
		sc.coverageSet = flags[0]&1 != 0
	}
	sc.total = r.uvarint("total")
	r.ring(recentSlots, sc.cut.recent[:], "cut recent", -1)
	r.ring(int(hours), sc.cut.hourly, "cut hourly", -1)
	return int(hours)
}

// appendItem appends an item's fields that both formats have after its
// flags: peak, peak time, seen, count and the recent ring.
func appendItem(b []byte, it *item) []byte {
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(it.peak))
	b = binary.AppendVarint(b, it.peakAt)
	b = binary.AppendVarint(b, it.seen)
	b = binary.AppendUvarint(b, it.count)
	return appendRing(b, it.recent[:])
}

// readItem reads appendItem's fields into it.
func (r *reader) readItem(it *item) {
	pb := r.bytes(8, "peak")
	if r.err == nil {
		it.peak = math.Float64frombits(binary.LittleEndian.Uint64(pb))
		if !(it.peak >= 0) || math.IsInf(it.peak, 0) {
			r.fail("peak")
		}
	}
	it.peakAt = r.varint("peak time")
	it.seen = r.varint("seen")
	it.count = r.uvarint("count")
	r.ring(recentSlots, it.recent[:], "recent", -1)
}

// name reads an item's name, checking that names come sorted and unique.
func (r *reader) name(i uint64, prev string) string {
	name := string(r.bytes(int(min(r.uvarint("name length"), math.MaxInt32)), "name"))
	if r.err == nil && (name == "" || (i > 0 && name <= prev)) {
		r.fail("names not sorted and unique")
	}
	return name
}

func appendRing(b []byte, r []float32) []byte {
	at := len(b)
	b = append(b, make([]byte, (len(r)+7)/8)...)
	for i, v := range r {
		if v != 0 {
			b[at+i/8] |= 1 << (i % 8)
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
	}
	return b
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", ErrBadState, what)
	}
}

func (r *reader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || len(r.b) < n {
		r.fail(what)
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

// ring reads a ring of n slots into dst when dst has n slots; otherwise it
// skips it. It returns the largest value read outside slot skip (0 when
// none was, or dst was skipped).
func (r *reader) ring(n int, dst []float32, what string, skip int) (top float32) {
	bm := r.bytes((n+7)/8, what)
	if r.err != nil {
		return 0
	}
	set := 0
	for _, x := range bm {
		set += bits.OnesCount8(x)
	}
	if n%8 != 0 && bm[len(bm)-1]>>(n%8) != 0 {
		r.fail(what + ": bits beyond the ring")
		return 0
	}
	vals := r.bytes(4*set, what)
	if r.err != nil {
		return 0
	}
	keep := len(dst) == n
	// Only the set slots are visited, by the bitmap's set bits: a young
	// item's week-long ring has a few of its 168 (BenchmarkStateRoundTrip).
	j := 0
	for bi, x := range bm {
		for ; x != 0; x &= x - 1 {
			i := bi*8 + bits.TrailingZeros8(x)
			f := math.Float32frombits(binary.LittleEndian.Uint32(vals[j:]))
			j += 4
			if !(f > 0) || math.IsInf(float64(f), 0) {
				r.fail(what + ": share not positive and finite")
				return 0
			}
			if keep {
				dst[i] = f
				if i != skip {
					top = max(top, f)
				}
			}
		}
	}
	return top
}

// Decode rebuilds a scorer of list (typ, scope) from MarshalBinary's
// output, or from MarshalSplit's minute state (then without its rings
// until LoadRings: split.go), under cfg (which is not stored). Arbitrary
// bytes give an error, never a panic.
func Decode(typ, scope string, cfg Config, data []byte) (*Scorer, error) {
	sc := New(typ, scope, cfg)
	r := &reader{b: data}
	m := r.bytes(len(magic), "magic")
	if r.err == nil && string(m) == string(magic2) {
		return decodeMinute(sc, r)
	}
	if r.err != nil || string(m) != string(magic) {
		return nil, fmt.Errorf("%w: magic or version", ErrBadState)
	}
	hours := sc.readHeader(r)
	// Each item's past (Scorer.baseline: its largest hourly share before
	// the current hour) is taken while its ring is read, not in a second
	// pass over 169 slots per item per score.
	curHour := -1
	if !cfg.Seasonal && hours == cfg.Hours {
		curHour = mod(hourOf(sc.last), hours)
	}
	n := r.uvarint("items")
	if r.err == nil && n > uint64(len(r.b)) {
		r.fail("item count")
	}
	// One slab for every item's hourly ring: one allocation, not one per
	// item (n is bounded by the bytes left, checked above), from a pool
	// that Release refills: at the default cap it is 1.3 MB, allocated
	// and zeroed once per list and firing otherwise (fresh pages, the
	// larger part of a young state's round trip, BenchmarkStateRoundTrip).
	size := int(min(n, uint64(cfg.MaxItems))) * cfg.Hours
	sc.slab = getSlab(size)
	slab := (*sc.slab)[:size]
	var prev string
	for i := uint64(0); i < n && r.err == nil; i++ {
		name := r.name(i, prev)
		prev = name
		var hourly []float32
		if len(slab) >= cfg.Hours {
			hourly, slab = slab[:cfg.Hours:cfg.Hours], slab[cfg.Hours:]
		} else {
			hourly = make([]float32, cfg.Hours) // past the cap: read and dropped
		}
		it := &item{name: name, hourly: hourly, inOrder: true}
		f := r.bytes(1, "item flags")
		if r.err == nil {
			if f[0]&^1 != 0 {
				r.fail("item flags")
			}
			it.listed = f[0]&1 != 0
		}
		r.readItem(it)
		if past := r.ring(hours, it.hourly, "hourly", curHour); curHour >= 0 {
			it.past, it.pastHour, it.pastOK = past, hourOf(sc.last), true
		}
		if r.err == nil {
			if len(sc.items) >= cfg.MaxItems {
				continue // a smaller cap than the state was written with
			}
			sc.items[name] = it
			sc.order = append(sc.order, it)
		}
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	if r.err != nil {
		sc.Release()
		return nil, r.err
	}
	return sc, nil
}

// slabs pools the hourly-ring slabs of decoded scorers (see Decode).
var slabs sync.Pool

// getSlab returns a slab of at least n float32s whose first n are zero:
// the pool's, or a new one.
func getSlab(n int) *[]float32 {
	if p, ok := slabs.Get().(*[]float32); ok && len(*p) >= n {
		clear((*p)[:n])
		return p
	}
	s := make([]float32, n)
	return &s
}

// Release hands the memory Decode gave sc's rings back for the next
// Decode: call it when sc is done with (its state encoded), and do not
// use sc after. A scorer not from Decode has nothing to release.
func (sc *Scorer) Release() {
	if sc.slab == nil {
		return
	}
	slabs.Put(sc.slab)
	sc.slab, sc.items, sc.order = nil, nil, nil
}
