package summary

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/topk-dev/topk/internal/topn"
)

// Config fixes a summary's size. Zero values are not defaults: use
// DefaultConfig and change what you need, then Validate.
type Config struct {
	// N is the number of tracked entries, at least 1.
	N int
	// SketchWidth (a power of two) and SketchDepth size the optional
	// count-min sketch; SketchWidth 0 means no sketch.
	SketchWidth, SketchDepth int
}

// DefaultConfig tracks 4,096 items per summary and keeps no sketch: with the
// pipeline's default 16 partitions that is 65,536 items tracked per bucket
// over all partitions, far above K = 1,000. Measured on a flat Zipf (s = 0.8
// over 10M items, 1.2M events in 6 buckets), recall at 1,000 was 0.906 with
// N = 2,048 and 8 partitions, 0.996 with N = 4,096 and 16, and 0.999 with a
// 4 x 4,096 sketch added; but on Prism a sketch multiplies the bytes every
// sliding window copies (a 20k-event replay took 4 s without it, 13 s with
// 4 x 1,024 and 32 s with 4 x 4,096), so the sketch is opt-in.
func DefaultConfig() Config { return Config{N: 4096} }

// MaxN bounds N, here and in decoded summaries.
const MaxN = 1 << 20

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.N < 1 || c.N > MaxN {
		return fmt.Errorf("summary N %d outside [1, %d]", c.N, MaxN)
	}
	if c.SketchWidth == 0 {
		if c.SketchDepth != 0 {
			return fmt.Errorf("sketch depth %d without a width", c.SketchDepth)
		}
		return nil
	}
	return checkSketchDims(c.SketchWidth, c.SketchDepth)
}

func (c Config) mustValid() {
	if err := c.Validate(); err != nil {
		panic(err) // programmer error: configurations are validated at construction
	}
}

// Entry is one tracked item with bounds Lo <= true count <= Hi.
type Entry struct {
	Item   string
	Hash   uint64
	Lo, Hi uint64
}

// Summary is a bounded summary of item counts (see the package doc). Entries
// are kept in (Hash, Item) order, which makes merges linear joins.
type Summary struct {
	N       int
	Total   uint64 // sum of all counts summarized
	Theta   uint64 // bound on every untracked item's count
	Entries []Entry
	Sketch  *Sketch // nil: no sketch
	// Dropped, if not nil, bounds the count of every item left out of
	// Entries, item by item (see Drops). nil with Theta > 0: unknown,
	// every untracked item may have up to Theta. A summary owns its Drops
	// (never shared).
	Dropped *Drops
}

// known reports whether sm bounds its untracked items one by one: none has
// a count (Theta 0), or Dropped bounds them.
func (sm *Summary) known() bool { return sm.Theta == 0 || sm.Dropped != nil }

// mergeDropped is the Drops of a merge of a's and b's event sets, the sum
// of both, written into into's cells (nil: new ones; into may be a's own
// Drops): nil when either side does not bound its untracked items one by
// one, or neither left any out.
func mergeDropped(into *Drops, a, b *Summary) *Drops {
	if !a.known() || !b.known() || (a.Dropped == nil && b.Dropped == nil) {
		return nil
	}
	if a.Dropped == nil {
		return b.Dropped.CopyInto(into)
	}
	if into != a.Dropped {
		into = a.Dropped.CopyInto(into)
	}
	if b.Dropped != nil {
		into.Add(b.Dropped)
	}
	return into
}

// New returns an empty summary: the identity of both merges.
func New(cfg Config) *Summary {
	cfg.mustValid()
	sm := &Summary{N: cfg.N}
	if cfg.SketchWidth > 0 {
		sm.Sketch = NewSketch(cfg.SketchWidth, cfg.SketchDepth)
	}
	return sm
}

// Config returns the summary's configuration.
func (sm *Summary) Config() Config {
	c := Config{N: sm.N}
	if sm.Sketch != nil {
		c.SketchWidth, c.SketchDepth = sm.Sketch.Width, sm.Sketch.Depth
	}
	return c
}

// Bound is the upper bound of an untracked item's count: the least of
// Theta, its Dropped bound and its count-min estimate.
func (sm *Summary) Bound(h uint64) uint64 {
	b := sm.Theta
	if sm.Dropped != nil {
		b = min(b, sm.Dropped.Bound(h))
	}
	if sm.Sketch != nil {
		b = min(b, sm.Sketch.Estimate(h))
	}
	return b
}

// Find returns the tracked entry for item, or nil.
func (sm *Summary) Find(item string) *Entry {
	h := Hash(item)
	i, ok := slices.BinarySearchFunc(sm.Entries, Entry{Item: item, Hash: h}, cmpKey)
	if !ok {
		return nil
	}
	return &sm.Entries[i]
}

// Upper is an upper bound of item's count: its hi if tracked, else Bound.
func (sm *Summary) Upper(item string) uint64 {
	if e := sm.Find(item); e != nil {
		return e.Hi
	}
	return sm.Bound(Hash(item))
}

// SizeBytes is the memory the summary holds: entry headers, item bytes and
// sketch cells. It is bounded by N*(entrySize+max item length) + sketch.
func (sm *Summary) SizeBytes() int {
	n := cap(sm.Entries) * 40
	for i := range sm.Entries {
		n += len(sm.Entries[i].Item)
	}
	if sm.Sketch != nil {
		n += 8 * len(sm.Sketch.Cells)
	}
	if sm.Dropped != nil {
		n += 8*len(sm.Dropped.Cells) + 4*len(sm.Dropped.Sparse)
	}
	return n + 64
}

func cmpKey(a, b Entry) int {
	if c := cmp.Compare(a.Hash, b.Hash); c != 0 {
		return c
	}
	return strings.Compare(a.Item, b.Item)
}

func (sm *Summary) sortByKey() { slices.SortFunc(sm.Entries, cmpKey) }

// cmpRank orders by Hi descending, then Lo descending, then the item's hash,
// then item: the answer's rank order and every cut's, deterministic for
// equal counts. Equal counts go by hash, as Counter.Summary's cut
// (CompareCounted) does, not by name: a cut falls among thousands of
// entries of one small count, and name order favoured whatever sorts first
// (in a spam wave, "#junk..." over "#t..."; a spammer had only to pick
// names that sort first, where against the unkeyed hash it must search
// for names of small hashes), at the price of a string comparison per
// pair.
func cmpRank(a, b Entry) int {
	if a.Hi != b.Hi {
		if a.Hi > b.Hi {
			return -1
		}
		return 1
	}
	if a.Lo != b.Lo {
		if a.Lo > b.Lo {
			return -1
		}
		return 1
	}
	if a.Hash != b.Hash {
		if a.Hash < b.Hash {
			return -1
		}
		return 1
	}
	return strings.Compare(a.Item, b.Item)
}

// ErrMismatch is returned when merging summaries of different shapes.
var ErrMismatch = errors.New("summary shapes differ")

// MergeEvents returns the summary of the union of two disjoint event sets
// (two bundles, two time buckets of one partition). Neither input changes.
// The result has a's N; sketches must have the same shape. If only one side
// has a sketch, the result has none (unless the other side is empty).
func MergeEvents(a, b *Summary) (*Summary, error) { return MergeEventsN(a, b, a.N) }

// MergeEventsN is MergeEvents with a result of capacity n (N = n): at most
// n entries, Theta raised to the largest hi dropped, so that a merge of
// summaries of N entries can be kept smaller than they are.
func MergeEventsN(a, b *Summary, n int) (*Summary, error) {
	if a.empty() || b.empty() {
		out := a.WithN(n)
		if err := out.mergeEvents(b, nil); err != nil {
			return nil, err
		}
		return out, nil
	}
	// mergeEvents only reads the receiver's entries and replaces them with
	// a new slice: share a's instead of copying them first.
	out := &Summary{N: n, Total: a.Total, Theta: a.Theta, Entries: a.Entries}
	if a.Sketch != nil {
		out.Sketch = a.Sketch.Clone()
	}
	if a.Dropped != nil {
		out.Dropped = a.Dropped.Clone()
	}
	if err := out.mergeEvents(b, nil); err != nil {
		return nil, err
	}
	return out, nil
}

func (sm *Summary) empty() bool { return sm.Total == 0 && len(sm.Entries) == 0 && sm.Theta == 0 }

// mergeEvents merges b (a disjoint event set) into sm in place; buf, if not
// nil, is scratch space for the merged entries (its old contents are lost).
func (sm *Summary) mergeEvents(b *Summary, buf *[]Entry) error {
	if b.empty() {
		return nil
	}
	if sm.empty() {
		n := sm.N
		*sm = *b.WithN(n)
		return nil
	}
	var merged []Entry
	var pooled *[]Entry
	if buf != nil {
		merged = (*buf)[:0]
	} else {
		// Merge into pooled scratch and keep an exact-size copy of what
		// survives the cut: one allocation of at most N entries, where a
		// new slice of both sides' length was allocated (zeroed) and kept
		// at twice the size it needs.
		pooled = mergeScratch.Get().(*[]Entry)
		merged = (*pooled)[:0]
	}
	a := sm
	merged = appendMerged(merged, a, b)
	known := a.known() && b.known()
	a.Dropped = mergeDropped(a.Dropped, a, b) // sm owns its Drops
	// Sketches add only after every bound above used each side's own.
	switch {
	case a.Sketch != nil && b.Sketch != nil:
		if err := a.Sketch.Merge(b.Sketch); err != nil {
			return fmt.Errorf("merge events: %w", err)
		}
	default:
		a.Sketch = nil // one side's counts are missing from it
	}
	a.Total += b.Total
	a.Theta += b.Theta
	if buf != nil {
		// Swap buffers: the old entries become the next call's scratch.
		*buf, a.Entries = a.Entries, merged
		a.tighten()
		a.truncateKnown(a.N, known)
		return nil
	}
	a.Entries = merged
	a.tighten()
	var dropped uint64
	a.Entries, dropped = cutTop(make([]Entry, 0, min(len(merged), a.N)), merged, a.N, 0, dropTo(a, known))
	a.Theta = max(a.Theta, dropped)
	*pooled = merged[:0] // its item strings stay reachable until reused: bounded by the pool
	mergeScratch.Put(pooled)
	return nil
}

// appendMerged appends the entries of a and b (disjoint event sets), merged
// in key order, to dst: an item on one side only gets the other side's
// Bound added to its hi (its Theta, or its sketch's estimate if smaller).
// The key comparison is inline and Bound is called only for a side with a
// sketch: a call to cmpKey per pair was a third of the merge.
func appendMerged(dst []Entry, a, b *Summary) []Entry {
	ae, be := a.Entries, b.Entries
	dst = slices.Grow(dst, len(ae)+len(be))
	for len(ae) > 0 && len(be) > 0 {
		x, y := &ae[0], &be[0]
		c := 0
		switch {
		case x.Hash < y.Hash:
			c = -1
		case x.Hash > y.Hash:
			c = 1
		case x.Item != y.Item: // equal hashes are nearly always one item
			c = strings.Compare(x.Item, y.Item)
		}
		switch {
		case c < 0:
			e := *x
			e.Hi += b.boundOf(e.Hash)
			dst = append(dst, e)
			ae = ae[1:]
		case c > 0:
			e := *y
			e.Hi += a.boundOf(e.Hash)
			dst = append(dst, e)
			be = be[1:]
		default:
			e := *x
			e.Lo += y.Lo
			e.Hi += y.Hi
			dst = append(dst, e)
			ae, be = ae[1:], be[1:]
		}
	}
	for _, e := range ae {
		e.Hi += b.boundOf(e.Hash)
		dst = append(dst, e)
	}
	for _, e := range be {
		e.Hi += a.boundOf(e.Hash)
		dst = append(dst, e)
	}
	return dst
}

// boundOf is Bound, inlined where there is no sketch (Bound itself is
// over the inliner's budget).
func (sm *Summary) boundOf(h uint64) uint64 {
	if sm.Sketch == nil && sm.Dropped == nil {
		return sm.Theta
	}
	return sm.Bound(h)
}

// MergeEventsInto is MergeEventsN(a, b, n) written into dst, whose entries'
// memory it reuses: for a merge read once and dropped (a window's answer,
// cut again right after), where MergeEventsN allocates a result of up to n
// entries. dst must not be a or b nor share their entries; its old
// contents are lost.
func MergeEventsInto(dst, a, b *Summary, n int) error {
	if a.empty() || b.empty() || a.Sketch != nil || b.Sketch != nil {
		out, err := MergeEventsN(a, b, n)
		if err != nil {
			return err
		}
		*dst = *out
		return nil
	}
	es := appendMerged(dst.Entries[:0], a, b)
	known := a.known() && b.known()
	*dst = Summary{N: n, Total: a.Total + b.Total, Theta: a.Theta + b.Theta, Dropped: mergeDropped(dst.Dropped, a, b)}
	var dropped uint64
	dst.Entries, dropped = cutTop(es[:0], es, n, 0, dropTo(dst, known)) // in place, as truncate
	dst.Theta = max(dst.Theta, dropped)
	return nil
}

// MergeEventsTopInto is MergeEventsInto(scratch, a, b, n) followed by
// TopInto(out, limit, floor), in one cut: out gets the entries of the merge
// of a and b (disjoint event sets) that are among the first min(n, limit)
// by hi (n or limit <= 0: no such cut) and at or above floor, Theta raised
// to the largest hi left out, N n, and no Drops or sketch, as Top's result.
// Equal to the two steps (TestMergeEventsTopInto) without the work they
// throw away: the merge's Drops (its cells added and every cut entry
// recorded), and a second pass over the kept entries. A window's answer,
// read once and cut to the list's share, is this. out must not be a or b
// nor share their entries; its old contents are lost.
func MergeEventsTopInto(out, a, b *Summary, n, limit int, floor uint64) error {
	if a.empty() || b.empty() || a.Sketch != nil || b.Sketch != nil {
		// The sketch tightens hi values after the merge (tighten), and an
		// empty side is a copy: the two steps, as before.
		m, err := MergeEventsN(a, b, n)
		if err != nil {
			return err
		}
		m.TopInto(out, limit, floor)
		return nil
	}
	k := n
	if limit > 0 && (k <= 0 || limit < k) {
		k = limit
	}
	es := appendMerged(out.Entries[:0], a, b)
	*out = Summary{N: n, Total: a.Total + b.Total, Theta: a.Theta + b.Theta}
	var dropped uint64
	out.Entries, dropped = cutTop(es[:0], es, k, floor, nil) // in place
	out.Theta = max(out.Theta, dropped)
	return nil
}

// mergeScratch holds the buffers mergeEvents merges into without a Merger.
var mergeScratch = sync.Pool{New: func() any { return new([]Entry) }}

// Merger accumulates encoded summaries of disjoint event sets (the streaming
// merges' inner loop), decoding each into one reused scratch summary and
// merging in place, so a merge of sixty minute summaries allocates about one
// summary's worth, not sixty.
type Merger struct {
	acc     *Summary
	scratch Summary
	buf     []Entry
}

// AddEncoded decodes data and merges it in.
func (m *Merger) AddEncoded(data []byte) error {
	if err := m.scratch.UnmarshalBinary(data); err != nil {
		return err
	}
	return m.Add(&m.scratch)
}

// Add merges sm in (sm is not kept).
func (m *Merger) Add(sm *Summary) error {
	if m.acc == nil {
		m.acc = sm.WithN(sm.N)
		return nil
	}
	return m.acc.mergeEvents(sm, &m.buf)
}

// Result is the merged summary, nil if nothing was added. The Merger must not
// be used after.
func (m *Merger) Result() *Summary { return m.acc }

// tighten lowers every entry's hi to the sketch's estimate where that is
// smaller: the merged sketch counts every event of both sides, so its
// estimate is an upper bound too, and often a far better one than the sum of
// per-side floors for an item one side did not track.
func (sm *Summary) tighten() {
	if sm.Sketch == nil {
		return
	}
	for i := range sm.Entries {
		e := &sm.Entries[i]
		if e.Hi > e.Lo {
			e.Hi = max(e.Lo, min(e.Hi, sm.Sketch.Estimate(e.Hash)))
		}
	}
}

// MergeKeys returns the summary of two summaries of disjoint key sets over
// the same events' time range (two partitions of a list): the union of the
// entries, Theta the larger of the two, sketches added. The result keeps the
// limit largest entries by hi (limit <= 0: all), raising Theta to the largest
// hi dropped.
func MergeKeys(a, b *Summary, limit int) (*Summary, error) {
	out := &Summary{N: a.N + b.N, Total: a.Total + b.Total, Theta: max(a.Theta, b.Theta)}
	if limit > 0 {
		out.N = limit
	}
	switch {
	case a.Sketch != nil && b.Sketch != nil:
		out.Sketch = a.Sketch.Clone()
		if err := out.Sketch.Merge(b.Sketch); err != nil {
			return nil, fmt.Errorf("merge keys: %w", err)
		}
	case a.Sketch != nil && b.Total == 0:
		out.Sketch = a.Sketch.Clone()
	case b.Sketch != nil && a.Total == 0:
		out.Sketch = b.Sketch.Clone()
	}
	out.Entries = make([]Entry, 0, len(a.Entries)+len(b.Entries))
	out.Entries = append(out.Entries, a.Entries...)
	out.Entries = append(out.Entries, b.Entries...)
	out.sortByKey()
	// Disjoint key sets share no item; if a caller breaks that, keep the
	// larger bounds rather than two entries for one item.
	out.Entries = slices.CompactFunc(out.Entries, func(x, y Entry) bool { return cmpKey(x, y) == 0 })
	out.truncate(out.N)
	return out, nil
}

// UnionKeys is MergeKeys over many summaries at once (the partitions of one
// list): the union of their entries, Theta the largest, Total the sum,
// keeping the limit largest entries by hi (limit <= 0: all) and raising
// Theta to the largest hi dropped. Sketches are dropped. One selection over
// all entries instead of a sort per pairwise merge: P partitions of n
// entries cost O(P n), not O(P^2 n log n). The inputs are not modified.
func UnionKeys(parts []*Summary, limit int) *Summary {
	out := &Summary{}
	n := 0
	for _, p := range parts {
		n += len(p.Entries)
		out.N += p.N
		out.Total += p.Total
		out.Theta = max(out.Theta, p.Theta)
	}
	if limit > 0 {
		out.N = limit
	}
	out.Entries = make([]Entry, 0, n)
	for _, p := range parts {
		out.Entries = append(out.Entries, p.Entries...)
	}
	if limit > 0 && len(out.Entries) > limit {
		topn.Select(out.Entries, limit, cmpRank)
		for _, e := range out.Entries[limit:] {
			out.Theta = max(out.Theta, e.Hi)
		}
		out.Entries = out.Entries[:limit:limit]
	}
	out.sortByKey()
	// Disjoint key sets share no item; if a caller breaks that, keep one
	// entry per item (the first in rank order is not guaranteed: keep the
	// larger bounds as MergeKeys does).
	out.Entries = slices.CompactFunc(out.Entries, func(x, y Entry) bool { return cmpKey(x, y) == 0 })
	return out
}

// WithN returns a copy of sm with capacity n: its n largest entries by hi,
// Theta raised to the largest hi dropped, and N = n, so that every later
// merge into it keeps n entries too (MergeEvents keeps its first
// argument's N). The bounds stay valid: a dropped item is untracked with
// count <= its hi <= Theta. The entries are selected into an exact-size
// slice: a clone truncated in place would keep the whole clone's capacity
// alive.
func (sm *Summary) WithN(n int) *Summary {
	out := &Summary{N: n, Total: sm.Total, Theta: sm.Theta}
	if sm.Dropped != nil {
		out.Dropped = sm.Dropped.Clone()
	}
	if len(sm.Entries) <= n {
		out.Entries = slices.Clone(sm.Entries)
	} else {
		var dropped uint64
		out.Entries, dropped = cutTop(make([]Entry, 0, n), sm.Entries, n, 0, dropTo(out, sm.known()))
		out.Theta = max(out.Theta, dropped)
	}
	if sm.Sketch != nil {
		out.Sketch = sm.Sketch.Clone()
	}
	return out
}

// Cut makes sm a summary of capacity n in place: its n largest entries by
// hi (key order kept), Theta raised to the largest hi dropped, N = n. The
// bounds stay valid, as for WithN.
func (sm *Summary) Cut(n int) {
	sm.truncate(n)
	sm.N = n
}

// truncate keeps the n largest entries by hi; Theta becomes at least the
// largest hi dropped. Entries stay in key order.
func (sm *Summary) truncate(n int) { sm.truncateKnown(n, sm.known()) }

// truncateKnown is truncate, recording the entries it drops in sm's Drops
// when known (sm bounds its untracked items one by one; its Theta may
// already include a merge's, so known is the caller's).
func (sm *Summary) truncateKnown(n int, known bool) {
	if len(sm.Entries) <= n {
		return
	}
	// In place, keeping key order and the capacity: the Merger reuses it
	// as scratch for the next merge.
	var dropped uint64
	sm.Entries, dropped = cutTop(sm.Entries[:0], sm.Entries, n, 0, dropTo(sm, known))
	sm.Theta = max(sm.Theta, dropped)
}

// dropTo is where a cut of sm records the items it drops: sm.Dropped,
// created on the first drop, when known; nowhere (nil) otherwise, and then
// sm's Drops is removed, since it no longer bounds every untracked item.
func dropTo(sm *Summary, known bool) **Drops {
	if !known {
		sm.Dropped = nil
		return nil
	}
	return &sm.Dropped
}

// Answer is a ranked read of a summary.
type Answer struct {
	// Entries in rank order (Hi descending), at most the n asked for.
	Entries []Entry
	// MaxOvercount is the largest Hi-Lo among Entries.
	MaxOvercount uint64
	// CertifiedK is the largest k such that the first k entries are proven to
	// be the true top k: their smallest Lo is >= every bound outside them
	// (the Hi of every tracked item ranked below k, and Theta).
	CertifiedK int
}

// Answer ranks the tracked entries and returns the first n with their proof
// depth. It does not change sm.
func (sm *Summary) Answer(n int) Answer {
	ranked := slices.Clone(sm.Entries)
	slices.SortFunc(ranked, cmpRank)
	return answerRanked(ranked, sm.Theta, n)
}

// answerRanked is Answer over entries already in rank order, every tracked
// entry, with theta the bound of every untracked item.
func answerRanked(ranked []Entry, theta uint64, n int) Answer {
	if n > len(ranked) {
		n = len(ranked)
	}
	ans := Answer{Entries: ranked[:n:n]}
	minLo := ^uint64(0)
	for k := 1; k <= n; k++ {
		e := &ranked[k-1]
		ans.MaxOvercount = max(ans.MaxOvercount, e.Hi-e.Lo)
		minLo = min(minLo, e.Lo)
		outside := theta
		if k < len(ranked) {
			outside = max(outside, ranked[k].Hi)
		}
		if minLo >= outside {
			ans.CertifiedK = k
		}
	}
	return ans
}
