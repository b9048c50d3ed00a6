package rules

import "unsafe"

// table is a bounded hash table from exact byte keys to values of type V:
// open addressing with linear probing over a slot array of twice the entry
// capacity, the keys' bytes in one arena. Keys are compared byte for byte,
// so two keys never share an entry (no false match, whatever the hashes).
//
// Its memory is fixed at construction: slots (8 bytes each), entries and
// an arena of maxBytes. When either the entries or the arena are full,
// get refuses to add a key (ok = false); the caller then treats the key as
// unknown, which can only make it count more, never less.
//
// hot path: get is called once per event, and allocates nothing.
type table[V any] struct {
	slots []uint64 // 0: empty; else tag (hash's high 32 bits) << 32 | entry index + 1
	mask  uint64
	ents  []tableEntry[V]
	keys  []byte
	max   int
}

type tableEntry[V any] struct {
	off, n uint32 // key bytes: keys[off : off+n]
	val    V
}

// newTable returns a table for up to maxEnts keys holding up to maxBytes
// key bytes in all.
func newTable[V any](maxEnts, maxBytes int) *table[V] {
	size := uint64(16)
	for size < uint64(maxEnts)*2 {
		size <<= 1
	}
	return &table[V]{
		slots: make([]uint64, size),
		mask:  size - 1,
		ents:  make([]tableEntry[V], 0, maxEnts),
		keys:  make([]byte, 0, maxBytes),
		max:   maxEnts,
	}
}

// get returns the value of key (hash h), adding a zero value when the key
// is new and there is room. found reports whether the key was there; ok is
// false when it was not and could not be added (v is then nil).
func (t *table[V]) get(key []byte, h uint64) (v *V, found, ok bool) {
	return getKey(t, key, h)
}

// getString is get for a string key, without converting it.
func (t *table[V]) getString(key string, h uint64) (v *V, found, ok bool) {
	return getKey(t, key, h)
}

// lookup returns the value of key (hash h), or nil; it never adds.
func (t *table[V]) lookup(key []byte, h uint64) *V {
	if _, e := probe(t, key, h); e != nil {
		return &e.val
	}
	return nil
}

// getKey is get and getString: one body for both key types (a method
// cannot have type parameters of its own).
func getKey[V any, K ~string | ~[]byte](t *table[V], key K, h uint64) (v *V, found, ok bool) {
	i, e := probe(t, key, h)
	if e != nil {
		return &e.val, true, true
	}
	if len(t.ents) == t.max || len(t.keys)+len(key) > cap(t.keys) {
		return nil, false, false
	}
	t.ents = append(t.ents, tableEntry[V]{off: uint32(len(t.keys)), n: uint32(len(key))})
	t.keys = append(t.keys, key...)
	t.slots[i] = h>>32<<32 | uint64(len(t.ents))
	return &t.ents[len(t.ents)-1].val, false, true
}

// probe finds key (hash h) by linear probing: its entry, or nil and the
// empty slot where it would go.
func probe[V any, K ~string | ~[]byte](t *table[V], key K, h uint64) (slot uint64, e *tableEntry[V]) {
	tag := h >> 32
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		s := t.slots[i]
		if s == 0 {
			return i, nil
		}
		if s>>32 != tag {
			continue
		}
		e := &t.ents[uint32(s)-1]
		if string(t.keys[e.off:e.off+e.n]) == string(key) {
			return i, e
		}
	}
}

// reset empties the table, keeping its memory.
func (t *table[V]) reset() {
	clear(t.slots)
	t.ents = t.ents[:0]
	t.keys = t.keys[:0]
}

// len is the number of keys held.
func (t *table[V]) len() int { return len(t.ents) }

// bytes is the table's fixed memory.
func (t *table[V]) bytes() int {
	var e tableEntry[V]
	return len(t.slots)*8 + cap(t.ents)*int(unsafe.Sizeof(e)) + cap(t.keys)
}
