package trend

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// # The state in two parts
//
// An item's hourly ring (Config.Hours shares, a week) is most of its
// state (about 700 of 800 bytes with a full week), and within an hour only
// its current hour's slot changes: the past hours are read once per hour,
// for the item's past (Scorer.pastOf), and a new item's ring is the cut's.
// So trendbeam keeps two values per list:
//
//   - the rings: MarshalBinary's full state, written when the scorer holds
//     its rings (a new list, and the first score of each hour), and read
//     only when a score starts a new hour (NeedsRings, LoadRings);
//   - the minute state (MarshalSplit, format 2 below), written at every
//     score: what changes within an hour, with each item's current-hour
//     share and its past, and where its ring is: in the rings value, the
//     cut's (it started tracking this hour), or its own (it was seeded
//     this hour: the ring is in the minute state).
//
// A scorer decoded from a minute state (Decode) has no rings: it scores
// every input of the same hour exactly as the scorer it was encoded from
// (TestSplitStateEveryScore), and Observe refuses an input of another hour
// (ErrRings) until LoadRings has given it its rings. With a full week the
// per-minute state is a seventeenth of the whole state's bytes and its
// round trip a sixth to an eighth of the time (BenchmarkStateRoundTrip).
//
// Format 2 (the minute state) is format 1 (encode.go) with magic "tr"
// 0x02, a varint after the cut's rings, ringsHour (the hour, Unix ms / 1h,
// of the rings value), and items whose flags byte has, besides bit 0
// (listed), bit 1 (its ring is the cut's) and bit 2 (its ring is its own
// and follows), and whose hourly ring is replaced by two float32 (IEEE 754
// bits, little-endian): its share in the current hour and its past
// (pastOf), then its ring only with bit 2.
var magic2 = []byte{'t', 'r', 2}

// ErrRings is Observe's error for an input of another hour than the last
// on a scorer decoded from a minute state without its rings: call
// LoadRings first (NeedsRings says when).
var ErrRings = errors.New("trend: hourly rings not loaded")

const (
	itemListed  = 1
	itemFromCut = 2
	itemOwnRing = 4
)

// NeedsRings reports whether scoring an input at asOf needs the rings
// value: the scorer has no rings and asOf starts another hour.
func (sc *Scorer) NeedsRings(asOfMs int64) bool {
	return sc.lazy && hourOf(asOfMs) != hourOf(sc.last)
}

// MarshalSplit encodes the minute state (format 2) and, when the scorer
// holds its rings, the rings value (MarshalBinary's); rings is nil when
// the rings value last written still holds (the scorer was decoded from
// a minute state of this hour). Write both, or minute alone when rings is
// nil.
func (sc *Scorer) MarshalSplit() (minute, rings []byte, err error) {
	ringsHour := sc.ringsHour
	if !sc.lazy {
		if rings, err = sc.MarshalBinary(); err != nil {
			return nil, nil, err
		}
		ringsHour = hourOf(sc.last)
	}
	hours := len(sc.cut.hourly)
	cur := mod(hourOf(sc.last), hours)
	b := make([]byte, 0, 64+len(sc.items)*96)
	b = sc.appendHeader(append(b, magic2...))
	b = binary.AppendVarint(b, ringsHour)
	b = binary.AppendUvarint(b, uint64(len(sc.items)))
	for _, it := range sc.sortedItems() {
		b = binary.AppendUvarint(b, uint64(len(it.name)))
		b = append(b, it.name...)
		var f byte
		if it.listed {
			f |= itemListed
		}
		share := it.cur
		switch {
		case !sc.lazy: // every ring goes into the rings value
			share = it.hourly[cur]
		case it.hourly != nil:
			f |= itemOwnRing
			share = it.hourly[cur]
		case it.fromCut:
			f |= itemFromCut
		}
		b = appendItem(append(b, f), it)
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(share))
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(sc.pastOf(it)))
		if f&itemOwnRing != 0 {
			b = appendRing(b, it.hourly)
		}
	}
	return b, rings, nil
}

// sortedItems is the tracked items by name (the formats' order). A
// scorer keeps its items' order as last decoded or encoded (order,
// inOrder): those still tracked are in order already, so only the items
// that started tracking since are sorted and merged in, not all of them
// (a full sort of 2,000 names was a quarter of the round trip).
func (sc *Scorer) sortedItems() []*item {
	byName := func(a, b *item) int {
		switch {
		case a.name < b.name:
			return -1
		case a.name > b.name:
			return 1
		}
		return 0
	}
	old := make([]*item, 0, len(sc.items))
	for _, it := range sc.order {
		if sc.items[it.name] == it {
			old = append(old, it)
		}
	}
	if len(old) == len(sc.items) {
		sc.order = old
		return old
	}
	var fresh []*item
	for _, it := range sc.items {
		if !it.inOrder {
			fresh = append(fresh, it)
			it.inOrder = true
		}
	}
	slices.SortFunc(fresh, byName)
	out := make([]*item, 0, len(sc.items))
	for len(old) > 0 && len(fresh) > 0 {
		if old[0].name < fresh[0].name {
			out, old = append(out, old[0]), old[1:]
		} else {
			out, fresh = append(out, fresh[0]), fresh[1:]
		}
	}
	out = append(append(out, old...), fresh...)
	// A scorer encoded again later (one that stays live, as the tests'
	// in-memory scorers do) sorts only the items that start tracking
	// from here on.
	sc.order = out
	return out
}

// decodeMinute rebuilds a scorer from a minute state (format 2, magic
// read): without rings when the state's ring length is cfg.Hours;
// otherwise, as format 1 does, with the hourly history dropped (empty
// rings, no need of the rings value).
func decodeMinute(sc *Scorer, r *reader) (*Scorer, error) {
	cfg := sc.cfg
	hours := sc.readHeader(r)
	keep := hours == cfg.Hours
	sc.lazy = keep
	sc.ringsHour = r.varint("rings hour")
	if r.err == nil && keep && sc.ringsHour != hourOf(sc.last) {
		r.fail("rings hour is not the last input's")
	}
	n := r.uvarint("items")
	if r.err == nil && n > uint64(len(r.b)) {
		r.fail("item count")
	}
	curHour := hourOf(sc.last)
	// One allocation for the items, not one each (n is bounded by the
	// bytes left, checked above).
	slab := make([]item, min(n, uint64(cfg.MaxItems)))
	sc.items = make(map[string]*item, len(slab))
	sc.order = make([]*item, 0, len(slab))
	var prev string
	for i := uint64(0); i < n && r.err == nil; i++ {
		name := r.name(i, prev)
		prev = name
		var it *item
		if int(i) < len(slab) {
			it = &slab[i]
		} else {
			it = new(item) // past the cap: read and dropped
		}
		it.name, it.inOrder = name, true
		f := r.bytes(1, "item flags")
		var fl byte
		if r.err == nil {
			fl = f[0]
			if fl&^(itemListed|itemFromCut|itemOwnRing) != 0 || fl&(itemFromCut|itemOwnRing) == itemFromCut|itemOwnRing {
				r.fail("item flags")
			}
			it.listed = fl&itemListed != 0
			it.fromCut = fl&itemFromCut != 0
		}
		r.readItem(it)
		share, past := r.float32("current share"), r.float32("past")
		it.cur, it.past, it.pastHour, it.pastOK = share, past, curHour, true
		if fl&itemOwnRing != 0 {
			it.hourly = make([]float32, cfg.Hours)
			r.ring(hours, it.hourly, "hourly", -1)
		}
		if !keep {
			// The rings are dropped (another ring length): empty, the
			// current hour's share and the past with them.
			it.hourly, it.fromCut, it.cur = make([]float32, cfg.Hours), false, 0
			it.pastOK = false
		}
		if r.err == nil {
			if len(sc.items) >= cfg.MaxItems {
				continue // a smaller cap than the state was written with
			}
			sc.items[name] = it
			sc.order = append(sc.order, it)
		}
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	if r.err != nil {
		return nil, r.err
	}
	return sc, nil
}

// float32 reads a share: IEEE 754 bits, non-negative and finite.
func (r *reader) float32(what string) float32 {
	b := r.bytes(4, what)
	if r.err != nil {
		return 0
	}
	f := math.Float32frombits(binary.LittleEndian.Uint32(b))
	if !(f >= 0) || math.IsInf(float64(f), 0) {
		r.fail(what + ": not a share")
		return 0
	}
	return f
}

// LoadRings gives a scorer decoded from a minute state its hourly rings
// from the rings value (MarshalSplit's rings, written at the hour of the
// minute state's rings): each item's ring is the rings value's, the cut's
// (it started tracking this hour) or its own, with its current hour's
// share. A scorer with its rings is left as it is. When rings cannot be
// read (missing, corrupt, of another hour) or lacks an item, that item's
// past becomes the cut's (as for an item starting to track) and the
// error says so: the list goes on with a lower baseline for those items
// rather than stopping.
func (sc *Scorer) LoadRings(rings []byte) error {
	if !sc.lazy {
		return nil
	}
	var err error
	var full *Scorer
	if len(rings) == 0 {
		err = fmt.Errorf("%w: no rings value", ErrBadState)
	} else if full, err = Decode(sc.typ, sc.scope, sc.cfg, rings); err == nil && (full.lazy || hourOf(full.last) != sc.ringsHour) {
		err = fmt.Errorf("%w: rings value of another hour", ErrBadState)
		full.Release()
		full = nil
	} else if err != nil {
		full = nil
	}
	hours := len(sc.cut.hourly)
	cur := mod(sc.ringsHour, hours)
	missing, slab := 0, make([]float32, len(sc.items)*hours)
	for _, it := range sc.items {
		if it.hourly != nil {
			continue // its own
		}
		var src []float32
		if !it.fromCut && full != nil {
			if f := full.items[it.name]; f != nil {
				src = f.hourly
			} else {
				missing++
			}
		}
		if src == nil {
			src = sc.cut.hourly
		}
		it.hourly, slab = slab[:hours:hours], slab[hours:]
		copy(it.hourly, src)
		it.hourly[cur] = it.cur
		it.fromCut, it.cur = false, 0
	}
	if full != nil {
		full.Release()
	}
	sc.lazy = false
	if err == nil && missing > 0 {
		err = fmt.Errorf("%w: %d items not in the rings value", ErrBadState, missing)
	}
	return err
}
