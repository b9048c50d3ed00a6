// Package slide keeps the fast path's sliding windows incrementally: the
// state of one partition holds, for every list with data in the last hour,
// a ring of its 10 s bucket summaries and of its minute summaries, and one
// two-stacks aggregator per window (TwoStacks), so each slide of a window
// costs about three summary merges, not one per pane it covers (6 for 1m,
// 30 for 5m, 60 for 1h). It has no Beam import: transforms/slide's Beam
// wrapper (Windows) keeps a State per partition key, fires it from
// event-time timers and keeps its panes in Beam state for recovery.
//
// Panes. Level 0 holds the buckets (Config.Bucket); each distinct window
// period longer than a bucket is a level of its own whose panes are built
// from level 0 when they close (the minutes the 1h window slides over). A
// window slides over the panes of the level of its period: 1m and 5m over
// buckets every 10 s, 1h over minutes every minute. Every merge is
// summary.MergeEvents (disjoint event sets), so every bound of the counting
// core holds for every window, whatever the merge order.
//
// Time. Add records a bucket; Fire(end) is called once per slide end in
// increasing order (the watermark passed end, so every on-time bucket before
// end has been added): it closes the panes of the levels that end at end,
// pushes the new panes into the aggregators of the windows that slide at
// end, evicts what left them, and reports each window's summary per list. A
// bucket added after the slide at its end has fired is late: it is merged
// into its bucket and into the closed panes that hold it, and the
// aggregators that hold those panes are rebuilt before their next query, so
// a late bucket counts in every window that had not fired when it arrived,
// and in no window that had.
//
// Memory per list is bounded by the panes it keeps (30 buckets for 5m, 60
// minutes for 1h) and the aggregators' nodes (about 2 sqrt(n) aggregates
// for a window of n panes: see TwoStacks), each a summary of at most N
// entries: it does not grow with distinct items, and a list without data
// for an hour is dropped. What waits between two reads is held packed
// (encoded, about a third of its decoded size, see pane): the closed
// minutes and the buckets a minute old (State.packIdle; the State and its
// aggregators share them), and the front aggregates kept for a later
// block (and, in the 1h window, those a block's turn at the top makes
// again, but for the top's); the minutes and the 1h window's aggregates,
// held for an hour and read about once in it, compressed as well (zstd:
// about half). The
// minutes and the aggregates may keep fewer entries than the buckets
// (Config.UpperN, Config.AggN): an aggregate merges many panes, so
// a list of a few hundred items per bucket holds aggregates as big as a
// full list's, and they, not the panes, were most of the heap. Cost per
// slide follows the lists that have data: a list with ten items in its
// window costs merges of ten entries.
package slide

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/summary"
)

// Window is one sliding window: Length, sliding every Period (a multiple of
// the bucket; Length a multiple of Period).
type Window struct {
	Name           string
	Length, Period time.Duration
	// MinCount: in a list whose scope is not global, entries below it are
	// left out (a quiet region shows a shorter list, not a thousand items
	// with one view each). 0 keeps every entry.
	MinCount uint64
}

// Config is a partition state's shape.
type Config struct {
	Bucket  time.Duration
	Windows []Window
	// Limit is the number of entries per list a window result keeps (K plus
	// the list margin): an item outside its partition's first Limit by hi
	// is outside the list's first Limit too. 0 keeps all.
	Limit int
	// Parts, when its P is set, is how a list's items are spread over the
	// partitions: a list in n of them keeps in each window result at most
	// PartShares shares of Limit (PartShares * ceil(Limit / n)), not
	// Limit. See PartLimit.
	Parts schemas.Partitions
	// UpperN, when > 0, is the number of entries a pane of a level above
	// the buckets keeps (the minutes the 1h window slides over) and so the
	// aggregates of the windows that slide over those panes: a closed
	// minute is merged from its buckets at their N, then cut to UpperN.
	// The 1h window's sixty minutes and up to sixty aggregates are about
	// two thirds of a full list's state, and its lists count sixty times a
	// minute's events, so the entries a minute drops weigh less in them
	// (see TestStateMemoryFull and the fast path's replays for what it
	// saves and costs). 0: as the buckets'.
	UpperN int
	// AggN, when > 0, is the entries each window's aggregates keep
	// (TwoStacks.N): the front stack's aggregates (about 2 sqrt(n) of a
	// window's n panes) are most of a window's state beyond its panes. A
	// window over the upper levels keeps the smaller of AggN and UpperN.
	// 0: as their panes'.
	AggN int
}

// PartShares is how many shares of Limit a list's window result keeps in
// one of its partitions (Config.Parts). A list's items are spread over
// its n partitions by their hashes, so the list's first Limit entries by
// hi are about Limit/n in each (binomial: for Limit 1,100 over 16, 69 on
// average, 8 the standard deviation); four shares (276) leave them a
// margin of 25 standard deviations. The list merge keeps the first Limit
// of every partition's result by the same order (summary.Union.Answer:
// hi, lo, hash), so it keeps the same entries and the same Theta whether a
// partition sent four shares or Limit, unless one partition holds more
// than four shares of the list's first Limit; even then the bounds hold
// (what a partition leaves out raises Theta, so certified_k shrinks), only
// entries are missing.
const PartShares = 4

// PartLimit is the entries a window result of list key ("type\x00scope")
// keeps in one partition: Limit, or PartShares shares of it when the
// list is spread over more than PartShares partitions (Config.Parts).
// Sixteen partitions' results of up to Limit entries each made the list
// merge sort sixteen times what it keeps, and every one was encoded,
// moved through the runner and decoded first (BENCHMARKS.md, "Window
// results cut to their share").
func (c Config) PartLimit(key string) int {
	if c.Limit <= 0 || c.Parts.P <= 0 {
		return c.Limit
	}
	scope := key
	if i := strings.IndexByte(key, 0); i >= 0 {
		scope = key[i+1:]
	}
	n := c.Parts.Of(scope)
	if n <= PartShares {
		return c.Limit
	}
	return min(c.Limit, PartShares*((c.Limit+n-1)/n))
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.Bucket < time.Millisecond || c.Bucket%time.Millisecond != 0 {
		return fmt.Errorf("slide: bucket %v", c.Bucket)
	}
	if len(c.Windows) == 0 {
		return fmt.Errorf("slide: no windows")
	}
	seen := map[string]bool{}
	for _, w := range c.Windows {
		if w.Name == "" || seen[w.Name] {
			return fmt.Errorf("slide: window name %q empty or repeated", w.Name)
		}
		seen[w.Name] = true
		if w.Period <= 0 || w.Period%c.Bucket != 0 || w.Length < w.Period || w.Length%w.Period != 0 {
			return fmt.Errorf("slide: window %s: %v every %v with %v buckets", w.Name, w.Length, w.Period, c.Bucket)
		}
	}
	if c.Limit < 0 {
		return fmt.Errorf("slide: limit %d", c.Limit)
	}
	if p := c.Parts; p.P < 0 || p.Region < 0 || p.Country < 0 {
		return fmt.Errorf("slide: partitions %+v", p)
	}
	if c.UpperN < 0 || c.UpperN > summary.MaxN {
		return fmt.Errorf("slide: upper levels' N %d outside [0, %d]", c.UpperN, summary.MaxN)
	}
	if c.AggN < 0 || c.AggN > summary.MaxN {
		return fmt.Errorf("slide: aggregates' N %d outside [0, %d]", c.AggN, summary.MaxN)
	}
	return nil
}

// level is one pane size and the panes of a list at that size.
type level struct {
	size int64 // pane length, ms
	keep int64 // how far back panes are kept, ms
	// short is the longest window over the level whose front keeps all
	// its aggregates (smallFront panes or fewer): its panes are packed
	// once they leave it (State.packIdle). 0: none.
	short int64
}

// State is one partition's windows over all its lists.
type State struct {
	cfg    Config
	levels []level // levels[0] is the bucket level
	winLvl []int   // window i slides over levels[winLvl[i]]
	lists  map[string]*list
	fired  int64 // the last slide end fired (Unix ms); 0: none
	// Merges counts summary merges (for tests and benchmarks).
	Merges int
	// ShareResults makes Fire cut every Result's summary into one reused
	// summary, valid only until the result callback returns (a caller
	// that encodes each result at once saves a copy per list and window).
	ShareResults bool
	cut          summary.Summary
	// noPack keeps every pane and aggregate decoded (tests compare it
	// with the packed state); noZip packs without compressing (tests
	// measure what the compression saves).
	noPack, noZip bool
}

type list struct {
	limit  int       // entries a window result keeps (Config.PartLimit)
	panes  [][]*pane // by level, start order
	aggs   []TwoStacks
	pushed []int64 // per window: start of the newest pane pushed (or -inf)
	dirty  []bool  // per window: rebuild before the next query
}

const never = -1 << 62

// NewState returns an empty partition state. It panics on an invalid
// configuration (validate it when the pipeline is built).
func NewState(cfg Config) *State {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	st := &State{cfg: cfg, lists: map[string]*list{}}
	b := cfg.Bucket.Milliseconds()
	st.levels = []level{{size: b}}
	for _, w := range cfg.Windows {
		p, n := w.Period.Milliseconds(), w.Length.Milliseconds()
		i := slices.IndexFunc(st.levels, func(l level) bool { return l.size == p })
		if i < 0 {
			st.levels = append(st.levels, level{size: p})
			i = len(st.levels) - 1
			// The buckets of an open pane are kept until it closes.
			st.levels[0].keep = max(st.levels[0].keep, p)
		}
		st.levels[i].keep = max(st.levels[i].keep, n)
		if n/p <= smallFront {
			st.levels[i].short = max(st.levels[i].short, n)
		}
		st.winLvl = append(st.winLvl, i)
	}
	return st
}

// Config returns the state's configuration.
func (st *State) Config() Config { return st.cfg }

// Fired is the last slide end fired (Unix ms), 0 if none.
func (st *State) Fired() int64 { return st.fired }

// Lists is the number of lists with panes.
func (st *State) Lists() int { return len(st.lists) }

// Empty reports whether no list holds a pane.
func (st *State) Empty() bool { return len(st.lists) == 0 }

func (st *State) list(key string) *list {
	l := st.lists[key]
	if l == nil {
		n := len(st.cfg.Windows)
		l = &list{limit: st.cfg.PartLimit(key), panes: make([][]*pane, len(st.levels)), aggs: make([]TwoStacks, n), pushed: make([]int64, n), dirty: make([]bool, n)}
		for i := range l.pushed {
			l.pushed[i] = never
			l.aggs[i].N = st.aggN(i)
			l.aggs[i].Pack = !st.noPack
			l.aggs[i].Zip = !st.noPack && !st.noZip && st.cfg.Windows[i].Period > st.cfg.Bucket
		}
		st.lists[strings.Clone(key)] = l
	}
	return l
}

// Late is a late bucket's contribution to a pane that had already closed:
// the Beam wrapper passes late minutes on to the long windows.
type Late struct {
	Level, Start int64 // pane size and start, ms
	List         string
	Summary      *summary.Summary
}

// Add records the summary of one bucket of one list (bucket start, Unix
// ms). A second summary of the same bucket (another pane of its GroupByKey)
// is merged with the first. A bucket whose slide has fired is late: it also
// merges into the closed larger panes that hold it, which are returned.
// sm is kept: do not modify it afterwards.
func (st *State) Add(key string, bucket int64, sm *summary.Summary) ([]Late, error) {
	if m := bucket % st.levels[0].size; m != 0 {
		return nil, fmt.Errorf("slide: bucket %d not aligned to %d ms", bucket, st.levels[0].size)
	}
	l := st.list(key)
	late := st.fired != 0 && bucket+st.levels[0].size <= st.fired
	var out []Late
	for li, lv := range st.levels {
		start := floor(bucket, lv.size)
		if li > 0 && (!late || start+lv.size > st.fired) {
			continue // the pane is still open: built from its buckets when it closes
		}
		if st.fired != 0 && start+lv.keep <= st.fired {
			continue // too old for any window of this level
		}
		if _, err := st.insert(l, li, start, sm); err != nil {
			return nil, fmt.Errorf("slide: list %q: %w", key, err)
		}
		if li > 0 {
			out = append(out, Late{Level: lv.size, Start: start, List: key, Summary: sm})
		}
		if late {
			for wi, wl := range st.winLvl {
				if wl == li && start <= l.pushed[wi] {
					l.dirty[wi] = true
				}
			}
		}
	}
	return out, nil
}

// insert merges sm into l's pane of level li at start (creating it, cut to
// the level's N), keeping start order, and returns the pane's summary. A
// pane merged into is replaced, not changed: the windows' aggregators may
// hold the old one until they are rebuilt.
func (st *State) insert(l *list, li int, start int64, sm *summary.Summary) (*summary.Summary, error) {
	ps := &l.panes[li]
	i, found := slices.BinarySearchFunc(*ps, start, func(p *pane, s int64) int { return cmp.Compare(p.start, s) })
	if found {
		old, err := (*ps)[i].get()
		if err != nil {
			return nil, err
		}
		m, err := summary.MergeEvents(old, sm)
		if err != nil {
			return nil, err
		}
		st.Merges++
		(*ps)[i] = &pane{start: start, sm: m}
		return m, nil
	}
	sm = st.paneN(li, sm)
	*ps = slices.Insert(*ps, i, &pane{start: start, sm: sm})
	return sm, nil
}

// packIdle packs (see pane) the panes of l that only long windows read from
// the slide after end on: those out of every window of their level that
// keeps all its front's aggregates (smallFront panes or fewer, as the 1m
// window's six buckets: it reads its panes at every flip, once a minute).
// So every minute once the slide that closed it has pushed it, and every
// bucket a minute old; each is read again at its long windows' flips and
// block rebuilds (a decode each), and the aggregators share the State's
// panes, so they read them packed too.
func (st *State) packIdle(l *list, end int64) error {
	if st.noPack {
		return nil
	}
	for li, ps := range l.panes {
		before := end - st.levels[li].short
		for _, p := range ps {
			if p.start >= before {
				break
			}
			if p.sm == nil {
				continue
			}
			if p.packed == nil {
				var err error
				zip := li > 0 && !st.noZip
				if p.packed, err = pack(p.sm, zip); err != nil {
					return err
				}
				p.zipped = zip
			}
			p.sm = nil
		}
	}
	return nil
}

// Closed is a pane of a larger level that closed at a slide (a minute).
type Closed struct {
	Level, Start int64
	List         string
	Summary      *summary.Summary
}

// Result is one window's summary of one list at a slide end, already cut to
// Config.Limit and the window's MinCount.
type Result struct {
	Window  int // index into Config.Windows
	List    string
	Summary *summary.Summary
}

// Fire runs the slide ending at end (Unix ms, a multiple of the bucket),
// after every bucket before end was added: it closes the panes ending at
// end, slides every window whose period divides end and reports each list's
// window summary through result (lists with nothing in the window report
// nothing) and each closed pane through closed (nil: not wanted). Slide ends
// must increase.
func (st *State) Fire(end int64, result func(Result) error, closed func(Closed) error) error {
	if end%st.levels[0].size != 0 {
		return fmt.Errorf("slide: end %d not aligned to %d ms", end, st.levels[0].size)
	}
	if end <= st.fired {
		return fmt.Errorf("slide: end %d at or before the last slide %d", end, st.fired)
	}
	st.fired = end
	keys := make([]string, 0, len(st.lists))
	for k := range st.lists {
		keys = append(keys, k)
	}
	slices.Sort(keys) // a deterministic order of outputs
	for _, key := range keys {
		l := st.lists[key]
		// Close the larger panes ending here from their buckets.
		for li := 1; li < len(st.levels); li++ {
			lv := st.levels[li]
			if end%lv.size != 0 {
				continue
			}
			sm, err := st.mergeRange(l.panes[0], end-lv.size, end)
			if err != nil {
				return fmt.Errorf("slide: list %q: %w", key, err)
			}
			if sm == nil {
				continue
			}
			sm = st.paneN(li, sm)
			if _, err := st.insert(l, li, end-lv.size, sm); err != nil {
				return err
			}
			if closed != nil {
				if err := closed(Closed{Level: lv.size, Start: end - lv.size, List: key, Summary: sm}); err != nil {
					return err
				}
			}
		}
		for wi, w := range st.cfg.Windows {
			p := w.Period.Milliseconds()
			if end%p != 0 {
				continue
			}
			var floorCount uint64
			if !isGlobal(key) {
				floorCount = w.MinCount
			}
			cut := &st.cut
			if !st.ShareResults {
				cut = new(summary.Summary)
			}
			cut, err := st.slide(l, wi, end, floorCount, cut)
			if err != nil {
				return fmt.Errorf("slide: list %q window %s: %w", key, w.Name, err)
			}
			if cut == nil {
				continue
			}
			if err := result(Result{Window: wi, List: key, Summary: cut}); err != nil {
				return err
			}
		}
		if err := st.packIdle(l, end); err != nil {
			return fmt.Errorf("slide: list %q: %w", key, err)
		}
		// Drop panes no window needs any more.
		empty := true
		for li, lv := range st.levels {
			ps := l.panes[li]
			n := 0
			for n < len(ps) && ps[n].start+lv.keep <= end {
				n++
			}
			if n > 0 {
				clear(ps[:n])
				l.panes[li] = ps[n:]
			}
			empty = empty && len(l.panes[li]) == 0
		}
		if empty {
			delete(st.lists, key)
		}
	}
	return nil
}

// slide moves window wi of l to end and writes its summary, cut to
// Config.Limit and floor (Summary.TopInto), into out; it returns out, or nil
// when the window holds nothing.
func (st *State) slide(l *list, wi int, end int64, floor uint64, out *summary.Summary) (*summary.Summary, error) {
	w := st.cfg.Windows[wi]
	ps := l.panes[st.winLvl[wi]]
	from := end - w.Length.Milliseconds()
	t := &l.aggs[wi]
	before := t.merges
	defer func() { st.Merges += t.merges - before }()
	if l.dirty[wi] {
		t.Reset()
		before = t.merges
		l.pushed[wi] = never
		l.dirty[wi] = false
	}
	for _, p := range ps {
		if p.start > l.pushed[wi] && p.start < end && p.start >= from {
			if err := t.push(p); err != nil {
				return nil, err
			}
			l.pushed[wi] = p.start
		}
	}
	if err := t.Evict(from); err != nil {
		return nil, err
	}
	return t.QueryTopInto(out, l.limit, floor)
}

// aggN is the N of window wi's aggregates (see Config.AggN).
func (st *State) aggN(wi int) int {
	n := st.cfg.AggN
	if u := st.cfg.UpperN; st.winLvl[wi] > 0 && u > 0 && (n == 0 || u < n) {
		n = u
	}
	return n
}

// paneN returns sm as a pane of level li keeps it: cut to UpperN above the
// buckets (a copy, sm is not changed), sm itself otherwise. A merge into a
// pane keeps the pane's N (MergeEvents keeps its first argument's), so a
// late bucket merged into a closed minute does not widen it.
func (st *State) paneN(li int, sm *summary.Summary) *summary.Summary {
	if n := st.cfg.UpperN; li > 0 && n > 0 && sm.N > n {
		return sm.WithN(n)
	}
	return sm
}

// mergeRange merges the panes with start in [from, to); nil if none. The
// steps before the last are merged into scratch summaries (the same
// summaries, summary.MergeEventsInto): only the result is new.
func (st *State) mergeRange(ps []*pane, from, to int64) (*summary.Summary, error) {
	var in []*summary.Summary
	for _, p := range ps {
		if p.start >= from && p.start < to {
			sm, err := p.get()
			if err != nil {
				return nil, err
			}
			in = append(in, sm)
		}
	}
	if len(in) == 0 {
		return nil, nil
	}
	acc := in[0]
	var scratch *[2]summary.Summary
	defer func() {
		if scratch != nil {
			scratchPairs.Put(scratch)
		}
	}()
	for i, sm := range in[1:] {
		st.Merges++
		if i == len(in)-2 {
			return summary.MergeEvents(acc, sm)
		}
		if scratch == nil {
			scratch = scratchPairs.Get().(*[2]summary.Summary)
		}
		dst := &scratch[i%2] // acc is a pane or the other scratch
		if err := summary.MergeEventsInto(dst, acc, sm, acc.N); err != nil {
			return nil, err
		}
		acc = dst
	}
	return acc, nil
}

// Next is the next slide end after end at which some window has panes to
// report, false when the state is empty. A window with panes slides at every
// period until its last pane has left it.
func (st *State) Next(end int64) (int64, bool) {
	best := int64(0)
	for _, l := range st.lists {
		for wi, w := range st.cfg.Windows {
			li := st.winLvl[wi]
			// The newest pane start at the window's level: a closed pane,
			// or the pane an open bucket will close into.
			newest, ok := int64(never), false
			if ps := l.panes[li]; len(ps) > 0 {
				newest, ok = ps[len(ps)-1].start, true
			}
			if bs := l.panes[0]; li != 0 && len(bs) > 0 {
				newest, ok = max(newest, floor(bs[len(bs)-1].start, st.levels[li].size)), true
			}
			if !ok {
				continue
			}
			// The window at next holds a pane starting at newest iff
			// newest < next <= newest + length.
			p := w.Period.Milliseconds()
			next := floor(end, p) + p
			last := newest + w.Length.Milliseconds() + 1
			if next < last && (best == 0 || next < best) {
				best = next
			}
		}
	}
	return best, best != 0
}

// Panes calls f with every pane of every list at level li (0: buckets), in
// list and start order: a restore's whole state. A packed pane (see pane)
// comes as its encoding (decompressed when zipped), sm nil; any other as
// sm, packed nil.
func (st *State) Panes(li int, f func(list string, start int64, sm *summary.Summary, packed []byte)) error {
	return st.panes(li, func(int64) bool { return true }, f)
}

// PanesAt is Panes for the panes that start at start only: what the Beam
// wrapper writes to durable state when a pane closes. Only those are
// decompressed.
func (st *State) PanesAt(li int, start int64, f func(list string, sm *summary.Summary, packed []byte)) error {
	return st.panes(li, func(s int64) bool { return s == start }, func(list string, _ int64, sm *summary.Summary, packed []byte) {
		f(list, sm, packed)
	})
}

// PaneStarts calls f with the start of every pane of every list at level
// li (once a list: the same start comes once for each list that has it),
// decoding nothing.
func (st *State) PaneStarts(li int, f func(start int64)) {
	for _, l := range st.lists {
		for _, p := range l.panes[li] {
			f(p.start)
		}
	}
}

func (st *State) panes(li int, want func(start int64) bool, f func(list string, start int64, sm *summary.Summary, packed []byte)) error {
	keys := make([]string, 0, len(st.lists))
	for k := range st.lists {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, p := range st.lists[k].panes[li] {
			switch {
			case !want(p.start):
			case p.sm == nil:
				b, err := p.encoded()
				if err != nil {
					return fmt.Errorf("slide: pane %s at %d: %w", k, p.start, err)
				}
				f(k, p.start, nil, b)
			default:
				f(k, p.start, p.sm, nil)
			}
		}
	}
	return nil
}

// Levels are the pane sizes (ms), level 0 first.
func (st *State) Levels() []int64 {
	out := make([]int64, len(st.levels))
	for i, l := range st.levels {
		out[i] = l.size
	}
	return out
}

// Restore puts back a pane saved by Panes (after a restart: the aggregators
// are rebuilt from the panes at the next slide) and the last slide fired.
func (st *State) Restore(li int, key string, start int64, sm *summary.Summary, fired int64) error {
	if li < 0 || li >= len(st.levels) || start%st.levels[li].size != 0 {
		return fmt.Errorf("slide: restore level %d start %d", li, start)
	}
	l := st.list(key)
	if _, err := st.insert(l, li, start, sm); err != nil {
		return err
	}
	for wi := range l.dirty {
		l.dirty[wi] = true
	}
	st.fired = max(st.fired, fired)
	return nil
}

// SetFired sets the last slide fired (restoring a state without panes).
func (st *State) SetFired(fired int64) { st.fired = max(st.fired, fired) }

// isGlobal reports whether a list key ("type\x00scope") is a global list.
func isGlobal(key string) bool {
	i := strings.IndexByte(key, 0)
	return i >= 0 && key[i+1:] == "global"
}

func floor(t, d int64) int64 {
	m := t % d
	if m < 0 {
		m += d
	}
	return t - m
}
