package rules

import (
	"math"
	"time"
	"unsafe"

	"github.com/cespare/xxhash/v2"

	"github.com/topk-dev/topk/schemas"
)

// IDHash is the hash of an event_id: the dedupe tables' hash, and the
// second key of the canonical order of events (event time in milliseconds,
// then IDHash) in which repeats and caps are judged.
func IDHash(id string) uint64 { return xxhash.Sum64String(id) }

// KeyState is what the repeat and cap rules remember of one (user, type,
// item) in one rule window. The zero value is a key not seen yet.
type KeyState struct {
	// recent are the latest events seen, in canonical order (event time
	// in ms, IDHash), latest first; n of them are set. Keeping a few, not
	// one, lets an event that arrives a little after a later one still be
	// judged against the event just before it.
	recent [keyRecent]stamp
	n      uint8
	// counted and repeat hold, bit i for recent[i], the verdict Step gave
	// that event (counted; a repeat; neither: capped), so that the same
	// event judged again gets it again and changes nothing (see Step).
	counted, repeat uint8
	count           uint32 // events counted
}

// keyRecent is how many of a key's latest events a KeyState keeps.
const keyRecent = 4

type stamp struct {
	ts int64
	id uint64
}

func (a stamp) less(b stamp) bool { return a.ts < b.ts || (a.ts == b.ts && a.id < b.id) }

// Judge applies the repeat and cap rules to the events of one key, one
// event at a time. The exact recount calls it on each key's events in
// canonical order, which is the definition; a Filter calls it in arrival
// order (see the package doc for why that never drops an event the
// definition keeps).
type Judge struct {
	gap int64 // ms; 0: no repeat rule
	cap uint32
}

// Judge returns c's repeat and cap rules (none when c.Off).
func (c Config) Judge() Judge {
	if c.Off {
		return Judge{}
	}
	return Judge{gap: c.RepeatGap.Milliseconds(), cap: uint32(c.Cap)}
}

// Stateful reports whether any rule besides the dedupe needs memory across
// events: the repeat rule or the cap. When false, Judge.Step always says OK.
func (c Config) Stateful() bool { return c.stateful() }

// WindowStart is the start (Unix ms) of the rule window holding tsMs.
func (c Config) WindowStart(tsMs int64) int64 {
	w := c.Window.Milliseconds()
	return floorDiv(tsMs, w) * w
}

// Step judges the next event of k's key, at event time tsMs with event_id
// hash idHash, and updates k: Repeat when the latest earlier event of the
// key (in canonical order, counted or not) is less than the gap before it,
// else Capped when the key already counted the cap, else OK (counted).
//
// Called in canonical order, the latest earlier event is always known.
// Called out of order, Step judges by the latest earlier event among those
// it keeps; when it keeps none, the event is not a repeat. Either way an
// event is called a repeat only if the definition's own predecessor is at
// least as close.
//
// The same event again (its time and id hash among the key's kept
// events) gets the verdict it got the first time and changes nothing. The
// definition never meets it (the recount drops duplicate event_ids
// first), nor does a Filter whose dedupe remembered the event_id; a
// Filter meets it when it could not (Stats.Unchecked) and the event comes
// again: a runner retrying a bundle the Filter had seen (judged afresh,
// its key's cap count would hold it twice, and a key at its cap would
// lose an event the retried bundle must count: an under-count), or a
// duplicate the dedupe missed (it counts again, as any unchecked
// duplicate does, without taking a second place under the cap). Once the
// key has kept four later events the first verdict is forgotten and the
// event is judged afresh.
//
// hot path: once per event.
func (j Judge) Step(k *KeyState, tsMs int64, idHash uint64) Reason {
	e := stamp{tsMs, idHash}
	// i: the first kept event before e (they are latest first).
	i := 0
	for i < int(k.n) && !k.recent[i].less(e) {
		i++
	}
	if i > 0 && k.recent[i-1] == e {
		bit := uint8(1) << (i - 1)
		switch {
		case k.counted&bit != 0:
			return OK
		case k.repeat&bit != 0:
			return Repeat
		}
		return Capped
	}
	verdict := OK
	switch {
	case j.gap > 0 && i < int(k.n) && tsMs-k.recent[i].ts < j.gap:
		verdict = Repeat
	case j.cap > 0 && k.count >= j.cap:
		verdict = Capped
	default:
		k.count++
	}
	if i < keyRecent {
		copy(k.recent[i+1:], k.recent[i:])
		k.recent[i] = e
		if k.n < keyRecent {
			k.n++
		}
		k.counted = insertBit(k.counted, i, verdict == OK)
		k.repeat = insertBit(k.repeat, i, verdict == Repeat)
	}
	return verdict
}

// insertBit inserts v as bit i of m, moving bits i and above up one (the
// top one of keyRecent falls off), as Step inserts a stamp into recent.
func insertBit(m uint8, i int, v bool) uint8 {
	low := uint8(1)<<i - 1
	m = (m & low) | (m&^low)<<1
	if v {
		m |= 1 << i
	}
	return m & (1<<keyRecent - 1)
}

// Stats are a Filter's counts since the last TakeStats.
type Stats struct {
	// Events by the reason Check gave.
	Events [NumReasons]uint64
	// Weight is the sum of the weights of the events that counted.
	Weight float64
	// Unchecked events had an event_id the Filter could not remember: too
	// old for the dedupe horizon, or their bucket's set was full. A later
	// duplicate of one is counted again: an over-count of at most this
	// many events, never an under-count.
	Unchecked uint64
	// Untracked events had a (user, type, item) the Filter could not
	// remember (the window is older than the horizon, or the key is longer
	// than a table's arena): the repeat and cap rules were not applied to
	// them, an over-count of at most this many events.
	Untracked uint64
	// Forgotten keys were dropped from a full window's older generation
	// without an event since the newer one started (see keyWindow): if
	// such a key comes back in the same rule window its repeats and cap
	// start afresh, an over-count of at most Cap events per forgotten key.
	Forgotten uint64
	// Redelivered events came again in a new delivery of the beacon that
	// first brought them (a runner retrying a bundle it discarded; only
	// with RetriesByBeacon): each got its first delivery's verdict again
	// (counted in Events under it) and changed no state.
	Redelivered uint64
}

// Filter is the whole rule set for a stream: the event_id dedupe, the
// stateless rules of its Rules, and the repeat and cap rules, with memory
// bounded by its Config (see Bytes). It is not safe for concurrent use: use
// one per goroutine (per DoFn instance).
type Filter struct {
	r     *Rules
	judge Judge
	// stateful is cfg.Stateful().
	stateful bool

	bucketMs int64
	ids      []idBucket
	maxIDs   int
	windowMs int64
	keys     []keyWindow
	maxKeys  int

	// maxID and maxKey are the newest dedupe bucket and rule window an
	// event may open (evicting the oldest), from Advance; math.MaxInt64
	// until it is called.
	maxID, maxKey int64

	// byBeacon is RetriesByBeacon's setting; beacon (the hash of its id, 0
	// for none) and delivery identify the beacon being checked (Beacon).
	byBeacon         bool
	beacon, delivery uint32

	buf   []byte
	stats Stats
}

type idBucket struct {
	epoch int64
	t     *table[seenID]
}

// seenID is what the dedupe remembers of an event_id: the beacon (32 bits
// of its id's hash: a duplicate in another beacon is taken for a retry, and
// counted again, with probability 2^-32) and the delivery that brought it
// first, and the verdict it got (see RetriesByBeacon). 12 bytes an entry.
type seenID struct {
	beacon, delivery uint32
	reason           Reason
}

// keyWindow is one rule window's (user, type, item) state: two
// generations of half the window's MaxKeys each. A key is looked up in the
// current generation, then the older one (from which it is copied forward);
// a new key goes into the current one, and when that is full the older
// generation is dropped and the current one becomes the older. So the keys
// kept are the recently active ones: an account posting an item every few
// seconds is never dropped by a long tail of one-off keys, which age out
// (Stats.Forgotten) instead of filling the window for the rest of the hour.
// Memory is that of one table of MaxKeys.
type keyWindow struct {
	epoch     int64
	cur, prev *table[KeyState]
	promoted  uint64 // keys copied forward from prev since the last rotation
}

// keyHalf is the capacity of one generation of a window of maxKeys keys.
func keyHalf(maxKeys int) int { return max(1, (maxKeys+1)/2) }

func newKeyTable(maxKeys int) *table[KeyState] {
	h := keyHalf(maxKeys)
	return newTable[KeyState](h, h*keyArenaBytes)
}

// reset empties both generations for a new rule window.
func (w *keyWindow) reset() {
	w.cur.reset()
	w.prev.reset()
	w.promoted = 0
}

// get returns key's state, adding it (with its older generation's state,
// if any) when new; nil only when the key cannot fit a generation at all.
func (w *keyWindow) get(key []byte, h uint64, st *Stats) *KeyState {
	if v := w.cur.lookup(key, h); v != nil {
		return v
	}
	old := w.prev.lookup(key, h)
	v, _, ok := w.cur.get(key, h)
	if !ok { // the current generation is full: rotate
		if n := uint64(w.prev.len()); n > w.promoted {
			st.Forgotten += n - w.promoted
		}
		var carried KeyState
		if old != nil {
			carried = *old // prev is about to be reused
		}
		w.cur, w.prev = w.prev, w.cur
		w.cur.reset()
		w.promoted = 0
		if v, _, ok = w.cur.get(key, h); !ok {
			return nil
		}
		*v = carried
		return v
	}
	if old != nil {
		*v = *old
		w.promoted++
	}
	return v
}

// Arena bytes per entry: event_ids and (user, type, item) keys longer on
// average than this fill a table's arena before its entries.
const (
	idArenaBytes  = 48
	keyArenaBytes = 64
)

// NewFilter returns a Filter applying r's rules. Its tables are allocated
// as event time first reaches them, up to the bound Bytes reports.
func (r *Rules) NewFilter() *Filter {
	c := r.cfg
	f := &Filter{
		r:        r,
		judge:    c.Judge(),
		stateful: c.Stateful(),
		bucketMs: c.DedupeBucket.Milliseconds(),
		maxIDs:   c.MaxIDs,
		windowMs: c.Window.Milliseconds(),
		maxKeys:  c.MaxKeys,
		buf:      make([]byte, 0, 512),
		maxID:    math.MaxInt64,
		maxKey:   math.MaxInt64,
	}
	// One bucket more than the horizon holds, so that the bucket being
	// filled never evicts one still inside the horizon.
	f.ids = make([]idBucket, ceilDiv(c.DedupeHorizon.Milliseconds(), f.bucketMs)+1)
	if f.stateful {
		f.keys = make([]keyWindow, ceilDiv(c.DedupeHorizon.Milliseconds(), f.windowMs)+1)
	}
	return f
}

// MaxBytes is the most memory the Filter's tables take, whatever the
// events: the bound behind "memory does not grow with a spam wave".
func (f *Filter) MaxBytes() int {
	id := tableBytes[seenID](f.maxIDs, f.maxIDs*idArenaBytes)
	return len(f.ids)*id + len(f.keys)*keyWindowBytes(f.maxKeys)
}

// keyWindowBytes is a key window's fixed memory: two generations.
func keyWindowBytes(maxKeys int) int {
	h := keyHalf(maxKeys)
	return 2 * tableBytes[KeyState](h, h*keyArenaBytes)
}

// Bytes is the memory of the tables allocated so far (at most MaxBytes).
func (f *Filter) Bytes() int {
	n := 0
	for i := range f.ids {
		if t := f.ids[i].t; t != nil {
			n += t.bytes()
		}
	}
	for i := range f.keys {
		if w := &f.keys[i]; w.cur != nil {
			n += w.cur.bytes() + w.prev.bytes()
		}
	}
	return n
}

func tableBytes[V any](ents, arena int) int {
	size := 16
	for size < ents*2 {
		size <<= 1
	}
	var e tableEntry[V]
	return size*8 + ents*int(unsafe.Sizeof(e)) + arena
}

// Advance tells the Filter the stream's current time (the element time of
// the beacon being processed, say). From then on, an event dated more than
// one dedupe bucket ahead of it is neither remembered nor allowed to evict
// an older bucket (it counts, Stats.Unchecked/Untracked): without this a
// client with a clock far ahead would evict event_ids still inside the
// horizon, and so let their duplicates count again.
//
// hot path: cheap; call it once per beacon or bundle.
func (f *Filter) Advance(now time.Time) {
	ms := now.UnixMilli() + f.bucketMs
	f.maxID = floorDiv(ms, f.bucketMs)
	f.maxKey = floorDiv(ms, f.windowMs)
}

// RetriesByBeacon tells the Filter that its source delivers each
// beacon_id once, except when a runner retries a bundle it discarded after
// the Filter had seen it (Dataflow, after a failed commit, may run the same
// input again on the same worker): Dataflow's native Pub/Sub read
// deduplicates messages by their beacon_id attribute, and the recovery
// log does on the other runners. Then an event_id seen before in an
// earlier delivery of a beacon with the same id is that retry, not a
// duplicate: it gets the verdict its first delivery got, and changes no
// state (Stats.Redelivered), so the retried bundle counts what the
// discarded one did. Without it (the default, right for sources that may
// deliver a beacon twice: a file, a subscription read without the log) a
// Filter that saw a discarded bundle takes its retry for duplicates: an
// under-count of that bundle. An event_id seen in a beacon with another
// id, in the same delivery, or in a beacon without an id is a duplicate
// either way. An event whose id the dedupe could not remember
// (Stats.Unchecked: its set was full) reaches the repeat and cap rules
// again on a retry, where its key gives it its first verdict and changes
// nothing (Judge.Step), unless the key has kept four later events since:
// then it is judged afresh, and its key's cap count holds it twice.
func (f *Filter) RetriesByBeacon(on bool) { f.byBeacon = on }

// Beacon tells the Filter that the events it checks next come from one
// delivery of the beacon with this id ("" for none): call it once per
// beacon, with Advance. Only RetriesByBeacon uses it.
//
// hot path: once per beacon.
func (f *Filter) Beacon(id string) {
	f.beacon = 0
	if id != "" {
		f.beacon = uint32(xxhash.Sum64String(id)>>32) | 1 // never 0, which is none
	}
	f.delivery++
}

// Rules is the Filter's stateless rule set.
func (f *Filter) Rules() *Rules { return f.r }

// Check applies every rule to e, in order: event_id dedupe, blocklist,
// bots, repeats, cap; it returns the event's trust weight when it counts
// (reason OK) and 0 otherwise. An event that counts adds 1 to its items'
// counts and weight to their trust-weighted (trending) scores.
//
// hot path: once per event; no allocation once the tables event time
// reaches are allocated.
func (f *Filter) Check(e *schemas.Event) (weight float64, reason Reason) {
	ts := e.TS.UnixMilli()
	idh := xxhash.Sum64String(e.EventID)
	seen, found := f.seen(e.EventID, idh, ts)
	if found {
		if !f.byBeacon || f.beacon == 0 || seen.beacon != f.beacon || seen.delivery == f.delivery {
			f.stats.Events[Duplicate]++
			return 0, Duplicate
		}
		// A redelivery of the beacon that brought it first: that verdict
		// again, with no rule state changed (the first delivery changed
		// it); only the delivery moves on, so that a second copy of the
		// event in this delivery is a duplicate, as it was in the first.
		f.stats.Redelivered++
		seen.delivery = f.delivery
		r := seen.reason
		if r == OK {
			weight, r = f.r.Check(e) // the weight (and a rule reloaded since)
		}
		f.stats.Events[r]++
		if r != OK {
			return 0, r
		}
		f.stats.Weight += weight
		return weight, OK
	}
	w, r := f.r.Check(e)
	if r == OK && f.stateful && e.User != "" {
		r = f.step(e, ts, idh)
	}
	if seen != nil {
		*seen = seenID{beacon: f.beacon, delivery: f.delivery, reason: r}
	}
	f.stats.Events[r]++
	if r != OK {
		return 0, r
	}
	f.stats.Weight += w
	return w, OK
}

// seen looks id up in its event-time bucket's set: found reports whether it
// was there; v is its entry (added when new), nil when it cannot be
// remembered (Stats.Unchecked).
func (f *Filter) seen(id string, h uint64, ts int64) (v *seenID, found bool) {
	ep := floorDiv(ts, f.bucketMs)
	if ep > f.maxID {
		f.stats.Unchecked++
		return nil, false
	}
	b := &f.ids[floorMod(ep, int64(len(f.ids)))]
	switch {
	case b.t == nil:
		b.t = newTable[seenID](f.maxIDs, f.maxIDs*idArenaBytes)
		b.epoch = ep
	case ep > b.epoch:
		b.t.reset()
		b.epoch = ep
	case ep < b.epoch:
		f.stats.Unchecked++
		return nil, false
	}
	v, found, ok := b.t.getString(id, h)
	if !ok {
		f.stats.Unchecked++
	}
	return v, found
}

// step applies the repeat and cap rules with e's key state.
func (f *Filter) step(e *schemas.Event, ts int64, idh uint64) Reason {
	ep := floorDiv(ts, f.windowMs)
	if ep > f.maxKey {
		f.stats.Untracked++
		return OK
	}
	w := &f.keys[floorMod(ep, int64(len(f.keys)))]
	switch {
	case w.cur == nil:
		w.cur, w.prev = newKeyTable(f.maxKeys), newKeyTable(f.maxKeys)
		w.epoch = ep
	case ep > w.epoch:
		w.reset()
		w.epoch = ep
	case ep < w.epoch:
		f.stats.Untracked++
		return OK
	}
	f.buf = AppendKey(f.buf[:0], e.User, e.Type, e.Item)
	k := w.get(f.buf, xxhash.Sum64(f.buf), &f.stats)
	if k == nil {
		f.stats.Untracked++
		return OK
	}
	return f.judge.Step(k, ts, idh)
}

// AppendKey appends the key the repeat and cap rules keep state by:
// user, type and item, separated by NUL (which none of them may hold).
func AppendKey(dst []byte, user, typ, item string) []byte {
	dst = append(dst, user...)
	dst = append(dst, 0)
	dst = append(dst, typ...)
	dst = append(dst, 0)
	return append(dst, item...)
}

// forget empties the tables, keeping their memory (for benchmarks).
func (f *Filter) forget() {
	for i := range f.ids {
		if t := f.ids[i].t; t != nil {
			t.reset()
		}
	}
	for i := range f.keys {
		if w := &f.keys[i]; w.cur != nil {
			w.reset()
		}
	}
}

// TakeStats returns the counts since the last call and resets them.
func (f *Filter) TakeStats() Stats {
	s := f.stats
	f.stats = Stats{}
	return s
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func floorMod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

func ceilDiv(a, b int64) int {
	return int((a + b - 1) / b)
}
