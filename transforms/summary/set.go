package summary

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
)

const setMagic0, setMagic1, setVersion = 'T', 'L', 1

// MaxSetKeyBytes bounds a key in a decoded set.
const MaxSetKeyBytes = 4096

// AppendSet appends the encoding of a set of summaries, one per distinct key
// (the lists of one partition in one time range: the fast path ships one set
// per partition and bucket instead of one element per list), format version
// 1 (integers are uvarints):
//
//	'T' 'L' 0x01
//	number of members M
//	M times, keys in ascending byte order: len(key), key, len(summary), summary (MarshalBinary)
//
// keys must be distinct; they are sorted here together with sums.
func AppendSet(dst []byte, keys []string, sums []*Summary) ([]byte, error) {
	if len(keys) != len(sums) {
		return nil, fmt.Errorf("summary set: %d keys, %d summaries", len(keys), len(sums))
	}
	idx := make([]int, len(keys))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		switch {
		case keys[a] < keys[b]:
			return -1
		case keys[a] > keys[b]:
			return 1
		}
		return 0
	})
	// The members are encoded into a pooled scratch buffer first, so
	// that dst grows once, to the set's size, and gets one copy: dst
	// grown member by member (a SetWriter's body, then a copy of it) was
	// 3% of a profile at 200k events/s (BENCHMARKS.md, "Summary sets
	// written once"). The pool holds a set's encoding per P at most,
	// until the collector empties it.
	sp := setScratch.Get().(*[]byte)
	defer setScratch.Put(sp)
	enc := (*sp)[:0]
	ends := make([]int, len(idx))
	size := setHeaderMax
	for j, i := range idx {
		if j > 0 && keys[i] == keys[idx[j-1]] {
			return nil, fmt.Errorf("summary set: key %q twice", keys[i])
		}
		n := len(enc)
		var err error
		if enc, err = sums[i].AppendBinary(enc); err != nil {
			return nil, err
		}
		ends[j] = len(enc)
		size += 2*binary.MaxVarintLen64 + len(keys[i]) + len(enc) - n
	}
	*sp = enc
	dst = slices.Grow(dst, size)
	dst = binary.AppendUvarint(append(dst, setMagic0, setMagic1, setVersion), uint64(len(keys)))
	from := 0
	for j, i := range idx {
		dst = appendMember(dst, keys[i], enc[from:ends[j]])
		from = ends[j]
	}
	return dst, nil
}

// setScratch holds AppendSet's buffers for encoded members.
var setScratch = sync.Pool{New: func() any { return new([]byte) }}

// appendMember appends one member of a set: len(key), key, len(sm), sm.
func appendMember(dst []byte, key string, sm []byte) []byte {
	dst = slices.Grow(dst, 2*binary.MaxVarintLen64+len(key)+len(sm))
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	dst = binary.AppendUvarint(dst, uint64(len(sm)))
	return append(dst, sm...)
}

// SetWriter encodes a set (AppendSet's format) one member at a time, in
// ascending key order, so a caller that produces summaries in key order
// can encode each one as it comes and reuse it. The zero value is empty.
type SetWriter struct {
	n    int
	last string
	// body is setHeaderMax bytes kept for the header (whose member count
	// is known only at the end), then the members: Bytes writes the
	// header just before them instead of copying them after it.
	body []byte
	buf  []byte
}

// setHeaderMax is the longest set header: magic, version, a uvarint count.
const setHeaderMax = 3 + binary.MaxVarintLen64

// Add appends a member; key must be above every key added before.
func (w *SetWriter) Add(key string, sm *Summary) error {
	if err := w.check(key); err != nil {
		return err
	}
	var err error
	if w.buf, err = sm.AppendBinary(w.buf[:0]); err != nil {
		return err
	}
	w.add(key, w.buf)
	return nil
}

// AddEncoded is Add with the summary already encoded (MarshalBinary's
// bytes, which it does not check): a caller that holds a summary encoded
// saves encoding it again.
func (w *SetWriter) AddEncoded(key string, sm []byte) error {
	if err := w.check(key); err != nil {
		return err
	}
	w.add(key, sm)
	return nil
}

// check refuses a key not above every key added before.
func (w *SetWriter) check(key string) error {
	if w.n > 0 && key <= w.last {
		if key == w.last {
			return fmt.Errorf("summary set: key %q twice", key)
		}
		return fmt.Errorf("summary set: key %q after %q", key, w.last)
	}
	return nil
}

func (w *SetWriter) add(key string, sm []byte) {
	if w.body == nil {
		w.body = make([]byte, setHeaderMax, setHeaderMax+len(key)+len(sm)+2*binary.MaxVarintLen64)
	}
	w.body = appendMember(w.body, key, sm)
	w.n++
	w.last = key
}

// Len is the number of members added.
func (w *SetWriter) Len() int { return w.n }

// Bytes returns the encoded set, in w's memory: it stays valid until w is
// added to again.
func (w *SetWriter) Bytes() []byte {
	if w.body == nil {
		w.body = make([]byte, setHeaderMax)
	}
	var h [setHeaderMax]byte
	hdr := binary.AppendUvarint(append(h[:0], setMagic0, setMagic1, setVersion), uint64(w.n))
	off := setHeaderMax - len(hdr)
	copy(w.body[off:], hdr)
	return w.body[off:]
}

// AppendTo appends the encoded set to dst.
func (w *SetWriter) AppendTo(dst []byte) []byte { return append(dst, w.Bytes()...) }

// EachInSet calls f with every member of an encoded set in key order. The
// key and summary bytes point into data: copy them to keep them. Arbitrary
// bytes give an error wrapping ErrCorrupt, never a panic; the summaries
// themselves are decoded by the caller (UnmarshalBinary checks them).
func EachInSet(data []byte, f func(key string, sm []byte) error) error {
	if len(data) < 3 || data[0] != setMagic0 || data[1] != setMagic1 {
		return fmt.Errorf("%w: missing TL magic", ErrCorrupt)
	}
	if data[2] != setVersion {
		return fmt.Errorf("%w: unknown set version %d", ErrCorrupt, data[2])
	}
	d := decoder{data: data, off: 3}
	n := d.uvarint()
	if d.err != nil {
		return d.err
	}
	if n > uint64(len(data)) {
		return fmt.Errorf("%w: %d members in %d bytes", ErrCorrupt, n, len(data))
	}
	prev := ""
	for i := uint64(0); i < n; i++ {
		kl := d.uvarint()
		if d.err == nil && kl > MaxSetKeyBytes {
			return fmt.Errorf("%w: set key of %d bytes", ErrCorrupt, kl)
		}
		kb := d.bytes(int(kl))
		sl := d.uvarint()
		if d.err == nil && sl > uint64(len(data)) {
			return fmt.Errorf("%w: member of %d bytes", ErrCorrupt, sl)
		}
		sb := d.bytes(int(sl))
		if d.err != nil {
			return d.err
		}
		key := string(kb)
		if i > 0 && key <= prev {
			return fmt.Errorf("%w: set keys out of order at %q", ErrCorrupt, key)
		}
		prev = key
		if err := f(key, sb); err != nil {
			return err
		}
	}
	if d.off != len(data) {
		return fmt.Errorf("%w: %d trailing bytes after set", ErrCorrupt, len(data)-d.off)
	}
	return nil
}

// Top returns a copy of sm that keeps at most n entries (n <= 0: all) and
// only those whose hi is at least floor, raising Theta to the largest hi
// dropped: what a list can still use of one partition's window (the list
// keeps n entries over all partitions, and each item lives in one partition,
// so an entry outside its partition's first n by hi is outside the list's
// too). The bounds stay valid: every dropped item is now untracked with
// count <= its hi <= Theta. The sketch is dropped (lists do not use it).
func (sm *Summary) Top(n int, floor uint64) *Summary {
	out := new(Summary)
	sm.TopInto(out, n, floor)
	return out
}

// TopInto is Top into out, reusing out's entries (out must not be sm).
func (sm *Summary) TopInto(out *Summary, n int, floor uint64) {
	c := len(sm.Entries)
	if n > 0 {
		c = min(c, n)
	}
	es := out.Entries[:0]
	if cap(es) < c {
		es = make([]Entry, 0, c)
	}
	var dropped uint64
	*out = Summary{N: sm.N, Total: sm.Total, Theta: sm.Theta}
	out.Entries, dropped = cutTop(es, sm.Entries, n, floor, nil)
	out.Theta = max(out.Theta, dropped)
}
