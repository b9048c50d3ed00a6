// Package users counts distinct users per item: a small mergeable
// HyperLogLog sketch (Flajolet, Fusy, Gandouet, Meunier, "HyperLogLog: the
// analysis of a near-optimal cardinality estimation algorithm", AofA 2007;
// the dense registers are github.com/axiomhq/hyperloglog's) to attach to
// warm items per bucket, so that one account posting an item 500 times
// counts once. A sketch of few users is their exact set of (truncated)
// hashes instead, as HyperLogLog++'s sparse form is (Heule, Nunkesser and
// Hall, "HyperLogLog in Practice", EDBT 2013), kept as a plain sorted
// array: see Sketch. It has no Beam import.
//
// Guarantee: exact up to m/4 users (m = 2^precision registers); above,
// the relative standard error is 1.04/sqrt(m): 0.81% at precision 14,
// 1.63% at TallyPrecision. Sketches merge by union (sets) or register
// maximum, so a window's sketch is the merge of its buckets' (they cannot
// subtract: rebuild a window from its buckets, as counts do). Memory: 4
// bytes a user while a set, m bytes (16 KB at precision 14) once dense.
//
// Trusted users: AddWeighted keeps a user with probability equal to its
// trust weight, decided by the user's own hash (so the same user is always
// in or always out, in every bucket and on every worker), which makes the
// estimate an unbiased estimate of the sum of the distinct users' weights,
// and sketches built that way still merge.
package users

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/axiomhq/hyperloglog"
	"github.com/cespare/xxhash/v2"
)

// Precision is the sketches' HyperLogLog precision (2^14 registers).
const Precision = 14

// TallyPrecision is the precision of a Tally's sketches (2^12 registers:
// 1.63% standard error, at most 4 KB once dense): trending ranks by them,
// and there are many (an item's per bucket), so a quarter of the memory of
// Precision is worth the error.
const TallyPrecision = 12

// Sketch is a distinct-users sketch. The zero value is empty and ready to
// use, at Precision. It is not safe for concurrent use.
//
// A sketch of few users is their exact set of hashes (set), not a
// HyperLogLog: most items in a bucket have a handful of users, and the
// library's sparse form cost more to build, decode and unite than the
// counting it serves (BENCHMARKS.md, "Trending by users"). A set keeps
// the top 32 bits of each hash: the register index and, unless the
// 32-p bits under it are all zero (one hash in a million at precision
// 12), the rank a HyperLogLog takes from the hash. Once a set holds more
// than m/4 hashes (m = 2^precision registers; 1,024 at TallyPrecision),
// when its 4 bytes a hash would outgrow the dense registers' m bytes, it
// turns into a dense HyperLogLog of its precision, and stays one. Below
// that the estimate is exact (up to 32-bit collisions: about 1 in 10,000
// sets of 1,024 has one).
type Sketch struct {
	hll *hyperloglog.Sketch
	// set is the distinct hashes while hll is nil: sorted and without
	// repeats from index 0 to sorted, in arrival order after it (AddHash
	// appends; norm sorts once before a read).
	set    []uint32
	sorted int
	p      uint8 // precision; 0: Precision
}

// New returns an empty sketch.
func New() *Sketch { return &Sketch{} }

func (s *Sketch) precision() uint8 {
	if s.p == 0 {
		return Precision
	}
	return s.p
}

// setMax is the most hashes an exact set of precision p holds: m/4, where
// its 4 bytes a hash reach the dense registers' m bytes.
func setMax(p uint8) int { return 1 << p >> 2 }

// setHash is the part of a hash a set keeps, and unset the hash a
// HyperLogLog is given for it: the same register, and the same rank
// unless the kept bits under the register index are all zero.
func setHash(h uint64) uint32 { return uint32(h >> 32) }
func unset(x uint32) uint64   { return uint64(x)<<32 | 1<<31 }

// empty reports whether no user was added.
func (s *Sketch) empty() bool { return s.hll == nil && len(s.set) == 0 }

// Expect readies an empty sketch for at most about n distinct users:
// dense at once when n is more than an exact set holds (setMax), so a
// sketch that will be big never copies a set first.
func (s *Sketch) Expect(n int) {
	if !s.empty() {
		return
	}
	if n > setMax(s.precision()) {
		s.toDense()
		return
	}
	s.set = make([]uint32, 0, n)
}

// toDense turns the sketch into a dense HyperLogLog of its precision
// holding the set's hashes.
func (s *Sketch) toDense() {
	h, err := hyperloglog.NewSketch(s.precision(), false)
	if err != nil {
		panic(err) // precisions are checked where they are set
	}
	for _, x := range s.set {
		h.InsertHash(unset(x))
	}
	s.hll, s.set, s.sorted, s.p = h, nil, 0, s.precision()
}

// norm sorts and dedupes the set's unsorted tail into its sorted head, and
// turns the sketch dense if the set outgrew setMax.
func (s *Sketch) norm() {
	if s.hll != nil || s.sorted == len(s.set) {
		return
	}
	tail := s.set[s.sorted:]
	slices.Sort(tail)
	if s.sorted == 0 {
		s.set = slices.Compact(s.set)
	} else {
		s.set = unite(nil, s.set[:s.sorted], slices.Compact(tail))
	}
	s.sorted = len(s.set)
	if len(s.set) > setMax(s.precision()) {
		s.toDense()
	}
}

// unite appends the sorted union of the sorted, repeat-free a and b to dst
// (which must not overlap them).
func unite(dst, a, b []uint32) []uint32 {
	dst = slices.Grow(dst, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] < b[j]:
			dst = append(dst, a[i])
			i++
		case a[i] > b[j]:
			dst = append(dst, b[j])
			j++
		default:
			dst = append(dst, a[i])
			i++
			j++
		}
	}
	dst = append(dst, a[i:]...)
	return append(dst, b[j:]...)
}

// Hash is the hash a user is added by.
func Hash(user string) uint64 { return xxhash.Sum64String(user) }

// Add adds a user.
func (s *Sketch) Add(user string) { s.AddHash(Hash(user)) }

// AddHash adds a user by its Hash.
func (s *Sketch) AddHash(h uint64) {
	if s.hll != nil {
		s.hll.InsertHash(h)
		return
	}
	x := setHash(h)
	if n := len(s.set); n == s.sorted && (n == 0 || s.set[n-1] <= x) {
		if n > 0 && s.set[n-1] == x {
			return
		}
		s.set = append(s.set, x) // in order: stays sorted
		s.sorted++
		if s.sorted > setMax(s.precision()) {
			s.toDense()
		}
		return
	}
	s.set = append(s.set, x)
	if len(s.set)-s.sorted > setMax(s.precision()) {
		s.norm()
	}
}

// AddWeighted adds a user of trust weight w in [0,1] with probability w,
// decided by its hash alone (see the package doc): the estimate of a sketch
// built this way estimates the sum of its distinct users' weights.
func (s *Sketch) AddWeighted(h uint64, w float64) {
	if Keep(h, w) {
		s.AddHash(h)
	}
}

// Keep reports whether a user of hash h and weight w is sampled in by
// AddWeighted. The sample uses bits of a remix of h, independent of the
// bits the HyperLogLog takes from h itself.
func Keep(h uint64, w float64) bool {
	if w >= 1 {
		return true
	}
	if !(w > 0) {
		return false
	}
	// splitmix64's finaliser: an invertible mix, so the sample does not
	// correlate with h's register index or rank bits.
	x := h ^ 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) < w*(1<<53)
}

// Estimate is the number of distinct users added (0 for an empty sketch):
// exact while the sketch is a set.
func (s *Sketch) Estimate() uint64 {
	if s.hll != nil {
		return s.hll.Estimate()
	}
	s.norm()
	if s.hll != nil {
		return s.hll.Estimate()
	}
	return uint64(len(s.set))
}

// ErrPrecision is wrapped by Merge's error for two HyperLogLogs of
// different precisions.
var ErrPrecision = errors.New("users: sketches of different precisions")

// Merge adds o's users to s. An empty s takes o's precision; a set merges
// into a sketch of any precision, and a set s meeting a HyperLogLog o
// becomes one of o's precision (a set has the users' hashes); two
// HyperLogLogs merge only at the same precision (else an error wrapping
// ErrPrecision, and s is unchanged).
func (s *Sketch) Merge(o *Sketch) error {
	if o == nil || o.empty() {
		return nil
	}
	o.norm()
	if s.empty() {
		*s = *o.Clone()
		return nil
	}
	if o.hll == nil {
		if s.hll != nil {
			for _, x := range o.set {
				s.hll.InsertHash(unset(x))
			}
			return nil
		}
		// o's hashes join the unsorted tail, as AddHash's do: a sketch
		// that many tallies are united into (a hot item's users, once
		// per pre-aggregation flush) is sorted once when it is read,
		// not re-merged into a new array per tally.
		s.set = append(s.set, o.set...)
		if len(s.set)-s.sorted > setMax(s.precision()) {
			s.norm()
		}
		return nil
	}
	if s.hll == nil {
		s.p = o.p
		s.toDense()
	}
	if s.p != o.p {
		return fmt.Errorf("%w: %d and %d", ErrPrecision, s.p, o.p)
	}
	return s.hll.Merge(o.hll)
}

// Clone returns a copy of s.
func (s *Sketch) Clone() *Sketch {
	if s.hll != nil {
		return &Sketch{hll: s.hll.Clone(), p: s.p}
	}
	s.norm()
	if s.hll != nil {
		return s.Clone()
	}
	return &Sketch{set: slices.Clone(s.set), sorted: len(s.set), p: s.p}
}

// Binary format, version 2:
//
//	"TKU" 0x02
//	then nothing (an empty sketch), or
//	'S', precision (1 byte), uvarint n, then n hashes' top 32 bits (4
//	bytes each, little-endian, strictly increasing; n at most m/4): an
//	exact set; or
//	'H', then the HyperLogLog's own binary encoding (axiomhq/hyperloglog's
//	MarshalBinary, which carries its own version and precision), which
//	must fill the rest of the buffer.
//
// Version 1 (still read, never written) is "TKU" 0x01 then nothing or the
// HyperLogLog's encoding. The encoding is not canonical (the library's is
// not): compare sketches by their estimates, never by their bytes.
const (
	magic         = "TKU"
	sketchVersion = 2
	kindSet       = 'S'
	kindHLL       = 'H'
)

// ErrBadSketch is wrapped by every decoding error.
var ErrBadSketch = errors.New("users: bad sketch")

// AppendBinary appends s's binary form to dst.
func (s *Sketch) AppendBinary(dst []byte) ([]byte, error) {
	s.norm()
	dst = append(dst, magic...)
	dst = append(dst, sketchVersion)
	switch {
	case s.hll != nil:
		dst = append(dst, kindHLL)
		out, err := s.hll.AppendBinary(dst)
		if err != nil {
			return dst[:len(dst)-len(magic)-2], fmt.Errorf("users: encode: %w", err)
		}
		return out, nil
	case len(s.set) > 0:
		dst = append(dst, kindSet, s.precision())
		dst = binary.AppendUvarint(dst, uint64(len(s.set)))
		dst = slices.Grow(dst, 4*len(s.set))
		for _, x := range s.set {
			dst = binary.LittleEndian.AppendUint32(dst, x)
		}
	}
	return dst, nil
}

// sizeHint is about the length of s's binary form.
func (s *Sketch) sizeHint() int {
	if s.hll != nil {
		return 16 + 1<<s.p
	}
	return 16 + 4*len(s.set)
}

// MarshalBinary is AppendBinary to a new buffer.
func (s *Sketch) MarshalBinary() ([]byte, error) { return s.AppendBinary(nil) }

// UnmarshalBinary replaces s with the sketch data encodes. Any input either
// decodes or returns an error wrapping ErrBadSketch; it never panics, and s
// is unchanged on error. An empty sketch keeps s's precision.
func (s *Sketch) UnmarshalBinary(data []byte) error {
	if len(data) < len(magic)+1 || string(data[:len(magic)]) != magic {
		return fmt.Errorf("%w: no %q header", ErrBadSketch, magic)
	}
	v, rest := data[len(magic)], data[len(magic)+1:]
	switch {
	case v != 1 && v != sketchVersion:
		return fmt.Errorf("%w: version %d, want %d", ErrBadSketch, v, sketchVersion)
	case len(rest) == 0:
		*s = Sketch{p: s.p}
		return nil
	case v == sketchVersion && rest[0] == kindSet:
		return s.unmarshalSet(rest[1:])
	case v == sketchVersion && rest[0] == kindHLL:
		rest = rest[1:]
	case v == sketchVersion:
		return fmt.Errorf("%w: kind %q", ErrBadSketch, rest[0])
	}
	d, err := readHLL(rest)
	if err != nil {
		return err
	}
	*s = d
	return nil
}

func (s *Sketch) unmarshalSet(r []byte) error {
	if len(r) < 1 {
		return fmt.Errorf("%w: set: no precision", ErrBadSketch)
	}
	p := r[0]
	if p < 4 || p > 18 {
		return fmt.Errorf("%w: set: precision %d", ErrBadSketch, p)
	}
	n, k := binary.Uvarint(r[1:])
	if k <= 0 || n > uint64(setMax(p)) || uint64(len(r)-1-k) != 4*n {
		return fmt.Errorf("%w: set: bad length", ErrBadSketch)
	}
	d, err := readSet(r[1+k:], p)
	if err != nil {
		return err
	}
	*s = d
	return nil
}

// readSet decodes a set of precision p (checked by the caller) from b: its
// hashes, 4 bytes each, little-endian, strictly increasing, at least one
// and at most setMax(p). The Sketch and tally formats share it.
func readSet(b []byte, p uint8) (Sketch, error) {
	n := len(b) / 4
	if len(b)%4 != 0 || n == 0 || n > setMax(p) {
		return Sketch{}, fmt.Errorf("%w: set of %d bytes", ErrBadSketch, len(b))
	}
	set := make([]uint32, n)
	for i := range set {
		set[i] = binary.LittleEndian.Uint32(b[4*i:])
		if i > 0 && set[i] <= set[i-1] {
			return Sketch{}, fmt.Errorf("%w: set: hashes not increasing", ErrBadSketch)
		}
	}
	return Sketch{set: set, sorted: n, p: p}, nil
}

// readHLL decodes the library's HyperLogLog encoding, which must fill b.
// The Sketch and tally formats share it.
func readHLL(b []byte) (Sketch, error) {
	h := new(hyperloglog.Sketch)
	if err := h.UnmarshalBinary(b); err != nil {
		return Sketch{}, fmt.Errorf("%w: %w", ErrBadSketch, err)
	}
	return Sketch{hll: h, p: b[1]}, nil // the library checked its precision byte
}
