package users

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/topk-dev/topk/internal/topn"
)

// Tally is one list's distinct-users record for one stretch of event time
// (a bucket, or the merge of a window's buckets): a sketch of every distinct
// (user, item) pair counted in the list (so Pairs estimates the sum over
// all items of their distinct users, the denominator of a users share), and
// for the list's biggest items by count a sketch of their own users.
//
// Tallies merge by union (register maximum): merging the same tally twice,
// as a retried bundle does, changes nothing. Trim bounds a tally to its
// biggest items by count; Pairs always covers every item.
type Tally struct {
	Pairs Sketch
	Items map[string]*TallyEntry
}

// TallyEntry is one item's events and distinct users in a Tally.
type TallyEntry struct {
	// Count is the item's counted events (a sum over merged tallies): the
	// order Trim keeps items by.
	Count uint64
	Users Sketch
}

// NewTally returns an empty tally; its sketches are of TallyPrecision.
func NewTally() *Tally {
	return &Tally{Pairs: Sketch{p: TallyPrecision}, Items: map[string]*TallyEntry{}}
}

// PairHash is the hash of a (user, item) pair from the user's Hash and the
// item's Hash (xxhash of its name, as summary.Hash). It reads only the
// top 32 bits of the user's hash, the part a sketch's exact set keeps
// (setHash), so a pair hashes the same from a user's hash and from an
// entry of an item's set: a tally need not ship the pairs its items' sets
// already hold (version 3 of the binary format).
func PairHash(user, item uint64) uint64 {
	// splitmix64's finaliser over a combination: pairs of different users
	// or items land on independent-looking hashes.
	x := (user &^ (1<<32 - 1)) ^ (item * 0x9e3779b97f4a7c15)
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// Entry returns item's entry, creating it.
func (t *Tally) Entry(item string) *TallyEntry {
	if t.Items == nil {
		t.Items = map[string]*TallyEntry{}
	}
	e := t.Items[item]
	if e == nil {
		e = &TallyEntry{Users: Sketch{p: TallyPrecision}}
		t.Items[strings.Clone(item)] = e
	}
	return e
}

// Merge adds o into t: counts add, sketches unite.
func (t *Tally) Merge(o *Tally) error {
	if err := t.Pairs.Merge(&o.Pairs); err != nil {
		return err
	}
	for it, oe := range o.Items {
		e := t.Entry(it)
		e.Count += oe.Count
		if err := e.Users.Merge(&oe.Users); err != nil {
			return err
		}
	}
	return nil
}

// Absorb is Merge for an o that is not used again (a tally just decoded
// to be united into t): an item or sketch t does not have yet is moved
// from o, not copied, so uniting many tallies allocates only what is new.
func (t *Tally) Absorb(o *Tally) error {
	if t.Pairs.empty() && !o.Pairs.empty() {
		t.Pairs = o.Pairs
	} else if err := t.Pairs.Merge(&o.Pairs); err != nil {
		return err
	}
	if len(t.Items) < len(o.Items) {
		// Unite the smaller into the larger (counts add and sketches
		// unite either way): no growing a small map into a big one.
		t.Items, o.Items = o.Items, t.Items
	}
	if t.Items == nil {
		t.Items = map[string]*TallyEntry{}
	}
	for it, oe := range o.Items {
		e := t.Items[it]
		if e == nil {
			t.Items[it] = oe
			continue
		}
		e.Count += oe.Count
		if err := e.Users.Merge(&oe.Users); err != nil {
			return err
		}
	}
	*o = Tally{}
	return nil
}

// Trim keeps the max items with the highest counts (ties: the smaller
// name).
func (t *Tally) Trim(max int) {
	if len(t.Items) <= max {
		return
	}
	// Rank (count, name) pairs, not names looked up in the map on every
	// comparison: a scorer trims a pane of thousands of items per score.
	type ranked struct {
		name  string
		count uint64
	}
	rs := make([]ranked, 0, len(t.Items))
	for it, e := range t.Items {
		rs = append(rs, ranked{it, e.Count})
	}
	// Select the max first rather than sort them all: a scorer trims
	// every pane it unites, each time the list is scored.
	topn.Select(rs, max, func(a, b ranked) int {
		if a.count != b.count {
			if a.count > b.count {
				return -1
			}
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	for _, r := range rs[max:] {
		delete(t.Items, r.name)
	}
}

// Tally binary format, versions 2 and 3 (compact: a bucket's tally has
// hundreds of items with a user or two each, so per-item framing was most
// of its bytes):
//
//	"TKT" 0x02 or 0x03 (the version), precision (1 byte: the precision of the sets below)
//	Pairs (a sketch body)
//	uvarint n, then n times: uvarint len, item; uvarint count; users (a
//	sketch body)
//
// A sketch body is a uvarint h, then: nothing when h is 0 (empty); h>>1
// set hashes (4 bytes each, little-endian, strictly increasing, at most
// m/4) when h is even; when h is odd, h>>1 bytes of the HyperLogLog's own
// encoding. Version 1 (still read, never written) framed each sketch as a
// 4-byte big-endian length and the Sketch binary format. Items are
// written in no particular order (sorting them by name cost a fifth of
// encoding a pre-aggregation's tallies): like the sketches', the encoding
// is not canonical.
//
// In version 2, Pairs is the sketch of every pair. In version 3 (what
// TallyWriter writes) the pairs of an item whose users are a set (a body
// with hashes) are implied by that set: the tally's pairs are Pairs united
// with PairHash(unset(x), Hash(item)) for each such item and each of its
// set's hashes x, which a reader adds. So a writer leaves those pairs out
// of Pairs (most of a small list's pairs: 17% of the tallies' bytes at
// 100k events/s with every scope, BENCHMARKS.md), and a Pairs
// that holds them anyway is still right (a union). Tally.AppendBinary
// writes version 2: a tally united from pieces already holds every pair,
// and reading it back need not derive them again. (Tallies of a
// pre-aggregation from before PairHash read 32 bits, united with newer
// ones during a deploy, count the pairs they share twice in Pairs: an
// over-count of the denominator for the 5 minutes they are scored in.)
const (
	tallyMagic   = "TKT"
	tallyVersion = 2 // Tally.AppendBinary's: Pairs is every pair
	impliedPairs = 3 // TallyWriter's: Pairs and the pairs the items' sets imply
)

// AppendBinary appends t's binary form to dst.
func (t *Tally) AppendBinary(dst []byte) ([]byte, error) {
	size := 8 + t.Pairs.sizeHint()
	for it, e := range t.Items {
		size += len(it) + 8 + e.Users.sizeHint()
	}
	dst = slices.Grow(dst, size)
	dst = append(dst, tallyMagic...)
	dst = append(dst, tallyVersion, TallyPrecision)
	var err error
	if dst, err = appendBody(dst, &t.Pairs); err != nil {
		return nil, err
	}
	dst = binary.AppendUvarint(dst, uint64(len(t.Items)))
	for it, e := range t.Items {
		dst = binary.AppendUvarint(dst, uint64(len(it)))
		dst = append(dst, it...)
		dst = binary.AppendUvarint(dst, e.Count)
		if dst, err = appendBody(dst, &e.Users); err != nil {
			return nil, err
		}
	}
	return dst, nil
}

// appendBody appends s as a sketch body (see the format above). A set of
// another precision than TallyPrecision is written dense.
func appendBody(dst []byte, s *Sketch) ([]byte, error) {
	s.norm()
	if s.hll == nil && len(s.set) > 0 && s.precision() != TallyPrecision {
		s.toDense()
	}
	switch {
	case s.hll != nil:
		at := len(dst)
		dst = append(dst, 0, 0, 0, 0, 0) // room for the length's uvarint
		out, err := s.hll.AppendBinary(dst)
		if err != nil {
			return nil, fmt.Errorf("users: encode: %w", err)
		}
		n := len(out) - at - 5
		var h [binary.MaxVarintLen64]byte
		k := binary.PutUvarint(h[:], uint64(n)<<1|1)
		copy(out[at+k:], out[at+5:]) // close the gap the length left
		copy(out[at:], h[:k])
		return out[:at+k+n], nil
	case len(s.set) == 0:
		return append(dst, 0), nil
	}
	dst = binary.AppendUvarint(dst, uint64(len(s.set))<<1)
	for _, x := range s.set {
		dst = binary.LittleEndian.AppendUint32(dst, x)
	}
	return dst, nil
}

// UnmarshalTally decodes a tally (either version). Any input either
// decodes or returns an error wrapping ErrBadSketch; it never panics.
func UnmarshalTally(data []byte) (*Tally, error) {
	if len(data) < len(tallyMagic)+1 || string(data[:len(tallyMagic)]) != tallyMagic {
		return nil, fmt.Errorf("%w: no %q header", ErrBadSketch, tallyMagic)
	}
	v := data[len(tallyMagic)]
	switch v {
	case 1:
		return unmarshalTallyV1(data[len(tallyMagic)+1:])
	case tallyVersion, impliedPairs:
	default:
		return nil, fmt.Errorf("%w: tally version %d, want %d or %d", ErrBadSketch, v, tallyVersion, impliedPairs)
	}
	t := NewTally()
	var implied []sketchBody // version 3: the items' sets, for their pairs
	var names [][]byte
	err := walkTally(data, true, func(item []byte, count uint64, b sketchBody) error {
		s, err := b.sketch()
		if err != nil {
			return err
		}
		if item == nil {
			t.Pairs = s
			return nil
		}
		if _, dup := t.Items[string(item)]; dup {
			return fmt.Errorf("%w: tally: item %q twice", ErrBadSketch, item)
		}
		t.Items[string(item)] = &TallyEntry{Count: count, Users: s}
		if v == impliedPairs && len(b.set) > 0 {
			implied, names = append(implied, b), append(names, item)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i, b := range implied {
		b.addPairsTo(&t.Pairs, names[i])
	}
	return t, nil
}

// addPairsTo adds to pairs the (user, item) pairs of item whose users are
// the body's set (version 3's implied pairs).
func (b sketchBody) addPairsTo(pairs *Sketch, item []byte) {
	b.addPairsToHash(pairs, xxhash.Sum64(item))
}

// addPairsToHash is addPairsTo for the item whose name hashes to ih.
func (b sketchBody) addPairsToHash(pairs *Sketch, ih uint64) {
	for i := 0; i < len(b.set); i += 4 {
		pairs.AddHash(PairHash(unset(binary.LittleEndian.Uint32(b.set[i:])), ih))
	}
}

// sketch decodes the body into a sketch of its own (empty: of the
// tally's precision).
func (b sketchBody) sketch() (Sketch, error) {
	switch {
	case b.hll != nil:
		return readHLL(b.hll)
	case len(b.set) > 0:
		return readSet(b.set, b.p)
	}
	return Sketch{p: b.p}, nil
}

// unmarshalTallyV1 decodes a version 1 tally's body (after its header):
// each sketch framed by a 4-byte big-endian length around the Sketch
// binary format.
func unmarshalTallyV1(r []byte) (*Tally, error) {
	sketch := func(s *Sketch, what string) error {
		if len(r) < 4 || uint64(binary.BigEndian.Uint32(r)) > uint64(len(r)-4) {
			return fmt.Errorf("%w: tally: bad %s length", ErrBadSketch, what)
		}
		n := int(binary.BigEndian.Uint32(r))
		b := r[4 : 4+n]
		r = r[4+n:]
		return s.UnmarshalBinary(b)
	}
	t := NewTally()
	if err := sketch(&t.Pairs, "pairs"); err != nil {
		return nil, err
	}
	n, k := binary.Uvarint(r)
	if k <= 0 || n > uint64(len(r)) {
		return nil, fmt.Errorf("%w: tally: bad item count", ErrBadSketch)
	}
	r = r[k:]
	t.Items = make(map[string]*TallyEntry, n)
	for range n {
		l, k := binary.Uvarint(r)
		if k <= 0 || l > uint64(len(r)-k) {
			return nil, fmt.Errorf("%w: tally: bad item length", ErrBadSketch)
		}
		name := string(r[k : k+int(l)])
		r = r[k+int(l):]
		c, k := binary.Uvarint(r)
		if k <= 0 {
			return nil, fmt.Errorf("%w: tally: bad count", ErrBadSketch)
		}
		r = r[k:]
		if _, dup := t.Items[name]; dup {
			return nil, fmt.Errorf("%w: tally: item %q twice", ErrBadSketch, name)
		}
		e := &TallyEntry{Count: c, Users: Sketch{p: TallyPrecision}}
		if err := sketch(&e.Users, "users"); err != nil {
			return nil, err
		}
		t.Items[name] = e
	}
	if len(r) != 0 {
		return nil, fmt.Errorf("%w: tally: %d trailing bytes", ErrBadSketch, len(r))
	}
	return t, nil
}

// MarshalBinary is AppendBinary to a new buffer.
func (t *Tally) MarshalBinary() ([]byte, error) { return t.AppendBinary(nil) }

// TallyWriter writes a tally's binary form straight from its producer's
// items, without a map of entries: the pre-aggregation's partitions hold
// disjoint items, so it adds each item once, and building a Tally only
// to encode it cost a map insert and a cloned name per item (about a
// third of its tally time at 100k events/s, BENCHMARKS.md). The caller
// adds each item at most once (the format has no repeats: UnmarshalTally
// rejects them). It writes version 3: a reader adds the pairs of the
// items whose users are a set, so Pairs need only hold the others (the
// pairs of items not added, or added with a dense sketch: see IsSet).
// The zero value is not ready: use NewTallyWriter.
type TallyWriter struct {
	// Pairs is the sketch of the (user, item) pairs (Tally.Pairs) that
	// the items' sets do not imply; more is harmless.
	Pairs Sketch
	n     int
	items []byte // the items' encoding (without the number of items before them)
}

// NewTallyWriter returns an empty writer.
func NewTallyWriter() *TallyWriter {
	return &TallyWriter{Pairs: Sketch{p: TallyPrecision}}
}

// Reset empties w for the next tally, keeping its memory.
func (w *TallyWriter) Reset() {
	w.Pairs.ResetTally()
	w.n, w.items = 0, w.items[:0]
}

// Len is the number of items added.
func (w *TallyWriter) Len() int { return w.n }

// Add appends item with its count and users (encoded now: users may be
// reused after). Items must be distinct.
func (w *TallyWriter) Add(item string, count uint64, u *Sketch) error {
	w.items = binary.AppendUvarint(w.items, uint64(len(item)))
	w.items = append(w.items, item...)
	w.items = binary.AppendUvarint(w.items, count)
	var err error
	if w.items, err = appendBody(w.items, u); err != nil {
		return err
	}
	w.n++
	return nil
}

// AppendBinary appends the tally's binary form (version 3: what
// Tally.AppendBinary writes for the same items, but for the pairs the
// items' sets imply) to dst.
func (w *TallyWriter) AppendBinary(dst []byte) ([]byte, error) {
	dst = slices.Grow(dst, 16+w.Pairs.sizeHint()+len(w.items))
	dst = append(dst, tallyMagic...)
	dst = append(dst, impliedPairs, TallyPrecision)
	var err error
	if dst, err = appendBody(dst, &w.Pairs); err != nil {
		return nil, err
	}
	dst = binary.AppendUvarint(dst, uint64(w.n))
	return append(dst, w.items...), nil
}

// ResetTally empties s for reuse as a tally's sketch (TallyPrecision),
// keeping its set's memory.
func (s *Sketch) ResetTally() {
	*s = Sketch{set: s.set[:0], p: TallyPrecision}
}

// Empty reports whether no user was added.
func (s *Sketch) Empty() bool { return s.empty() }

// IsSet reports whether s is an exact set of hashes, not a HyperLogLog,
// normalising it first (a set's unsorted tail may make it dense): whether
// a tally written now would hold its users as a set, whose pairs a
// version 3 reader derives (TallyWriter).
func (s *Sketch) IsSet() bool {
	s.norm()
	return s.hll == nil
}

// AbsorbBinary unites the tally encoded in data into t, as Absorb of the
// decoded tally would, without building it: an item t already has takes
// the piece's count and users straight from the bytes (its users join
// the set's unsorted tail), so a scorer uniting one piece per
// pre-aggregation flush allocates only for items new to t (uniting the
// pieces, each decoded into a map of its own, was half of the scorer's
// timer CPU in BENCHMARKS.md's profiles); a version 3 tally's implied
// pairs go into t.Pairs as its items are united. The whole input's framing is
// checked, and its HyperLogLogs decoded, before anything is united (a
// set's order is not: its hashes join the unsorted tail, sorted and
// deduplicated when the sketch is next normalised, so an out-of-order set
// unites as the same set in order would): on a malformed
// input, or one with a HyperLogLog of another precision than
// TallyPrecision, t is unchanged and the error wraps ErrBadSketch. (A t
// holding a dense sketch of another precision, which only a version 1
// tally can give it, may still fail half-way with ErrPrecision.) An item
// repeated in data (which no encoder here writes) is united twice.
func (t *Tally) AbsorbBinary(data []byte) error {
	if !currentTally(data) {
		// Not the current version (or not a tally): the general path.
		o, err := UnmarshalTally(data)
		if err != nil {
			return err
		}
		return t.Absorb(o)
	}
	hlls, err := checkTally(data, nil)
	if err != nil {
		return err
	}
	return t.absorb(data, hlls, nil, nil)
}

// currentTally reports whether data starts as a tally of version 2 or 3.
func currentTally(data []byte) bool {
	return len(data) >= len(tallyMagic)+2 && string(data[:len(tallyMagic)]) == tallyMagic &&
		(data[len(tallyMagic)] == tallyVersion || data[len(tallyMagic)] == impliedPairs)
}

// checkTally checks a version 2 or 3 tally's framing and decodes its
// HyperLogLogs (in order: Pairs' first, if it has one), which must be of
// TallyPrecision. With hashes non-nil, it appends the hash of each item's
// name (xxhash, as summary.Hash) and its count to *hashes as it goes (on
// an error, some may have been appended).
func checkTally(data []byte, hashes *[]hashCount) ([]Sketch, error) {
	var hlls []Sketch // decoded in the check, united in order after
	err := walkTally(data, false, func(item []byte, count uint64, b sketchBody) error {
		if item != nil && hashes != nil {
			*hashes = append(*hashes, hashCount{xxhash.Sum64(item), count})
		}
		if b.hll == nil {
			return nil
		}
		d, err := readHLL(b.hll)
		if err == nil && d.p != TallyPrecision {
			err = fmt.Errorf("%w: tally: a HyperLogLog of precision %d", ErrBadSketch, d.p)
		}
		hlls = append(hlls, d)
		return err
	})
	return hlls, err
}

// hashCount is an item's name hash and its count in one tally.
type hashCount struct{ hash, count uint64 }

// absorb unites the checked tally data (hlls: its HyperLogLogs, from
// checkTally) into t. With keep non-nil, only the items whose keep is
// true are united (keep and hashes, each item's name hash from
// checkTally, in the items' order); the others add only the pairs a
// version 3 tally implies for them (Pairs must still count every pair).
func (t *Tally) absorb(data []byte, hlls []Sketch, hashes []hashCount, keep []bool) error {
	if t.Items == nil {
		t.Items = map[string]*TallyEntry{}
	}
	// Entries new to t come from slabs (16, doubling to 256), not one
	// allocation each: most of a busy list's pieces are items new to the
	// pane.
	var slab []TallyEntry
	next := 16
	implied := data[len(tallyMagic)] == impliedPairs
	return walkTally(data, false, func(item []byte, count uint64, b sketchBody) error {
		s := &t.Pairs
		if item != nil {
			var ih uint64 // the name's hash, when hashes has it
			if keep != nil {
				k := keep[0]
				ih, hashes, keep = hashes[0].hash, hashes[1:], keep[1:]
				if !k {
					if b.hll != nil {
						hlls = hlls[1:] // its pairs are in Pairs already
					} else if implied && len(b.set) > 0 {
						b.addPairsToHash(&t.Pairs, ih)
					}
					return nil
				}
			}
			e := t.Items[string(item)] // no allocation for the lookup
			if e == nil {
				if len(slab) == 0 {
					slab, next = make([]TallyEntry, next), min(2*next, 256)
				}
				e, slab = &slab[0], slab[1:]
				e.Users.p = TallyPrecision
				t.Items[string(item)] = e
			}
			e.Count += count
			s = &e.Users
			if implied && len(b.set) > 0 {
				if keep == nil {
					ih = xxhash.Sum64(item)
				}
				b.addPairsToHash(&t.Pairs, ih)
			}
		}
		if b.hll != nil {
			d := &hlls[0]
			hlls = hlls[1:]
			return s.Merge(d)
		}
		b.mergeSetInto(s)
		return nil
	})
}

// UniteTop unites the tallies encoded in pieces into t and trims t to its
// max biggest items: what AbsorbBinary of each piece in turn and then
// Trim(max) do, item for item, with less work when the union holds many
// more than max items (a busy list's pieces over a minute: tens of
// thousands of items, most with a user or two, for the 2,000 a scorer
// keeps). A first pass adds up each item's count over t and the pieces
// by the hash of its name; then only the items whose total reaches the
// max-th largest are given an entry and their users united (Trim breaks
// the ties among them as it would have), and the others add only the
// pairs they imply. errs[i] is piece i's error as AbsorbBinary returns
// it (nil if it was united); a piece with an error is not united and its
// counts take no part in the cut. (Two names with one 64-bit hash add
// their counts in the first pass: both may then be united, and Trim
// still keeps the right ones.)
func (t *Tally) UniteTop(pieces [][]byte, max int) (errs []error) {
	errs, _ = t.UniteTopMin(pieces, max, 0)
	return errs
}

// Left is what UniteTopMin left out for its minimum: how many items, the
// sum of their counts and the largest (each item's count over t and the
// pieces, which is at least its distinct users: the same user in two
// pieces counts twice).
type Left struct {
	Items    int
	Sum, Max uint64
}

// UniteTopMin is UniteTop that also leaves out the items whose count over
// t and the pieces is under min (they add only the pairs they imply, as
// the items the cut to max leaves out), and says what it left out for
// min. An item counted under min has fewer distinct users than min: the
// trend scorer treats such items as absent (trend.Config.MinTrack), and
// most of a small list's items over 5 minutes are counted once, so they
// are never given an entry. min <= 1 leaves out nothing for it.
func (t *Tally) UniteTopMin(pieces [][]byte, max int, min uint64) (errs []error, left Left) {
	errs = make([]error, len(pieces))
	if max <= 0 && min <= 1 {
		for i, p := range pieces {
			errs[i] = t.AbsorbBinary(p)
		}
		t.Trim(max)
		return errs, left
	}
	type checked struct {
		data     []byte
		hlls     []Sketch
		from, to int // its items' hashes in hashes
		ok       bool
	}
	cs := make([]checked, len(pieces))
	sc := cutScratch.Get().(*cutTable)
	defer cutScratch.Put(sc)
	hashes := sc.hashes[:0]
	defer func() { sc.hashes = hashes[:0] }()
	n := len(t.Items)
	for i, data := range pieces {
		if !currentTally(data) {
			// An older version: decoded and re-encoded (version 2).
			o, err := UnmarshalTally(data)
			if err == nil {
				data, err = o.AppendBinary(nil)
			}
			if err != nil {
				errs[i] = err
				continue
			}
		}
		from := len(hashes)
		hlls, err := checkTally(data, &hashes)
		if err != nil {
			errs[i], hashes = err, hashes[:from]
			continue
		}
		cs[i] = checked{data, hlls, from, len(hashes), true}
		n += len(hashes) - from
	}
	var keep []bool // by position in hashes
	if (n > max && max > 0 || min > 1) && len(hashes) > 0 {
		keep, left = sc.cut(hashes, t.Items, max, min)
	}
	for i, c := range cs {
		if !c.ok {
			continue
		}
		var k []bool
		if keep != nil {
			k = keep[c.from:c.to]
		}
		if err := t.absorb(c.data, c.hlls, hashes[c.from:c.to], k); err != nil {
			errs[i] = err
		}
	}
	t.Trim(max)
	return errs, left
}

// cut returns, for each of the pieces' items in hashes, whether its total
// count (over hashes and the items of have) reaches the top-th largest
// total (top <= 0: any) and min, and what min left out. Totals are added
// in an open-addressing table of hashes (as preagg's topIndex): a Go map
// of tens of thousands of hashes was half of UniteTop's time, and sorting
// them a quarter. The result is sc's memory, valid until the next cut.
func (sc *cutTable) cut(hashes []hashCount, have map[string]*TallyEntry, top int, min uint64) ([]bool, Left) {
	bits := uint8(4)
	for 1<<bits < 2*(len(hashes)+len(have)) {
		bits++
	}
	n := 1 << bits
	if cap(sc.keys) < n {
		sc.keys, sc.totals = make([]uint64, n), make([]uint64, n)
	}
	keys, totals := sc.keys[:n], sc.totals[:n]
	clear(keys)
	clear(totals)
	shift, mask := 64-bits, uint64(n-1)
	distinct := 0
	add := func(h, c uint64) int32 {
		h |= 1 // 0 marks an empty slot (two hashes that differ in bit 0 only add up: harmless, see UniteTop)
		j := (h * 0x9e3779b97f4a7c15) >> shift
		for keys[j] != 0 && keys[j] != h {
			j = (j + 1) & mask
		}
		if keys[j] == 0 {
			keys[j] = h
			distinct++
		}
		totals[j] += c
		return int32(j)
	}
	slots := slices.Grow(sc.slots[:0], len(hashes))
	for _, h := range hashes {
		slots = append(slots, add(h.hash, h.count))
	}
	sc.slots = slots
	// With min: mark says which slots are items of have (which stay in
	// t whatever their count, and so take every piece's part) and which
	// Left counted already.
	const inHave, counted = 1, 2
	mark := sc.mark[:0]
	if min > 1 {
		mark = slices.Grow(mark, n)[:n]
		clear(mark)
	}
	sc.mark = mark
	for it, e := range have {
		j := add(xxhash.Sum64String(it), e.Count)
		if min > 1 {
			mark[j] = inHave
		}
	}
	keep := slices.Grow(sc.keep[:0], len(hashes))[:len(hashes)]
	sc.keep = keep
	var left Left
	if min > 1 {
		for _, j := range slots {
			if c := totals[j]; c < min && mark[j] == 0 {
				mark[j] = counted
				left.Items++
				left.Sum += c
				left.Max = max(left.Max, c)
			}
		}
	}
	// floor is the top-th largest total when more items than top are
	// left to rank, else 0 (every item's total reaches it).
	var floor uint64
	if top > 0 && distinct-left.Items > top {
		vals := slices.Grow(sc.vals[:0], distinct)
		for j, k := range keys {
			if k != 0 {
				vals = append(vals, totals[j])
			}
		}
		sc.vals = vals
		topn.Select(vals, top, func(a, b uint64) int { return cmp.Compare(b, a) })
		floor = slices.Min(vals[:top])
	}
	for i, j := range slots {
		keep[i] = totals[j] >= floor && (totals[j] >= min || min > 1 && mark[j] == inHave)
	}
	return keep, left
}

// cutTable is UniteTop's scratch, pooled: a scorer unites a pane per
// list and timer.
type cutTable struct {
	hashes             []hashCount
	keys, totals, vals []uint64
	slots              []int32
	keep               []bool
	mark               []uint8
}

var cutScratch = sync.Pool{New: func() any { return new(cutTable) }}

// sketchBody is one sketch body of a version 2 or 3 tally: a set's hashes
// (4 bytes each) or a HyperLogLog's encoding, or neither (empty).
type sketchBody struct {
	p        uint8
	set, hll []byte
}

// mergeSetInto unites the body's set (if any) into s.
func (b sketchBody) mergeSetInto(s *Sketch) {
	switch {
	case len(b.set) == 0:
		return
	case s.hll != nil:
		for i := 0; i < len(b.set); i += 4 {
			s.hll.InsertHash(unset(binary.LittleEndian.Uint32(b.set[i:])))
		}
		return
	}
	if s.empty() {
		s.p = b.p
	}
	s.set = slices.Grow(s.set, len(b.set)/4)
	for i := 0; i < len(b.set); i += 4 {
		s.set = append(s.set, binary.LittleEndian.Uint32(b.set[i:]))
	}
	if len(s.set)-s.sorted > setMax(s.precision()) {
		s.norm()
	}
}

// walkTally walks a version 2 or 3 tally, calling visit for Pairs (item nil;
// an item's name is never nil, even when empty) and then for every item
// in order, and checks its framing: every length, no trailing bytes, and
// with check each set's size and order too.
func walkTally(data []byte, check bool, visit func(item []byte, count uint64, body sketchBody) error) error {
	r := data[len(tallyMagic)+1:]
	if len(r) == 0 || r[0] < 4 || r[0] > 18 {
		return fmt.Errorf("%w: tally: bad precision", ErrBadSketch)
	}
	p := r[0]
	r = r[1:]
	body := func(what string) (sketchBody, error) {
		h, k := binary.Uvarint(r)
		if k <= 0 {
			return sketchBody{}, fmt.Errorf("%w: tally: bad %s", ErrBadSketch, what)
		}
		r = r[k:]
		b := sketchBody{p: p}
		switch n := h >> 1; {
		case h == 0:
		case h&1 == 1:
			if n > uint64(len(r)) {
				return sketchBody{}, fmt.Errorf("%w: tally: bad %s", ErrBadSketch, what)
			}
			b.hll, r = r[:n], r[n:]
		default:
			if n > uint64(setMax(p)) || 4*n > uint64(len(r)) {
				return sketchBody{}, fmt.Errorf("%w: tally: bad %s length", ErrBadSketch, what)
			}
			b.set, r = r[:4*n], r[4*n:]
			if check {
				for i := 4; i < len(b.set); i += 4 {
					if binary.LittleEndian.Uint32(b.set[i:]) <= binary.LittleEndian.Uint32(b.set[i-4:]) {
						return sketchBody{}, fmt.Errorf("%w: tally: %s: hashes not increasing", ErrBadSketch, what)
					}
				}
			}
		}
		return b, nil
	}
	pairs, err := body("pairs")
	if err != nil {
		return err
	}
	if err := visit(nil, 0, pairs); err != nil {
		return err
	}
	n, k := binary.Uvarint(r)
	if k <= 0 || n > uint64(len(r)) {
		return fmt.Errorf("%w: tally: bad item count", ErrBadSketch)
	}
	r = r[k:]
	for range n {
		l, k := binary.Uvarint(r)
		if k <= 0 || l > uint64(len(r)-k) {
			return fmt.Errorf("%w: tally: bad item length", ErrBadSketch)
		}
		name := r[k : k+int(l)]
		r = r[k+int(l):]
		c, k := binary.Uvarint(r)
		if k <= 0 {
			return fmt.Errorf("%w: tally: bad count", ErrBadSketch)
		}
		r = r[k:]
		u, err := body("users")
		if err != nil {
			return err
		}
		if err := visit(name, c, u); err != nil {
			return err
		}
	}
	if len(r) != 0 {
		return fmt.Errorf("%w: tally: %d trailing bytes", ErrBadSketch, len(r))
	}
	return nil
}
