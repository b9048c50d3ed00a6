package trend

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/topk-dev/topk/internal/topn"
	"github.com/topk-dev/topk/schemas"
)

// SlotLen is the resolution of recent history: one 5-minute slot, the
// window the live share is measured over.
const SlotLen = 5 * time.Minute

// recentSlots is the number of 5-minute slots of the current hour kept per
// item (older history is hourly).
const recentSlots = int(time.Hour / SlotLen)

// Config configures a Scorer. DefaultConfig is the production setting; the
// meaning of each zero is written next to it, and Validate rejects what
// cannot work.
type Config struct {
	// HalfLife decays peaks: a peak of score s at time t0 is worth
	// s * 2^-((t-t0)/HalfLife) at t. Default 2 h; must be > 0.
	HalfLife time.Duration
	// FloorPerHour is the smoothing floor in events an hour: p_hat is at
	// least FloorPerHour * (5/60) / total. Default 3; must be > 0.
	FloorPerHour float64
	// MinCount is the minimum 5-minute count (events or users) before an
	// item scores. Default 20; 0 lets any count score.
	MinCount uint64
	// MinTrack is the minimum 5-minute count an input item needs to be
	// observed: one counted less is treated as absent from the input (at
	// most the list's cut), so it neither starts tracking nor takes a
	// slot. Default 2: most of a small list's 5-minute items are counted
	// once (one user), and tracking them churned every tracked slot in
	// minutes, evicting the history of the items that matter (see the
	// package doc). 0 and 1 observe every item; at most MinCount when
	// MinCount is set.
	MinTrack uint64
	// NoiseZ discounts the count by NoiseZ * sqrt(count) in the ratio.
	// Default 2; 0 is the plain score.
	NoiseZ float64
	// Enter is the score an item needs to enter the list, Leave the score
	// below which a listed item leaves it. Defaults 5e-4 and 2.5e-4; 0 <
	// Leave <= Enter.
	Enter, Leave float64
	// Size is the most items a list holds. Default 100.
	Size int
	// MaxItems caps the tracked items (the state) per list. Default 2,000;
	// must be >= Size.
	MaxItems int
	// Hours is the hourly history kept per item, the current hour
	// included. Default 169: the past week, back to the same hour a week
	// ago, so a weekly rhythm (#mondaymotivation at 8:00) is its own
	// baseline.
	Hours int
	// Seasonal compares an item with the same time last week instead of
	// its whole week: p_hat is its highest share in the current hour's
	// earlier slots, the last two hours, and the same hour a week ago and
	// the hour after it (Hours must reach back a week: 169). An item big
	// every Monday at 8:00 then trends on a Tuesday at 8:00. Default off:
	// the week's maximum, which also suppresses weekly rhythms but lets
	// nothing big-on-another-day trend.
	Seasonal bool
	// WarmUp is the history a list needs before it lists anything. Default
	// 20 minutes; 0 lists from the first tick.
	WarmUp time.Duration
	// Counts is the unit of the counts (schemas.CountsEvents or
	// CountsUsers; see the package doc). Default events; the streaming job
	// scores users.
	Counts string
}

// DefaultConfig is the production setting.
func DefaultConfig() Config {
	return Config{
		HalfLife:     2 * time.Hour,
		FloorPerHour: 3,
		MinCount:     20,
		MinTrack:     2,
		NoiseZ:       2,
		Enter:        5e-4,
		Leave:        2.5e-4,
		Size:         100,
		MaxItems:     2000,
		Hours:        169,
		WarmUp:       20 * time.Minute,
		Counts:       schemas.CountsEvents,
	}
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	var errs []error
	if c.HalfLife <= 0 {
		errs = append(errs, fmt.Errorf("half-life %s must be > 0", c.HalfLife))
	}
	if !(c.FloorPerHour > 0) || math.IsInf(c.FloorPerHour, 0) {
		errs = append(errs, fmt.Errorf("floor %v events/hour must be > 0", c.FloorPerHour))
	}
	if c.NoiseZ < 0 || math.IsNaN(c.NoiseZ) {
		errs = append(errs, fmt.Errorf("noise z %v must be >= 0", c.NoiseZ))
	}
	if !(c.Leave > 0) || !(c.Enter >= c.Leave) || math.IsInf(c.Enter, 0) {
		errs = append(errs, fmt.Errorf("thresholds enter %v / leave %v: want 0 < leave <= enter", c.Enter, c.Leave))
	}
	if c.MinCount > 0 && c.MinTrack > c.MinCount {
		errs = append(errs, fmt.Errorf("min track %d over min count %d: items that may score would not be tracked (lower the min track too)", c.MinTrack, c.MinCount))
	}
	if c.Size < 1 || c.Size > 1000 {
		errs = append(errs, fmt.Errorf("size %d outside [1, 1000]", c.Size))
	}
	if c.MaxItems < c.Size || c.MaxItems > 1_000_000 {
		errs = append(errs, fmt.Errorf("max items %d outside [size %d, 1000000]", c.MaxItems, c.Size))
	}
	if c.Hours < 1 || c.Hours > 24*31 {
		errs = append(errs, fmt.Errorf("hours %d outside [1, 744]", c.Hours))
	}
	if c.Seasonal && c.Hours < 169 {
		errs = append(errs, fmt.Errorf("seasonal needs hours >= 169 (a week back to the same hour), have %d", c.Hours))
	}
	if c.WarmUp < 0 {
		errs = append(errs, fmt.Errorf("warm-up %s is negative", c.WarmUp))
	}
	if c.Counts != schemas.CountsEvents && c.Counts != schemas.CountsUsers {
		errs = append(errs, fmt.Errorf("counts %q must be %q or %q", c.Counts, schemas.CountsEvents, schemas.CountsUsers))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("trend config: %w", err)
	}
	return nil
}

// Count is one item's count in a 5-minute window.
type Count struct {
	Item  string
	Count uint64
}

// Input is one 5-minute list: the window [AsOf-5m, AsOf), the total events
// it counted over all items, and its entries (any order).
type Input struct {
	AsOf  time.Time
	Total uint64
	Items []Count
}

// InputFromList takes a published 5-minute list's entries (count = the
// entry's upper bound) and total.
func InputFromList(l *schemas.List) Input {
	in := Input{AsOf: l.AsOf, Total: l.Total, Items: make([]Count, len(l.Items))}
	for i, e := range l.Items {
		in.Items[i] = Count{Item: e.Item, Count: e.Count}
	}
	return in
}

// ErrStale is returned for an input not after the last one observed.
var ErrStale = errors.New("trend: input not after the last one")

// ErrHistory wraps a History failure; the list is still scored without it.
var ErrHistory = errors.New("trend: history")

// History supplies older history from the exact tables.
type History interface {
	// HourlyShares returns, for each item found, its share of the list's
	// events in each whole hour of [from, to) that has an exact count
	// (count / the list's exact total of that hour), and every hour of
	// [from, to) whose total is known. items may be empty (coverage only).
	HourlyShares(ctx context.Context, typ, scope string, items []string, from, to time.Time) (shares map[string]map[time.Time]float64, hours []time.Time, err error)
}

// item is one tracked item's state.
type item struct {
	name   string
	recent [recentSlots]float32 // max share per 5-minute slot, ring by slot
	hourly []float32            // max share per hour, ring by hour
	peak   float64              // best live score, undecayed
	peakAt int64                // Unix ms of peak
	seen   int64                // Unix ms of the last input that listed it
	count  uint64               // count in the last input (0 when absent)
	listed bool                 // in the last published list
	// past caches the largest hourly share before hour pastHour (derived,
	// not stored): the hourly ring changes outside the current hour only
	// when the hour moves or on Seed.
	past     float32
	pastHour int64
	pastOK   bool
	// On a scorer without its rings (decoded from a minute state, split.go)
	// hourly is nil unless the item has its own ring (seeded this hour);
	// then cur is its share in the current hour and fromCut says that
	// its past hours are the cut's (it started tracking this hour), not
	// the rings value's. past is then always of the current hour.
	cur     float32
	fromCut bool
	// inOrder: in the scorer's order, as last decoded or encoded (sortedItems).
	inOrder bool
	// scratch of the current tick
	live, score, base float64
	present           bool // in the current input (Observe)
}

// Scorer is the trend state of one list. It is not safe for concurrent use.
type Scorer struct {
	cfg         Config
	typ, scope  string
	last        int64 // Unix ms of the last input; 0 before the first
	first       int64 // Unix ms of the earliest history (own or seeded)
	total       uint64
	cut         item // the list's cut share history (name unused)
	items       map[string]*item
	coverageSet bool // History coverage was asked for
	// slab is the pooled memory Decode gave the items' hourly rings, which
	// Release hands back (nil for a scorer not decoded).
	slab *[]float32
	// lazy: decoded from a minute state, without the items' rings, of
	// the rings value written at hour ringsHour (split.go).
	lazy      bool
	ringsHour int64
	// order is a decoded scorer's items as decoded, by name (some may
	// have left since): see sortedItems.
	order []*item
}

// New returns an empty scorer of list (typ, scope). It panics on an invalid
// Config (a programmer error: validate at construction).
func New(typ, scope string, cfg Config) *Scorer {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	sc := &Scorer{cfg: cfg, typ: typ, scope: scope, items: map[string]*item{}}
	sc.cut.hourly = make([]float32, cfg.Hours)
	return sc
}

// Len is the number of tracked items.
func (sc *Scorer) Len() int { return len(sc.items) }

func slotOf(ms int64) int64 { return floorDiv(ms, SlotLen.Milliseconds()) }
func hourOf(ms int64) int64 { return floorDiv(ms, time.Hour.Milliseconds()) }

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func mod(a int64, n int) int { return int(((a % int64(n)) + int64(n)) % int64(n)) }

// advance clears the ring slots that the clock passes from ms prev to now.
func (sc *Scorer) advance(it *item, prev, now int64) {
	if prev == 0 {
		return
	}
	ps, ns := slotOf(prev), slotOf(now)
	if ns-ps >= int64(recentSlots) {
		clear(it.recent[:])
	} else {
		for s := ps + 1; s <= ns; s++ {
			it.recent[mod(s, recentSlots)] = 0
		}
	}
	ph, nh := hourOf(prev), hourOf(now)
	if it.hourly == nil {
		return // no rings: the hour does not move (ErrRings)
	}
	if nh-ph >= int64(len(it.hourly)) {
		clear(it.hourly)
	} else {
		for h := ph + 1; h <= nh; h++ {
			it.hourly[mod(h, len(it.hourly))] = 0
		}
	}
}

// record notes share p at ms in the current slot and hour.
func record(it *item, ms int64, p float64) {
	f := float32(p)
	r := &it.recent[mod(slotOf(ms), recentSlots)]
	*r = max(*r, f)
	if it.hourly == nil {
		it.cur = max(it.cur, f)
		return
	}
	h := &it.hourly[mod(hourOf(ms), len(it.hourly))]
	*h = max(*h, f)
}

// baseline is the item's highest share before the current slot (recent
// ring) and before the current hour (hourly ring).
func (sc *Scorer) baseline(it *item) float64 {
	s := mod(slotOf(sc.last), recentSlots)
	var b float32
	for i, v := range it.recent {
		if i != s {
			b = max(b, v)
		}
	}
	return float64(max(b, sc.pastOf(it)))
}

// pastOf is the item's highest hourly share before the current hour (or,
// seasonal, the hours Config.Seasonal names), from its cache when that is
// of the current hour.
func (sc *Scorer) pastOf(it *item) float32 {
	if it.hourly == nil {
		return it.past // no rings: of the current hour (decodeMinute)
	}
	if cur := hourOf(sc.last); !it.pastOK || it.pastHour != cur {
		it.past = 0
		if sc.cfg.Seasonal {
			// The last two hours, and the same hour a week ago with the
			// hour after it.
			n := len(it.hourly)
			for _, back := range [...]int64{1, 2, int64(n) - 1, int64(n) - 2} {
				if back >= 1 && back < int64(n) {
					it.past = max(it.past, it.hourly[mod(cur-back, n)])
				}
			}
		} else {
			h := mod(cur, len(it.hourly))
			for i, v := range it.hourly {
				if i != h {
					it.past = max(it.past, v)
				}
			}
		}
		it.pastHour, it.pastOK = cur, true
	}
	return it.past
}

// Observe records one 5-minute list: every listed item's share goes into its
// current slot and hour, new items start tracking (with the list's cut as
// their past), and the list's cut is recorded. It returns the items that
// started tracking, for seeding from History. Inputs must come in as_of
// order: an input not after the last is ErrStale and changes nothing.
func (sc *Scorer) Observe(in Input) ([]string, error) {
	now := in.AsOf.UnixMilli()
	if sc.last != 0 && now <= sc.last {
		return nil, fmt.Errorf("%w: as_of %s, last %s", ErrStale, in.AsOf.UTC().Format(time.RFC3339), time.UnixMilli(sc.last).UTC().Format(time.RFC3339))
	}
	if sc.NeedsRings(now) {
		return nil, fmt.Errorf("%w: as_of %s starts another hour", ErrRings, in.AsOf.UTC().Format(time.RFC3339))
	}
	prev := sc.last
	sc.advance(&sc.cut, prev, now)
	for _, it := range sc.items {
		sc.advance(it, prev, now)
		it.count, it.present = 0, false
	}
	sc.last = now
	if sc.first == 0 || now < sc.first {
		sc.first = now
	}
	// One pass over the input: its sum, its smallest count observed and
	// the largest not (the cut), the tracked items it holds (which
	// eviction spares) and the items new to the scorer.
	var sum, below uint64
	least, fresh, observed := uint64(math.MaxUint64), 0, 0
	for _, c := range in.Items {
		sum += c.Count
		if c.Count < sc.cfg.MinTrack {
			below = max(below, c.Count)
			continue
		}
		observed++
		least = min(least, c.Count)
		if it := sc.items[c.Item]; it != nil {
			it.present = true
		} else if c.Count > 0 && c.Item != "" {
			fresh++
		}
	}
	// The total counts every event; a list without one (older producers)
	// falls back to the sum of its entries.
	total := max(in.Total, sum)
	sc.total = total
	// Make room for the new items at once: evicting one at a time costs a
	// scan of every tracked item per new item. Only when that room is too
	// small do the new items compete for it, biggest first: then, and
	// only then, the input is sorted (a list's input is up to 2,000
	// items, most of them tied at a user or two).
	items := in.Items
	if over := len(sc.items) + fresh - sc.cfg.MaxItems; over > 0 && sc.evict(over) < over {
		items = slices.Clone(in.Items)
		slices.SortFunc(items, func(a, b Count) int {
			if a.Count != b.Count {
				if a.Count > b.Count {
					return -1
				}
				return 1
			}
			return strings.Compare(a.Item, b.Item)
		})
	}
	var added []string
	for _, c := range items {
		if total == 0 || c.Count == 0 || c.Item == "" || c.Count < sc.cfg.MinTrack {
			continue
		}
		it := sc.items[c.Item]
		if it == nil {
			if len(sc.items) >= sc.cfg.MaxItems {
				continue // every tracked item is in this input and ranks higher
			}
			if sc.lazy {
				// Its past hours are the cut's, which do not change
				// within the hour: kept as a flag, not a copy.
				it = &item{name: c.Item, recent: sc.cut.recent, fromCut: true, cur: sc.cut.hourly[mod(hourOf(now), len(sc.cut.hourly))]}
			} else {
				it = &item{name: c.Item, hourly: slices.Clone(sc.cut.hourly), recent: sc.cut.recent}
			}
			// Its past is the cut's (the same ring): taken once per input,
			// not from 169 slots per new item (a list takes in hundreds a
			// minute).
			it.past, it.pastHour, it.pastOK = sc.pastOf(&sc.cut), hourOf(now), true
			sc.items[c.Item] = it
			added = append(added, c.Item)
		}
		it.count += c.Count
		it.seen = now
		record(it, now, float64(it.count)/float64(total))
	}
	// The cut: an item absent from this input had at most the last entry's
	// share, or none when the input holds every event; one counted under
	// MinTrack, its count.
	var cut uint64
	if observed > 0 && sum < total {
		cut = least
	}
	if cut = max(cut, below); cut > 0 && total > 0 {
		record(&sc.cut, now, float64(cut)/float64(total))
	}
	return added, nil
}

// evict drops up to n of the least relevant tracked items that are absent
// from the current input (not present): not listed first, then seen
// longest ago, then the lowest decayed score, then by name. It returns how
// many it dropped.
func (sc *Scorer) evict(n int) int {
	type cand struct {
		it    *item
		score float64
	}
	cs := make([]cand, 0, len(sc.items))
	for _, it := range sc.items {
		if !it.present {
			cs = append(cs, cand{it, sc.decayed(it)})
		}
	}
	// The n least relevant, selected rather than sorted: a list takes in
	// hundreds of new items a minute among 2,000 tracked.
	topn.Select(cs, n, func(a, b cand) int {
		switch {
		case a.it == b.it:
			return 0
		case less(a.it, a.score, b.it, b.score):
			return -1
		}
		return 1
	})
	n = min(n, len(cs))
	for _, c := range cs[:n] {
		delete(sc.items, c.it.name)
	}
	return n
}

// less orders eviction candidates: a before b when a is less relevant.
func less(a *item, as float64, b *item, bs float64) bool {
	if a.listed != b.listed {
		return !a.listed
	}
	if a.seen != b.seen {
		return a.seen < b.seen
	}
	if as != bs {
		return as < bs
	}
	return a.name < b.name
}

func (sc *Scorer) decayed(it *item) float64 {
	if it.peak == 0 {
		return 0
	}
	dt := float64(sc.last-it.peakAt) / float64(sc.cfg.HalfLife.Milliseconds())
	return it.peak * math.Exp2(-dt)
}

// Seed merges exact hourly shares into item's history: each hour in the
// past week before the current hour raises that hour's slot to the share.
// Unknown items and hours outside the ring are ignored, and so, on a
// scorer without its rings, are items tracked since before this hour
// (Step seeds only the items that start tracking).
func (sc *Scorer) Seed(item string, hourly map[time.Time]float64) {
	it := sc.items[item]
	if it == nil || sc.last == 0 {
		return
	}
	if it.hourly == nil {
		if !it.fromCut {
			return
		}
		// Its own ring from now on: the cut's past hours and its current
		// hour's share.
		it.hourly = slices.Clone(sc.cut.hourly)
		it.hourly[mod(hourOf(sc.last), len(it.hourly))] = it.cur
		it.fromCut, it.cur = false, 0
	}
	cur := hourOf(sc.last)
	for t, p := range hourly {
		h := hourOf(t.UnixMilli())
		if h >= cur || h <= cur-int64(len(it.hourly)) || !(p > 0) {
			continue
		}
		v := &it.hourly[mod(h, len(it.hourly))]
		*v = max(*v, float32(p))
	}
	it.pastOK = false
}

// SeedCoverage records that History holds hours from start on: the list's
// baseline reaches back to there (baseline_hours, warm-up).
func (sc *Scorer) SeedCoverage(start time.Time) {
	ms := start.UnixMilli()
	if sc.first == 0 || ms < sc.first {
		sc.first = ms
	}
}

// BaselineHours is how many whole hours of history the list's baselines
// draw on at the last input, at most Config.Hours-1 (the past hours the
// ring holds: 168, a week, by default).
func (sc *Scorer) BaselineHours() int {
	if sc.last == 0 {
		return 0
	}
	return int(min(int64(sc.cfg.Hours-1), (sc.last-sc.first)/time.Hour.Milliseconds()))
}

// warm reports whether the history covers the warm-up.
func (sc *Scorer) warm() bool {
	return sc.last != 0 && time.Duration(sc.last-sc.first)*time.Millisecond >= sc.cfg.WarmUp
}

// Live is the live score of count c of total t against baseline share
// pHat under cfg (the package doc's S with the floor, minimum volume and
// noise guard). It is exported for tools; tests compute it independently.
func Live(cfg Config, c, t uint64, pHat float64) float64 {
	if t == 0 || c == 0 || c < cfg.MinCount {
		return 0
	}
	p := float64(c) / float64(t)
	floor := cfg.FloorPerHour * (float64(SlotLen) / float64(time.Hour)) / float64(t)
	pHat = max(pHat, floor)
	lo := float64(c) - cfg.NoiseZ*math.Sqrt(float64(c))
	if lo <= 0 {
		return 0
	}
	r := lo / float64(t) / pHat
	if r <= 1 {
		return 0
	}
	return p * math.Log(r)
}

// List scores every tracked item at the last input and returns the trending
// list: items whose score max(live, decayed peak) reaches Enter (or stays at
// or above Leave when listed before), best first, at most Size. During the
// warm-up it is empty and no peaks are recorded. Version is as_of in Unix
// seconds. It records peaks and the listed set (hysteresis), so it is
// called once per Observe (Step does both).
func (sc *Scorer) List() *schemas.Trending {
	out := &schemas.Trending{
		Type: sc.typ, Scope: sc.scope, Window: schemas.WindowTrending,
		AsOf:          time.UnixMilli(sc.last).UTC(),
		BaselineHours: sc.BaselineHours(),
		Counts:        sc.cfg.Counts,
		Version:       sc.last / 1000,
		Items:         []schemas.TrendEntry{},
	}
	if sc.last == 0 {
		return out
	}
	warm := sc.warm()
	floor := sc.cfg.FloorPerHour * (float64(SlotLen) / float64(time.Hour))
	var cands []*item
	for _, it := range sc.items {
		b := sc.baseline(it)
		it.base = max(b*float64(sc.total), floor)
		it.live = Live(sc.cfg, it.count, sc.total, b)
		it.score = 0
		if warm {
			// A new peak is the live score itself (decayed by nothing).
			d := sc.decayed(it)
			if it.live > 0 && it.live >= d {
				it.peak, it.peakAt, d = it.live, sc.last, it.live
			}
			it.score = max(it.live, d)
		}
		if it.score >= sc.cfg.Enter || (it.listed && it.score >= sc.cfg.Leave) {
			cands = append(cands, it)
		}
		it.listed = false
	}
	slices.SortFunc(cands, func(a, b *item) int {
		if a.score != b.score {
			if a.score > b.score {
				return -1
			}
			return 1
		}
		if a.name < b.name {
			return -1
		}
		return 1
	})
	if len(cands) > sc.cfg.Size {
		cands = cands[:sc.cfg.Size]
	}
	for i, it := range cands {
		it.listed = true
		e := schemas.TrendEntry{
			Rank: i + 1, Item: it.name, Score: it.score, Count5m: it.count, Baseline5m: it.base,
			PeakScore: it.peak,
		}
		if it.peak > 0 {
			e.PeakAt = time.UnixMilli(it.peakAt).UTC()
		}
		out.Items = append(out.Items, e)
	}
	return out
}

// Step observes one input, seeds the items that started tracking (and, on
// the first input, the list's coverage) from h when it is not nil, and
// returns the list. A History failure is returned wrapped in ErrHistory
// together with the list, which is scored without it.
func (sc *Scorer) Step(ctx context.Context, in Input, h History) (*schemas.Trending, error) {
	added, err := sc.Observe(in)
	if err != nil {
		return nil, err
	}
	var herr error
	if h != nil {
		cur := time.UnixMilli(hourOf(sc.last) * time.Hour.Milliseconds()).UTC()
		from := cur.Add(-time.Duration(sc.cfg.Hours-1) * time.Hour)
		// The first call also learns the list's coverage (hours with a
		// known total); later calls only seed new items.
		if !sc.coverageSet || len(added) > 0 {
			shares, hours, err := h.HourlyShares(ctx, sc.typ, sc.scope, added, from, cur)
			if err != nil {
				herr = fmt.Errorf("%w: %s/%s: %w", ErrHistory, sc.typ, sc.scope, err)
			} else {
				sc.coverageSet = true
				for _, t := range hours {
					sc.SeedCoverage(t)
				}
				for it, m := range shares {
					sc.Seed(it, m)
				}
			}
		}
	}
	return sc.List(), herr
}
