package summary

import (
	"cmp"
	"math/bits"
	"slices"
	"sync"
	"unsafe"

	"github.com/topk-dev/topk/internal/topn"
)

// Counter counts exactly: a hash map from item to count for one bundle of
// one (list, partition, bucket), with a hard cap on distinct items. It is
// hand-written rather than a Go map so that an event costs one probe with the
// hash the caller already computed, keys live in one byte arena (no string
// allocation per new key), and Reset keeps every buffer for the next bundle.
//
// Memory is bounded by the cap: when Full reports true the caller turns the
// counter into a Summary (which keeps N entries) and resets it, so a spam wave
// of distinct keys costs more flushes, never more memory.
type Counter struct {
	slots       []slot
	arena       []byte
	n           int
	maxDistinct int
	total       uint64
	scratch     []int32 // reused by Summary
}

// sortKeys is Summary's scratch for ordering the kept entries, pooled
// rather than kept in each Counter: a pre-aggregation holds a counter per
// (list, partition) of a bundle, thousands of them.
var sortKeys = sync.Pool{New: func() any { return new([]uint64) }}

type slot struct {
	hash  uint64
	count uint64
	off   uint32
	len   uint32 // 0 marks an empty slot; stored as len(item)+1
}

// DefaultMaxDistinct is the cap NewCounter uses for maxDistinct <= 0.
const DefaultMaxDistinct = 1 << 16

// NewCounter returns a counter that reports Full at maxDistinct keys.
func NewCounter(maxDistinct int) *Counter {
	if maxDistinct <= 0 {
		maxDistinct = DefaultMaxDistinct
	}
	c := &Counter{maxDistinct: maxDistinct}
	c.slots = make([]slot, 64)
	return c
}

// Add counts n occurrences of item, whose Hash is h. The arena copies the
// item's bytes the first time it is seen, so item may point into a buffer
// that is reused afterwards.
//
// hot path: once per event.
func (c *Counter) Add(item string, h uint64, n uint64) {
	mask := uint64(len(c.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &c.slots[i]
		if s.len == 0 {
			if len(c.arena)+len(item) > 1<<32-1 {
				panic("summary: counter arena over 4 GiB") // unreachable with any sane cap
			}
			s.hash, s.count = h, n
			s.off, s.len = uint32(len(c.arena)), uint32(len(item))+1
			c.arena = append(c.arena, item...)
			c.n++
			c.total += n
			if 2*c.n > len(c.slots) {
				c.grow()
			}
			return
		}
		if s.hash == h && int(s.len-1) == len(item) && string(c.arena[s.off:s.off+s.len-1]) == item {
			s.count += n
			c.total += n
			return
		}
	}
}

// Peek reads the memory Add(item, h, ...) will probe first (the slot at
// h, and the arena bytes of the item found there when its hash is h) and
// returns a value of no meaning, which the caller keeps so the loads are
// not optimised away. A caller with many independent Adds to make (the
// pre-aggregation: three per event, in counters far larger than the
// caches) peeks at all of them first, so that the CPU has their cache
// misses in flight together rather than one Add after another; the Adds
// then find their lines in cache. This is group prefetching (Chen,
// Ailamaki, Gibbons and Mowry, "Improving hash join performance through
// prefetching", ICDE 2004) without a prefetch instruction, which Go does
// not expose.
//
// hot path: once per event and scope.
func (c *Counter) Peek(h uint64) uint64 {
	s := &c.slots[h&uint64(len(c.slots)-1)]
	if s.hash == h && s.len > 1 {
		return uint64(c.arena[s.off])
	}
	return uint64(s.len)
}

func (c *Counter) grow() {
	old := c.slots
	c.slots = make([]slot, 2*len(old))
	mask := uint64(len(c.slots) - 1)
	for _, s := range old {
		if s.len == 0 {
			continue
		}
		i := s.hash & mask
		for c.slots[i].len != 0 {
			i = (i + 1) & mask
		}
		c.slots[i] = s
	}
}

// Slots is the size of the counter's table: the memory it holds (24
// bytes a slot) and what Summary scans and Reset clears, whatever Len is.
func (c *Counter) Slots() int { return len(c.slots) }

// Len is the number of distinct items counted.
func (c *Counter) Len() int { return c.n }

// Total is the sum of all counts.
func (c *Counter) Total() uint64 { return c.total }

// Full reports whether the counter reached its cap on distinct items.
func (c *Counter) Full() bool { return c.n >= c.maxDistinct }

// Reset empties the counter, keeping its buffers. A counter that grew far
// beyond its usual size is shrunk back so one spam bundle does not pin memory.
func (c *Counter) Reset() {
	if len(c.slots) > 4*c.maxDistinct {
		c.slots = make([]slot, 64)
	} else {
		clear(c.slots)
	}
	c.arena = c.arena[:0]
	c.n, c.total = 0, 0
}

// Each calls f for every item and its count, in no particular order. The
// item string is only valid during the call.
func (c *Counter) Each(f func(item string, h, count uint64)) {
	for i := range c.slots {
		s := &c.slots[i]
		if s.len != 0 {
			f(c.key(s), s.hash, s.count)
		}
	}
}

// Counted is one item of Top: its name (valid until the counter changes),
// hash and count.
type Counted struct {
	Item  string
	Hash  uint64
	Count uint64
}

// Top returns the n items with the largest counts (ties: the smaller
// hash), in no particular order. The items are valid until c changes.
func (c *Counter) Top(n int) []Counted { return c.TopInto(nil, n) }

// TopInto is Top in buf's memory: buf's contents are overwritten (it is
// scratch for all of c's items, grown if short) and the result shares
// its array. A caller that takes the top of many counters reuses one
// buffer instead of allocating one the size of each counter (the users
// tallies' pre-aggregation, per partition and flush).
func (c *Counter) TopInto(buf []Counted, n int) []Counted {
	all := slices.Grow(buf[:0], c.n)
	c.Each(func(item string, h, count uint64) { all = append(all, Counted{item, h, count}) })
	return SelectTop(all, n)
}

// CompareCounted orders Counted items biggest first: by count, larger
// first, then by the smaller hash.
func CompareCounted(a, b Counted) int {
	if a.Count != b.Count {
		return cmp.Compare(b.Count, a.Count)
	}
	return cmp.Compare(a.Hash, b.Hash)
}

// SelectTop moves the n biggest of all (CompareCounted) to its front, in
// no particular order, and returns them: all[:min(n, len(all))]. The
// rest of all keeps the others.
func SelectTop(all []Counted, n int) []Counted {
	topn.Select(all, n, CompareCounted)
	return all[:max(0, min(n, len(all)))]
}

// key returns a slot's item without copying; valid until the arena changes.
func (c *Counter) key(s *slot) string {
	if s.len == 1 {
		return ""
	}
	return unsafe.String(&c.arena[s.off], int(s.len-1))
}

// Summary builds the summary of everything counted: the N largest counts are
// tracked exactly (lo = hi = count), Theta is the largest count not kept, and
// the sketch, if cfg has one, gets every count. It does not reset c.
func (c *Counter) Summary(cfg Config) *Summary {
	cfg.mustValid()
	sm := &Summary{N: cfg.N, Total: c.total}
	if cfg.SketchWidth > 0 {
		sm.Sketch = NewSketch(cfg.SketchWidth, cfg.SketchDepth)
	}
	idx := c.scratch[:0]
	for i := range c.slots {
		s := &c.slots[i]
		if s.len == 0 {
			continue
		}
		idx = append(idx, int32(i))
		if sm.Sketch != nil {
			sm.Sketch.Add(s.hash, s.count)
		}
	}
	if len(idx) > cfg.N {
		// Keep the N largest counts (ties broken by hash, so the choice is
		// deterministic); Theta is the largest count left out.
		byCount := func(a, b int32) int {
			sa, sb := &c.slots[a], &c.slots[b]
			if sa.count != sb.count {
				if sa.count > sb.count {
					return -1
				}
				return 1
			}
			return cmp.Compare(sa.hash, sb.hash)
		}
		topn.Select(idx, cfg.N, byCount)
		sm.Dropped = NewDrops()
		sm.Dropped.reserve(len(idx) - cfg.N)
		for _, i := range idx[cfg.N:] {
			sm.Theta = max(sm.Theta, c.slots[i].count)
			sm.Dropped.Record(c.slots[i].hash, c.slots[i].count)
		}
		sm.Dropped.settle()
		idx = idx[:cfg.N]
	}
	// Key order (hash, then item) without sorting 40-byte entries through
	// a comparison function (half of this function's time in the
	// streaming job's profile): each kept slot's hash with its low bits
	// replaced by the slot's index, sorted as plain integers, orders the
	// slots by their hashes' high bits; only entries that share those bits
	// (almost never) can still be out of key order, which the check after
	// mends.
	b := uint(bits.Len(uint(len(c.slots))))
	low := uint64(1)<<b - 1
	p := sortKeys.Get().(*[]uint64)
	keys := slices.Grow((*p)[:0], len(idx))
	for _, i := range idx {
		keys = append(keys, c.slots[i].hash&^low|uint64(i))
	}
	slices.Sort(keys)
	sm.Entries = make([]Entry, len(keys))
	for j, k := range keys {
		s := &c.slots[k&low]
		sm.Entries[j] = Entry{Item: string(c.arena[s.off : s.off+s.len-1]), Hash: s.hash, Lo: s.count, Hi: s.count}
	}
	c.scratch = idx[:0]
	*p = keys[:0]
	sortKeys.Put(p)
	if !slices.IsSortedFunc(sm.Entries, cmpKey) {
		sm.sortByKey()
	}
	return sm
}
