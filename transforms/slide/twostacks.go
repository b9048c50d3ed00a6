package slide

import (
	"bytes"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/topk-dev/topk/transforms/summary"
)

// pane is one time range's summary: a bucket, or a minute merged from its
// buckets. The State and its windows' TwoStacks share each pane (a
// pointer). Panes are immutable once built: a late pane replaces its pane
// with a new merged summary, never changes one in place, so the two-stacks
// aggregates that point at the old one stay consistent until rebuilt.
//
// A pane read rarely is held packed: its summary encoded, about a third of
// its decoded size, and decoded each time it is read (get); packing
// changes how a pane is held, not what it holds, so it is done in place.
// The State packs its panes once only its long windows read them
// (State.packIdle: the minutes at once, each read again when the 1h
// window's two-stacks flips; the buckets a minute old, read again by the
// 5m window's flip and block), and a TwoStacks with Pack its front's block
// aggregates (each read when its block reaches the top): most of a busy
// list's window memory, idle between those reads (BENCHMARKS.md, "Idle
// panes and aggregates packed").
//
// The panes of the levels above the buckets (the minutes) and the 1h
// window's packed aggregates over them are also compressed (zstd's
// fastest level, zipped): a minute is held for an hour and read about
// once in it, and with its Drops it compresses to about half
// (BENCHMARKS.md, "Minutes compressed").
type pane struct {
	start int64            // Unix ms
	sm    *summary.Summary // nil when only packed holds it
	// packed is sm encoded (summary.AppendBinary), exactly sized, and
	// compressed when zipped; never written after it is made, as the
	// summaries decoded from an unzipped one share its bytes
	// (summary.UnmarshalAliased; a zipped one's get own their items).
	packed []byte
	zipped bool
}

// get returns the pane's summary: sm, or packed decoded into a new summary
// whose items share packed's bytes (so it holds little more than its
// entries), or, when zipped, a copy of the items in one buffer of their
// own: the bytes it was decompressed into are garbage at once, where
// items over them kept every decompressed pane merged into a window's
// aggregates alive, counts and Drops too (BENCHMARKS.md, "Decompressed
// minutes let go").
func (p *pane) get() (*summary.Summary, error) {
	if p.sm != nil {
		return p.sm, nil
	}
	b, err := p.encoded()
	if err != nil {
		return nil, err
	}
	sm, err := summary.UnmarshalAliased(b)
	if err == nil && p.zipped {
		sm.OwnItems()
	}
	return sm, err
}

// encoded is a packed pane's summary encoding (summary.AppendBinary),
// decompressed when zipped.
func (p *pane) encoded() ([]byte, error) {
	if !p.zipped {
		return p.packed, nil
	}
	return zipDecoder().DecodeAll(p.packed, nil)
}

// pack encodes sm into an exactly sized buffer, compressed when zip is set.
func pack(sm *summary.Summary, zip bool) ([]byte, error) {
	bp := packScratch.Get().(*[]byte)
	defer packScratch.Put(bp)
	b, err := sm.AppendBinary((*bp)[:0])
	if err != nil {
		return nil, err
	}
	*bp = b
	if zip {
		zp := zipScratch.Get().(*[]byte)
		defer zipScratch.Put(zp)
		*zp = zipEncoder().EncodeAll(b, (*zp)[:0])
		return bytes.Clone(*zp), nil
	}
	return bytes.Clone(b), nil
}

// The compressor of zipped panes: zstd (klauspost/compress, a well-kept
// pure-Go implementation) at its fastest level, without checksums (the
// bytes never leave the process), windows no larger than a pane needs.
// Both are safe for concurrent use (EncodeAll, DecodeAll), and made when
// first needed: a process that zips nothing pays nothing for them.
var (
	zipEncoder = sync.OnceValue(func() *zstd.Encoder {
		e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderCRC(false), zstd.WithWindowSize(1<<20), zstd.WithLowerEncoderMem(true))
		if err != nil {
			panic(err) // constant options
		}
		return e
	})
	zipDecoder = sync.OnceValue(func() *zstd.Decoder {
		d, err := zstd.NewReader(nil, zstd.IgnoreChecksum(true))
		if err != nil {
			panic(err) // constant options
		}
		return d
	})
	zipScratch = sync.Pool{New: func() any { return new([]byte) }}
)

// packScratch holds pack's encoding buffers (one summary's size each).
var packScratch = sync.Pool{New: func() any { return new([]byte) }}

// TwoStacks is a sliding-window aggregator over panes in start order
// (Tangwongsan, Hirzel and Schneider, "Sliding-window aggregation
// algorithms", Encyclopedia of Big Data Technologies, 2019; the "two-stacks"
// queue of Hirzel et al., "Sliding-window aggregation algorithms: tutorial",
// DEBS 2017). Panes enter at the back and leave at the front. The back is a
// list of panes with one running aggregate; the front is a stack whose every
// node holds the aggregate of itself and every pane behind it in the front.
// A query merges two summaries (the front top's aggregate and the back's);
// a push merges one; an eviction pops one, and when the front is empty it
// first flips the back onto it, one merge per pane. Each pane is merged into
// a front aggregate once in its life (twice for most panes, below), so a
// slide costs three to four merges amortized, whatever the window's length
// (sixty minute summaries for 1h).
//
// The front keeps one aggregate in every block of k panes, k about the
// square root of the panes flipped when there are more than smallFront
// (the bottom's, the (k+1)-th's, ..., and the top's): the others hold
// their pane's own summary, which the State keeps anyway. When such a
// pane reaches the top, the aggregates of its block are made again, each
// the same merge of its pane and the aggregate below it that the flip
// made, and kept until their panes leave (packed, but for the top's,
// when Zip is set). The front's aggregates are most
// of a busy list's window memory (up to one per pane, each as large as a
// window's cut: BENCHMARKS.md, "Smaller minutes and aggregates"); this
// keeps about 2 sqrt(n) of n (16 of a 1h window's 60) for up to one merge
// more per pane that leaves, and the answers are the same summaries as
// before (BENCHMARKS.md, "A sparse two-stacks front").
//
// Chosen over FlatFAT (O(log n) merges per slide, a tree over a circular
// array) and DABA (worst-case O(1), twice the bookkeeping): the windows here
// hold 6 to 60 panes, a flip of 60 merges once an hour per list is cheap,
// and two-stacks needs only one operation, the merge of disjoint event sets
// (summary.MergeEvents), which is associative in its guarantee: every merge
// order yields valid bounds. The aggregate need not be invertible: panes
// that leave the window are never subtracted.
type TwoStacks struct {
	// N, when > 0, is the entries every aggregate keeps (panes are held as
	// they are): a window's aggregates merge many panes, and the window's
	// answer per partition is cut to Config.PartLimit, so they need not keep
	// as many entries as a pane. 0: the older side's N (MergeEvents).
	N int
	// Pack holds the aggregates the front keeps for a later block packed
	// (see pane) when it keeps one a block (more than smallFront panes):
	// all but the top's, which the next query reads.
	Pack bool
	// Zip compresses what Pack packs (see pane): set for the windows over
	// the minutes, whose blocks wait long between reads.
	Zip     bool
	front   []node  // front[len-1] is the oldest
	back    []*pane // oldest first
	backAgg *summary.Summary
	last    int64 // start of the newest pane pushed
	merges  int   // merges done, for tests and benchmarks
}

// node is a pane of the front: agg, its summary is the aggregate of the
// pane and every pane below it in the front; otherwise the pane's own.
type node struct {
	*pane // an aggregate's own; otherwise the State's
	agg   bool
}

// Len is the number of panes in the window.
func (t *TwoStacks) Len() int { return len(t.front) + len(t.back) }

// Push adds a pane newer than every pane held. sm is not modified.
func (t *TwoStacks) Push(start int64, sm *summary.Summary) error {
	return t.push(&pane{start: start, sm: sm})
}

// push is Push of a pane that may be packed (or be packed later by its
// owner): its summary is merged into the back's aggregate now, decoded if
// it must be, and the pane is read again at the flip.
func (t *TwoStacks) push(p *pane) error {
	if t.Len() > 0 && p.start <= t.last {
		panic("slide: pane pushed out of order") // callers push in start order
	}
	sm, err := p.get()
	if err != nil {
		return err
	}
	t.last = p.start
	t.back = append(t.back, p)
	if t.backAgg == nil {
		t.backAgg = sm
		return nil
	}
	agg, err := t.merge(t.backAgg, sm)
	if err != nil {
		return err
	}
	t.merges++
	t.backAgg = agg
	return nil
}

// Evict removes every pane that starts before start.
func (t *TwoStacks) Evict(start int64) error {
	for {
		if len(t.front) == 0 {
			if len(t.back) == 0 || t.back[0].start >= start {
				return nil
			}
			if err := t.flip(); err != nil {
				return err
			}
		}
		top := t.front[len(t.front)-1]
		if top.start >= start {
			return nil
		}
		t.front[len(t.front)-1] = node{}
		t.front = t.front[:len(t.front)-1]
	}
}

// top is the front's top aggregate (nil when the front is empty). If the
// front kept the top pane's own summary, the aggregates from the nearest
// one kept below it up to the top are made again and kept.
func (t *TwoStacks) top() (*summary.Summary, error) {
	n := len(t.front)
	if n == 0 {
		return nil, nil
	}
	if !t.front[n-1].agg {
		j := n - 2 // the bottom node is always an aggregate
		for !t.front[j].agg {
			j--
		}
		base := t.front[j].pane
		if err := t.unpack(j); err != nil {
			return nil, err
		}
		for m := j + 1; m < n; m++ {
			nd := &t.front[m]
			sm, err := nd.get()
			if err != nil {
				return nil, err
			}
			agg, err := t.merge(sm, t.front[m-1].sm)
			if err != nil {
				return nil, err
			}
			t.merges++
			nd.pane, nd.agg = &pane{start: nd.start, sm: agg}, true
		}
		if t.Pack && t.Zip {
			// Only the top is read next. In a window over the minutes
			// (Zip), which slides once a minute, the block's other
			// aggregates wait minutes for their turn: they wait
			// packed, the base as it was (BENCHMARKS.md, "A rebuilt
			// block packed"). A 5m window's wait tens of seconds: kept
			// decoded, as packing them cost it a tenth more CPU for a
			// fifth of the memory saved.
			if base.sm == nil {
				t.front[j].pane = base
			}
			for m := j + 1; m < n-1; m++ {
				nd := &t.front[m]
				b, err := pack(nd.sm, t.Zip)
				if err != nil {
					return nil, err
				}
				nd.pane = &pane{start: nd.start, packed: b, zipped: t.Zip}
			}
		}
	}
	if err := t.unpack(n - 1); err != nil {
		return nil, err
	}
	return t.front[n-1].sm, nil
}

// unpack decodes front[i]'s aggregate if it is packed, and keeps it
// decoded: it is read again when it reaches the top.
func (t *TwoStacks) unpack(i int) error {
	nd := &t.front[i]
	if nd.sm != nil {
		return nil
	}
	sm, err := nd.get()
	if err != nil {
		return err
	}
	nd.pane = &pane{start: nd.start, sm: sm}
	return nil
}

// blockOf is the front's block for n panes flipped: about sqrt(n), at
// least 2; 1 (every aggregate kept) for up to smallFront panes.
func blockOf(n int) int {
	if n <= smallFront {
		return 1
	}
	k := 2
	for k*k < n {
		k++
	}
	return k
}

// smallFront is the most panes a front keeps every aggregate of: a 1m
// window's 6 buckets, or a longer window's first minute. There the
// aggregates saved are few and the merges made again are of the largest
// panes (a dense replay's buckets: +6% to +11% CPU with blocks of 2).
const smallFront = 8

// flip moves the back onto the empty front, newest first, so the front's
// top is the oldest pane and holds the aggregate of all of them.
//
// The aggregates the front does not keep (all but one a block) are only
// steps of the chain: they are merged into two scratch summaries in turn
// (summary.MergeEventsInto, the same summary as MergeEventsN) instead of
// new ones, which were garbage at once (a 1h window's flip made 60 merges
// and kept about 8, most with a 64 KB drops sketch: BENCHMARKS.md,
// "Chains of merges in scratch").
func (t *TwoStacks) flip() error {
	var agg *summary.Summary
	k := blockOf(len(t.back))
	var scratch *[2]summary.Summary // from scratchPairs, when a step needs it
	next := 0
	defer func() {
		if scratch != nil {
			scratchPairs.Put(scratch)
		}
	}()
	for i := len(t.back) - 1; i >= 0; i-- {
		p := t.back[i]
		sm, err := p.get()
		if err != nil {
			return err
		}
		keep := len(t.front)%k == 0 || i == 0 // one aggregate a block, and the top's (queried next)
		switch {
		case agg == nil:
			agg = sm
		case keep:
			if agg, err = t.merge(sm, agg); err != nil {
				return err
			}
			t.merges++
		default:
			if scratch == nil {
				scratch = scratchPairs.Get().(*[2]summary.Summary)
			}
			// agg is the pane below or the other scratch, never this one.
			dst := &scratch[next]
			next ^= 1
			if err := summary.MergeEventsInto(dst, sm, agg, t.mergeN(sm, agg)); err != nil {
				return err
			}
			agg = dst
			t.merges++
		}
		switch {
		case keep && t.Pack && k > 1 && i > 0:
			// Read when its block reaches the top (top): packed until then.
			// The bottom's aggregate is its pane's own summary: its
			// packing, when it has one, serves.
			b, zipped := p.packed, p.zipped
			if agg != sm || b == nil {
				if b, err = pack(agg, t.Zip); err != nil {
					return err
				}
				zipped = t.Zip
			}
			t.front = append(t.front, node{pane: &pane{start: p.start, packed: b, zipped: zipped}, agg: true})
		case keep:
			t.front = append(t.front, node{pane: &pane{start: p.start, sm: agg}, agg: true})
		default:
			t.front = append(t.front, node{pane: p})
		}
		t.back[i] = nil
	}
	t.back = t.back[:0]
	t.backAgg = nil
	return nil
}

// scratchPairs holds pairs of scratch summaries for a chain of merges
// whose steps are not kept (flip's, State.mergeRange's): each step reads
// the other, and the pair is held for the chain's length only.
var scratchPairs = sync.Pool{New: func() any { return new([2]summary.Summary) }}

// Query is the merge of every pane held; nil when empty. The result may be
// shared with the aggregator: do not modify it.
func (t *TwoStacks) Query() (*summary.Summary, error) { return t.QueryInto(new(summary.Summary)) }

// QueryInto is Query with the merge, when one is needed, written into
// scratch (summary.MergeEventsInto): the result is scratch, or a summary
// shared with the aggregator; either way read it before the next call.
func (t *TwoStacks) QueryInto(scratch *summary.Summary) (*summary.Summary, error) {
	f, err := t.top()
	if err != nil {
		return nil, err
	}
	switch {
	case f == nil:
		return t.backAgg, nil
	case t.backAgg == nil:
		return f, nil
	}
	t.merges++
	if err := summary.MergeEventsInto(scratch, f, t.backAgg, f.N); err != nil {
		return nil, err
	}
	return scratch, nil
}

// QueryTopInto writes Query's result cut to its first limit entries by hi
// at or above floor (Summary.TopInto) into out, and returns out. When a
// merge is needed it is summary.MergeEventsTopInto, which skips the
// merge's Drops: a window's answer is read once, cut to the list's share.
func (t *TwoStacks) QueryTopInto(out *summary.Summary, limit int, floor uint64) (*summary.Summary, error) {
	f, err := t.top()
	if err != nil {
		return nil, err
	}
	switch {
	case f == nil && t.backAgg == nil:
		return nil, nil
	case f == nil:
		t.backAgg.TopInto(out, limit, floor)
	case t.backAgg == nil:
		f.TopInto(out, limit, floor)
	default:
		t.merges++
		if err := summary.MergeEventsTopInto(out, f, t.backAgg, f.N, limit, floor); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// merge merges two disjoint event sets into an aggregate of t's N, never
// wider than the wider side.
func (t *TwoStacks) merge(a, b *summary.Summary) (*summary.Summary, error) {
	return summary.MergeEventsN(a, b, t.mergeN(a, b))
}

// mergeN is the N of merge's result: t's N when it is set and smaller
// than the wider side's, else a's (MergeEvents).
func (t *TwoStacks) mergeN(a, b *summary.Summary) int {
	if t.N > 0 && t.N < max(a.N, b.N) {
		return t.N
	}
	return a.N
}

// Reset empties the aggregator (its N, Pack and Zip stay: a rebuilt window
// packs its front's block aggregates as before).
func (t *TwoStacks) Reset() { *t = TwoStacks{N: t.N, Pack: t.Pack, Zip: t.Zip, merges: t.merges} }
