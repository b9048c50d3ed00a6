package summary

import (
	"encoding/binary"
	"fmt"
	"slices"
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
	dst = append(dst, setMagic0, setMagic1, setVersion)
	dst = binary.AppendUvarint(dst, uint64(len(keys)))
	var buf []byte
	for j, i := range idx {
		if j > 0 && keys[idx[j-1]] == keys[i] {
			return nil, fmt.Errorf("summary set: key %q twice", keys[i])
		}
		dst = binary.AppendUvarint(dst, uint64(len(keys[i])))
		dst = append(dst, keys[i]...)
		var err error
		if buf, err = sums[i].AppendBinary(buf[:0]); err != nil {
			return nil, err
		}
		dst = binary.AppendUvarint(dst, uint64(len(buf)))
		dst = append(dst, buf...)
	}
	return dst, nil
}

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
	out := &Summary{N: sm.N, Total: sm.Total, Theta: sm.Theta}
	out.Entries = make([]Entry, 0, len(sm.Entries))
	for _, e := range sm.Entries {
		if e.Hi < floor {
			out.Theta = max(out.Theta, e.Hi)
			continue
		}
		out.Entries = append(out.Entries, e)
	}
	if n > 0 {
		out.truncate(n)
	}
	return out
}
