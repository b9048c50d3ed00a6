// Package trendbeam runs the trend scorer (transforms/trend) in the
// streaming job: a stateful DoFn keyed by list (type, scope) that consumes
// either the pre-aggregation's distinct-users tallies (by users, the
// streaming job's default: see Trending) or the fast path's 5-minute lists,
// KV<"type:scope:5m", schemas.List JSON> (merge.Lists' output; by events),
// and emits trending lists, KV<"type:scope:trending", schemas.Trending
// JSON>, for publish.Lists.
//
// By events:
// Lists are scored in as_of order whatever order they arrive in: each one
// waits in map state under its as_of and an event-time timer per as_of (tag
// = as_of) fires when the watermark passes it, scoring every waiting list up
// to that time, oldest first. A list older than the last one scored (late)
// is dropped and counted (topk/trend_late). The scorer's state is two
// values per list (trend.Scorer.MarshalSplit): the minute state, written
// at every timer firing (about 85 kB at the default cap of 2,000 tracked
// items with a week of history), and the items' hourly rings, about 1.4
// MB, read only by the first firing of an hour and written by it: within
// an hour only the current hour's share of an item changes, and it is in
// the minute state (BENCHMARKS.md, "Trending's state in two parts"). What
// a firing writes it also keeps in the process's memory, and the next
// firing reads Beam state only when that copy is not current (see "The
// cache" below OnTimer). The default cadence is one list a minute
// (Config.Every).
//
// With Config.Store set, items that start being tracked are seeded from the
// exact tables (trend.StoreHistory): one point read per new item.
//
// Cost, by users: it follows the counted events more than the lists. Each
// counted event makes one (item, user) pair in each of its scopes; each
// pre-aggregation bundle ships, per (list, bucket), a tally of every pair
// and of the users of each partition's preagg.Config.UsersTop biggest
// items, and a small list's partitions see fewer items than that in a
// bundle, so nearly all of its pairs are shipped (at 100k events/s with
// every scope, about 290 tallies a second, 22 bytes per counted event:
// topk/trend_tallies and topk/trend_tally_bytes count them).
// Each tally crosses the runner four times: the emit, this step's input,
// its append to Pieces and the read when the list is next scored. Per
// (list, Every) come the pieces' union into panes, the 5 minutes' union
// and the score; both unions are cut to Trend.MaxItems items as they are
// made (users.UniteTop: an item that cannot stay is never given an entry,
// and most of a busy list's items are seen once in a minute), and the 5
// minutes' union leaves out the items of fewer than Trend.MinTrack users
// (users.UniteTopMin), which the scorer would not track. Measured in steady state on 2 cores (BENCHMARKS.md,
// "Trending against the event rate"): 18-27% of the fast path's CPU from
// 100k to 400k events/s, much of it building, moving and uniting the
// tallies; +28% in a replay of a minute of the scale issue's load (1M
// events/s, 20 countries with regions) against +6% with 8 countries
// ("Trending at the scale issue's load, in event time"): the share follows
// the small lists' pairs, not the event rate.
package trendbeam

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/state"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/timers"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/log"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/topk-dev/topk/internal/stagemetrics"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/exact/store"
	"github.com/topk-dev/topk/transforms/stitch"
	"github.com/topk-dev/topk/transforms/trend"
	"github.com/topk-dev/topk/transforms/users"
)

// Config configures Trending.
type Config struct {
	// Trend is the scorer's configuration.
	Trend trend.Config
	// Every is the cadence: only 5-minute lists whose as_of is a multiple of
	// Every are scored. Default 1 minute; a multiple of 10 s (the 5m list's
	// period), at most 5 minutes.
	Every time.Duration
	// Store is the exact tables for older history; zero (no project) scores
	// with the job's own history only.
	Store stitch.StoreConfig
	// HistoryTTL is how long a list's exact hourly totals are reused. Zero:
	// 10 minutes.
	HistoryTTL time.Duration
	// Bucket is the users tallies' event-time bucket (preagg.Config.Bucket;
	// 0: 10 s), and Rules the version of the rules behind them, which the
	// lists scored by users carry (those scored by events carry their 5m
	// list's).
	Bucket time.Duration
	Rules  string
}

func (c Config) bucket() time.Duration {
	if c.Bucket > 0 {
		return c.Bucket
	}
	return 10 * time.Second
}

// pane is the stretch of event time one united users tally in the
// scorer's state covers: the largest that divides both Every and 5 minutes
// (so every scored window is a union of whole panes) and is a multiple of
// the bucket (so a bucket's tally lies in one pane); the bucket itself if
// there is none. With the defaults, a minute: a score unites 5 tallies, not
// 30 buckets'.
func (c Config) pane() time.Duration {
	g := gcd(c.Every, schemas.Window5m.Length())
	if b := c.bucket(); g <= 0 || g%b != 0 {
		return b
	}
	return g
}

func gcd(a, b time.Duration) time.Duration {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// DefaultConfig scores once a minute with trend.DefaultConfig and no exact
// tables.
func DefaultConfig() Config {
	return Config{Trend: trend.DefaultConfig(), Every: time.Minute}
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	var errs []error
	if err := c.Trend.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Every < 10*time.Second || c.Every > 5*time.Minute || c.Every%(10*time.Second) != 0 {
		errs = append(errs, fmt.Errorf("every %s must be a multiple of 10s in [10s, 5m]", c.Every))
	}
	if c.Store != (stitch.StoreConfig{}) {
		if err := c.Store.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.HistoryTTL < 0 {
		errs = append(errs, fmt.Errorf("history ttl %s is negative", c.HistoryTTL))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("trendbeam: %w", err)
	}
	return nil
}

var (
	scored     = beam.NewCounter("topk", "trend_lists")
	late       = beam.NewCounter("topk", "trend_late")
	skipped    = beam.NewCounter("topk", "trend_skipped")
	historyErr = beam.NewCounter("topk", "trend_history_errors")
)

func init() {
	register.DoFn3x1[string, []byte, func(beam.EventTime, string, []byte), error](&byListFn{})
	register.Function4x0(tallyByListFn)
	register.DoFn6x1[context.Context, state.Provider, timers.Provider, string, []byte, func(beam.EventTime, string, []byte), error](&scoreFn{})
	register.Emitter3[beam.EventTime, string, []byte]()
}

// Trending turns the fast path's 5-minute lists (KV<list key, list JSON>,
// any windowing) into trending lists: KV<"type:scope:trending", JSON>, one
// per list and Every, timestamped at as_of - 1 ms in the global window.
// Lists of other windows are ignored.
//
// With cfg.Trend.Counts = schemas.CountsUsers, items are scored by distinct
// trusted users instead of events, from tallies alone (lists5m is then
// ignored and may be the zero PCollection): the pre-aggregation's
// distinct-users tallies (preagg.ApplyWithUsers: KV<"type\x00scope",
// users.Tally>, timestamped with their bucket), appended to the list's
// state as they come; a tally arms a timer at the first Every boundary at
// or after its bucket's end, and when the watermark passes it the tallies
// that came are united into one per pane (Config.pane: a minute by
// default), and the panes of the 5 minutes before are united and scored.
// An item's count is then its distinct trusted users there, the total the distinct (user, item) pairs
// of the whole list. Only items among the biggest of some bucket
// (preagg.Config.UsersTop per partition and bucket) have a users sketch:
// the warm items. With events, tallies is ignored (it may be the zero
// PCollection).
//
// Why not join the tallies with the 5m lists, or unite each bucket's in a
// GroupByKey first: on Prism, either topology lost top-list data under CPU
// load (TestReplayScopes with two busy loops beside it, 2026-12-01: the
// Flatten 3 runs of 3, the GroupByKey 2 of 2; this one 0 of 4, and the
// pipeline before the tallies 0 of 1). The loss in this topology, found
// 2026-12-02, came from Prism splitting slow bundles of the stateful
// windows (internal/prismopt; now turned off), most likely the others'
// too, but they were not re-run for loss since: the GroupByKey was
// re-measured for CPU only, and was not cheaper (BENCHMARKS.md, "Prism's
// dynamic splitting off"). The loss was in the top lists, upstream of
// this step, so the test to re-run before changing this topology is that
// one.
func Trending(s beam.Scope, lists5m, tallies beam.PCollection, cfg Config) beam.PCollection {
	s = s.Scope("trend.Trending")
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	var g beam.PCollection
	if cfg.Trend.Counts == schemas.CountsUsers {
		// Each tally (one per list, bucket and pre-aggregation bundle) is
		// appended to the list's state as it comes, and united into its
		// pane's tally when the list is next scored. Uniting them first
		// in a GroupByKey of the bucket windows saved a quarter of the
		// CPU, but on Prism it lost top-list data under CPU load (see the
		// doc comment above), as a Flatten with the lists did.
		g = beam.WindowInto(s, window.NewGlobalWindows(), beam.ParDo(s, tallyByListFn, tallies))
	} else {
		keyed := beam.ParDo(s, &byListFn{EveryMs: cfg.Every.Milliseconds()}, lists5m)
		g = beam.WindowInto(s, window.NewGlobalWindows(), keyed)
	}
	return beam.ParDo(s, newScoreFn(cfg), g)
}

// newScoreFn is the scorer's DoFn for cfg (validated).
func newScoreFn(cfg Config) *scoreFn {
	id := make([]byte, 8)
	if _, err := crand.Read(id); err != nil {
		panic(err)
	}
	return &scoreFn{
		ID:           hex.EncodeToString(id),
		Trend:        cfg.Trend,
		Store:        cfg.Store,
		HistoryTTLMs: cfg.HistoryTTL.Milliseconds(),
		EveryMs:      cfg.Every.Milliseconds(),
		BucketMs:     cfg.bucket().Milliseconds(),
		PaneMs:       cfg.pane().Milliseconds(),
		Rules:        cfg.Rules,
		Scorer:       state.MakeValueState[[]byte]("scorer"),
		Rings:        state.MakeValueState[[]byte]("rings"),
		Pending:      state.MakeMapState[int64, []byte]("pending"),
		Tallies:      state.MakeMapState[int64, []byte]("tallies"),
		Pieces:       state.MakeBagState[[]byte]("pieces"),
		Gen:          state.MakeValueState[int64]("gen"),
		Tick:         timers.InEventTime("tick"),
	}
}

// Elements of the scorer's input are tagged by their first byte: a 5-minute
// list, or a bucket's users tally (then 8 bytes of bucket start, Unix ms,
// big-endian, before the tally).
const (
	tagList  = 'L'
	tagTally = 'U'
)

// tallyByListFn keys a users tally by "type:scope", tagged with its
// bucket.
func tallyByListFn(et beam.EventTime, key string, tally []byte, emit func(beam.EventTime, string, []byte)) {
	typ, scope, _ := strings.Cut(key, "\x00")
	v := make([]byte, 0, 9+len(tally))
	v = append(v, tagTally)
	v = binary.BigEndian.AppendUint64(v, uint64(int64(et)))
	emit(et, typ+":"+scope, append(v, tally...))
}

// byListFn keeps the 5-minute lists on the cadence and keys them by
// "type:scope", timestamped at as_of - 1 ms.
type byListFn struct {
	EveryMs int64
}

func (fn *byListFn) ProcessElement(key string, blob []byte, emit func(beam.EventTime, string, []byte)) error {
	if !strings.HasSuffix(key, ":"+string(schemas.Window5m)) {
		return nil
	}
	l, err := schemas.UnmarshalList(blob)
	if err != nil {
		return fmt.Errorf("trend %s: %w", key, err)
	}
	ms := l.AsOf.UnixMilli()
	if ms%fn.EveryMs != 0 {
		return nil
	}
	emit(beam.EventTime(ms-1), l.Type+":"+l.Scope, append([]byte{tagList}, blob...))
	return nil
}

type scoreFn struct {
	// ID names this transform's lists in the process-wide cache.
	ID           string
	Trend        trend.Config
	Store        stitch.StoreConfig
	HistoryTTLMs int64
	EveryMs      int64
	BucketMs     int64
	PaneMs       int64
	Rules        string
	// Scorer is the scorer's minute state and Rings its whole state as
	// of the first score of the hour (trend.Scorer.MarshalSplit): a
	// score reads Rings only when it starts a new hour.
	Scorer  state.Value[[]byte]
	Rings   state.Value[[]byte]
	Pending state.Map[int64, []byte]
	// Tallies holds, with users counts, one united users.Tally per pane
	// (Config.pane; key: its start, Unix ms) of the next lists' 5 minutes,
	// trimmed to Trend.MaxItems items.
	Tallies state.Map[int64, []byte]
	// Pieces holds the tallies arrived since Tallies was last brought up
	// to date (8 bytes of bucket start, then the tally): an arriving
	// tally is appended, not united into its pane, so a pane's tally is
	// decoded, united and encoded once per timer (or per maxPieceBytes
	// or maxPieces arrived), not once per pre-aggregation bundle.
	Pieces state.Bag[[]byte]
	// Gen is the generation of Scorer and Tallies: a new random number
	// each time a call writes them, which the cache's copy must match
	// (see cached).
	Gen  state.Value[int64]
	Tick timers.EventTime

	// added is, per list, what this instance appended to Pieces since it
	// last united that list's: see addTally.
	added map[string]added
	st    *store.Store
	hist  trend.History
}

func (fn *scoreFn) Setup(ctx context.Context) error {
	if fn.Store == (stitch.StoreConfig{}) {
		return nil
	}
	st, err := fn.Store.Open(ctx)
	if err != nil {
		return fmt.Errorf("trend: %w", err)
	}
	fn.st = st
	fn.hist = &trend.StoreHistory{Store: st, TTL: time.Duration(fn.HistoryTTLMs) * time.Millisecond}
	return nil
}

func (fn *scoreFn) Teardown() {
	if fn.st != nil {
		fn.st.Close()
	}
}

// ProcessElement parks a list under its as_of and arms that as_of's timer.
func (fn *scoreFn) ProcessElement(ctx context.Context, sp state.Provider, tp timers.Provider, key string, v []byte, _ func(beam.EventTime, string, []byte)) error {
	if len(v) == 0 {
		return fmt.Errorf("trend %s: empty element", key)
	}
	if v[0] == tagTally {
		bucket, err := fn.addTally(ctx, sp, key, v[1:])
		if err != nil {
			return err
		}
		// Score at the first cadence boundary at or after the bucket's end.
		end := bucket + fn.BucketMs
		at := (end + fn.EveryMs - 1) / fn.EveryMs * fn.EveryMs
		fn.Tick.Set(tp, time.UnixMilli(at), timers.WithTag(strconv.FormatInt(at, 10)), timers.WithOutputTimestamp(time.UnixMilli(at-1)))
		return nil
	}
	blob := v[1:]
	l, err := schemas.UnmarshalList(blob)
	if err != nil {
		return fmt.Errorf("trend %s: %w", key, err)
	}
	ms := l.AsOf.UnixMilli()
	if err := fn.Pending.Put(sp, ms, blob); err != nil {
		return err
	}
	fn.Tick.Set(tp, time.UnixMilli(ms), timers.WithTag(strconv.FormatInt(ms, 10)), timers.WithOutputTimestamp(time.UnixMilli(ms-1)))
	return nil
}

// OnTimer scores every parked list up to the timer's as_of, oldest first,
// and emits their trending lists.
func (fn *scoreFn) OnTimer(ctx context.Context, sp state.Provider, tp timers.Provider, key string, tc timers.Context, emit func(beam.EventTime, string, []byte)) error {
	if tc.Family != fn.Tick.Family {
		return nil
	}
	upTo, err := strconv.ParseInt(tc.Tag, 10, 64)
	if err != nil {
		return fmt.Errorf("trend: timer tag %q: %w", tc.Tag, err)
	}
	typ, scope, ok := strings.Cut(key, ":")
	if !ok {
		return fmt.Errorf("trend: key %q is not type:scope", key)
	}
	byUsers := fn.Trend.Counts == schemas.CountsUsers
	keys := []int64{upTo} // by users: the timer's as_of, from the tallies
	if !byUsers {
		if keys, _, err = fn.Pending.Keys(sp); err != nil {
			return err
		}
		keys = slices.DeleteFunc(keys, func(k int64) bool { return k > upTo })
		if len(keys) == 0 {
			return nil
		}
		slices.Sort(keys)
	}
	c, err := fn.lock(ctx, sp, key)
	if err != nil {
		return err
	}
	saved := false
	defer c.done(&saved)
	raw := c.minute
	if raw == nil {
		if raw, _, err = fn.Scorer.Read(sp); err != nil {
			return err
		}
	}
	var sc *trend.Scorer
	if len(raw) > 0 {
		if sc, err = trend.Decode(typ, scope, fn.Trend, raw); err != nil {
			// A state this code cannot read (a format change) starts
			// over rather than stopping the job.
			log.Errorf(ctx, "trend %s: state dropped: %v", key, err)
			sc = nil
		}
	}
	if sc == nil {
		sc = trend.New(typ, scope, fn.Trend)
	}
	if sc.NeedsRings(keys[len(keys)-1]) {
		// The first score of an hour: the items' past hours (see
		// trend.MarshalSplit). keys are in order, so the last one says
		// whether any input starts a new hour.
		rings, _, err := fn.Rings.Read(sp)
		if err != nil {
			return err
		}
		if err := sc.LoadRings(rings); err != nil {
			log.Errorf(ctx, "trend %s: %v", key, err)
		}
	}
	var fresh map[int64]*users.Tally
	if byUsers {
		if fresh, err = fn.unitePieces(ctx, sp, key, c); err != nil {
			return err
		}
	}
	for _, ms := range keys {
		var in trend.Input
		rules := fn.Rules
		if byUsers {
			in = fn.usersInput(ctx, time.UnixMilli(ms), c.panes, fresh)
		} else {
			blob, ok, err := fn.Pending.Get(sp, ms)
			if err != nil {
				return err
			}
			if err := fn.Pending.Remove(sp, ms); err != nil {
				return err
			}
			if !ok {
				continue
			}
			l, err := schemas.UnmarshalList(blob)
			if err != nil {
				return fmt.Errorf("trend %s: %w", key, err)
			}
			in, rules = trend.InputFromList(l), l.Rules
		}
		out, err := sc.Step(ctx, in, fn.hist)
		switch {
		case errors.Is(err, trend.ErrStale):
			late.Inc(ctx, 1)
			continue
		case errors.Is(err, trend.ErrHistory):
			historyErr.Inc(ctx, 1)
			log.Warnf(ctx, "%v", err)
		case err != nil:
			return err
		}
		if out == nil {
			skipped.Inc(ctx, 1)
			continue
		}
		out.Rules = rules // scored from counts made with these rules
		js, err := schemas.MarshalTrending(out)
		if err != nil {
			return fmt.Errorf("trend %s: %w", key, err)
		}
		emit(beam.EventTime(ms-1), out.Key().String(), js)
		scored.Inc(ctx, 1)
	}
	if byUsers {
		// The next list (upTo + Every) needs buckets from upTo + Every - 5m.
		if err := fn.dropTallies(sp, c, upTo+fn.EveryMs-window5m); err != nil {
			return err
		}
	}
	minute, rings, err := sc.MarshalSplit()
	sc.Release() // its rings' memory goes to the next list's Decode
	if err != nil {
		return err
	}
	if rings != nil {
		if err := fn.Rings.Write(sp, rings); err != nil {
			return err
		}
	}
	if err := fn.Scorer.Write(sp, minute); err != nil {
		return err
	}
	if err := fn.save(sp, c); err != nil {
		return err
	}
	// An exact-size copy: MarshalSplit's buffer has room to spare (half
	// as much again at 2,000 items), which the cache would hold for
	// every list.
	c.minute, saved = bytes.Clone(minute), true
	return nil
}

// # The cache
//
// Reading a list's state at every score was most of trending's state
// traffic: the scorer's minute state (about 85 kB at the default cap) and
// the tallies of the five panes it scores, every minute for every list,
// each read a round trip to the runner. So a process keeps, per
// (transform, list), what it last wrote: the minute state and every
// pane's tally, encoded. Beam state still gets every write (it is what
// another worker or a restarted one starts from); the cache saves the
// reads. Whether it is current is told by a generation, a random number
// written to Gen with every change of Scorer or Tallies: a call reads Gen
// first and uses its copy only when the generations match; otherwise
// (another worker scored the list meanwhile, the process restarted, or a
// bundle's writes were discarded by the runner after this call returned)
// it reads Beam state as before. A call that fails drops the list's copy;
// a generation is random so that one a discarded bundle left in the cache
// never matches what Beam state reaches without it. This is the sliding
// windows' scheme (transforms/slide, beam.go); fault_test.go checks it
// here with failed writes and discarded bundles.
//
// Memory: the bytes, not a decoded scorer (about 0.45 MB in memory at the
// default cap of 2,000 items, against 85 kB encoded: 303 lists of decoded
// scorers held 0.34 GB more RSS, for a decode that is about 2% of a
// replay's CPU). So it is bounded by the lists a process scores, not by
// items or events (BENCHMARKS.md, "Trending's state kept in memory").

// cached is a list's copy of its state, locked by the call that uses it.
type cached struct {
	mu  sync.Mutex
	gen int64
	// ok: panes (and minute when not nil) are Beam state as of
	// generation gen.
	ok bool
	// minute is Scorer's value; nil: read Scorer.
	minute []byte
	// panes is Tallies: pane start (Unix ms) -> its users tally, encoded.
	panes map[int64][]byte
}

var cache sync.Map // scoreFn.ID + "\x00" + list key -> *cached

var cacheMisses = beam.NewCounter("topk", "trend_cache_misses")

// lock returns the list's copy, locked and current with Beam state: read
// from there (every pane; the minute state is read by the caller) when
// the generations differ.
func (fn *scoreFn) lock(ctx context.Context, sp state.Provider, key string) (*cached, error) {
	v, _ := cache.LoadOrStore(fn.ID+"\x00"+key, &cached{})
	c := v.(*cached)
	c.mu.Lock()
	gen, _, err := fn.Gen.Read(sp)
	if err != nil {
		c.mu.Unlock()
		return nil, err
	}
	if c.ok && c.gen == gen {
		return c, nil
	}
	cacheMisses.Inc(ctx, 1)
	stagemetrics.StateCacheMiss(stagemetrics.StageTrending)
	c.ok, c.minute, c.panes = false, nil, nil
	keys, _, err := fn.Tallies.Keys(sp)
	if err != nil {
		c.mu.Unlock()
		return nil, err
	}
	panes := make(map[int64][]byte, len(keys))
	for _, k := range keys {
		b, ok, err := fn.Tallies.Get(sp, k)
		if err != nil {
			c.mu.Unlock()
			return nil, err
		}
		if ok {
			panes[k] = b
		}
	}
	c.ok, c.gen, c.panes = true, gen, panes
	return c, nil
}

// save writes a new generation to Gen and c, after the call's other
// writes.
func (fn *scoreFn) save(sp state.Provider, c *cached) error {
	gen := mrand.Int64()
	if err := fn.Gen.Write(sp, gen); err != nil {
		return err
	}
	c.gen = gen
	return nil
}

// done unlocks c after a call, dropping the copy unless the call saved:
// a call that failed may have changed it part way, and the runner
// discards its bundle's writes.
func (c *cached) done(saved *bool) {
	if !*saved {
		c.ok, c.minute, c.panes = false, nil, nil
	}
	c.mu.Unlock()
}

var window5m = schemas.Window5m.Length().Milliseconds()

// maxPieceBytes and maxPieces bound the tallies Pieces holds: at that
// many bytes or pieces, the next arrival brings Tallies up to date at
// once, so the state stays bounded while the watermark (and so the timer)
// does not move. Bytes, because uniting is a pane's read, decode, trim,
// encode and write whatever the pieces: a bound of 64 pieces made a busy
// list (a global list at 200k events/s got on the order of 200 pieces a minute
// while the pre-aggregation sent a tally per summary flush; at 100k
// about 45, 4 MB) do that three times a minute instead of once at its
// score.
// (Variables so that a test can lower them.)
var (
	maxPieceBytes = 16 << 20
	maxPieces     = 1024
)

// added is what this instance appended to a list's Pieces since it last
// united them.
type added struct{ pieces, bytes int }

// addTally appends a bucket's users tally (8 bytes of bucket start, then
// the tally) to Pieces, uniting the pieces into Tallies when this
// instance has appended maxPieceBytes or maxPieces of the list's since it
// last united them.
//
// The counts are the instance's, in memory, not state: a count in value
// state cost a read and a write (three state requests, each a round
// trip to the runner) for every tally, as much as the append. Where a
// list moves to another worker, a worker restarts or a bundle that united
// the pieces is retried, the counts restart from zero while the state
// does not, so Pieces may hold up to the bound more for each such event
// before the list is next scored: bounded, not exact.
func (fn *scoreFn) addTally(ctx context.Context, sp state.Provider, key string, v []byte) (bucket int64, err error) {
	if len(v) < 8 {
		return 0, fmt.Errorf("trend %s: short tally element", key)
	}
	bucket = int64(binary.BigEndian.Uint64(v))
	if err := fn.Pieces.Add(sp, v); err != nil {
		return 0, err
	}
	if fn.added == nil {
		fn.added = map[string]added{}
	}
	a := fn.added[key]
	a.pieces++
	a.bytes += len(v)
	fn.added[key] = a
	if a.pieces >= maxPieces || a.bytes >= maxPieceBytes {
		c, err := fn.lock(ctx, sp, key)
		if err != nil {
			return 0, err
		}
		saved := false
		defer c.done(&saved)
		if _, err := fn.unitePieces(ctx, sp, key, c); err != nil {
			return 0, err
		}
		if err := fn.save(sp, c); err != nil {
			return 0, err
		}
		saved = true
	}
	return bucket, nil
}

// unitePieces unites the tallies in Pieces into their panes' tallies in
// Tallies (each pane read, united and written once) and empties Pieces.
// It returns the panes it wrote, decoded, so a score right after need not
// decode them again. A piece or pane this code cannot read or unite with
// (a format or precision change) is dropped with an error in the log
// rather than stopping the job.
func (fn *scoreFn) unitePieces(ctx context.Context, sp state.Provider, key string, c *cached) (map[int64]*users.Tally, error) {
	delete(fn.added, key)
	pieces, ok, err := fn.Pieces.Read(sp)
	if err != nil || !ok || len(pieces) == 0 {
		return nil, err
	}
	// Each pane's pieces, then its tally as it was, united at once:
	// UniteTop gives an entry only to the items that can stay among the
	// pane's MaxItems (most of a busy list's are seen once in a minute).
	byPane := map[int64][][]byte{}
	var panes []int64
	for _, v := range pieces {
		if len(v) < 8 {
			return nil, fmt.Errorf("trend %s: short tally piece", key)
		}
		bucket := int64(binary.BigEndian.Uint64(v))
		pane := bucket - mod(bucket, fn.PaneMs)
		if byPane[pane] == nil {
			panes = append(panes, pane)
		}
		byPane[pane] = append(byPane[pane], v[8:])
	}
	out := make(map[int64]*users.Tally, len(panes))
	for _, pane := range panes {
		ps := byPane[pane]
		old, ok := c.panes[pane]
		if ok {
			ps = append(ps, old)
		}
		t := users.NewTally()
		for i, err := range t.UniteTop(ps, fn.Trend.MaxItems) {
			if err == nil {
				continue
			}
			if ok && i == len(ps)-1 {
				log.Errorf(ctx, "trend %s: users of pane %d dropped: %v", key, pane, err)
			} else {
				log.Errorf(ctx, "trend %s: a users tally of pane %d dropped: %v", key, pane, err)
			}
		}
		enc, err := t.MarshalBinary()
		if err != nil {
			return nil, err
		}
		if err := fn.Tallies.Put(sp, pane, enc); err != nil {
			return nil, err
		}
		c.panes[pane] = enc
		out[pane] = t
	}
	return out, fn.Pieces.Clear(sp)
}

// usersInput is the scorer's input for the 5 minutes before asOf from the
// panes' tallies (the list's cached copy of Tallies): each item's distinct
// trusted users, over the list's distinct (user, item) pairs. A pane in
// fresh (unitePieces' result) is taken from there, not decoded; it is used
// up.
func (fn *scoreFn) usersInput(ctx context.Context, asOf time.Time, panes map[int64][]byte, fresh map[int64]*users.Tally) trend.Input {
	to := asOf.UnixMilli()
	// The fresh panes (decoded already) first, then the others from their
	// bytes with the cut to MaxItems and MinTrack (UniteTopMin: only
	// items that can make it get an entry; an item counted under
	// MinTrack over the 5 minutes, most of a small list's, does not,
	// unless a fresh pane gave it one), in pane order.
	minTrack := fn.Trend.MinTrack
	u := users.NewTally()
	var raws [][]byte
	var rawPanes, in5m []int64
	for b := range panes {
		if b >= to-window5m && b < to {
			in5m = append(in5m, b)
		}
	}
	slices.Sort(in5m)
	for _, b := range in5m {
		if t := fresh[b]; t != nil {
			delete(fresh, b)
			if err := u.Absorb(t); err != nil { // see unitePieces: skipped, not fatal
				log.Errorf(ctx, "trend: users of pane %d skipped: %v", b, err)
			}
			continue
		}
		raws, rawPanes = append(raws, panes[b]), append(rawPanes, b)
	}
	errs, left := u.UniteTopMin(raws, fn.Trend.MaxItems, minTrack)
	for i, err := range errs {
		if err != nil {
			log.Errorf(ctx, "trend: users of pane %d skipped: %v", rawPanes[i], err)
		}
	}
	in := trend.Input{AsOf: asOf, Items: make([]trend.Count, 0, len(u.Items))}
	// Items under MinTrack go in as one entry with their largest count:
	// the scorer treats them as absent, at most that count (its cut). The
	// total is what the scorer would take with every item in (the pairs'
	// estimate, at least the items' sum). Those UniteTopMin left out are
	// counted by their counts, at least their users (an item counted
	// under MinTrack 2 is one user in one pane: exact).
	below := trend.Count{Count: left.Max} // no name: never tracked
	sum := left.Sum
	for it, e := range u.Items {
		n := e.Users.Estimate()
		sum += n
		switch {
		case n == 0:
		case n < fn.Trend.MinTrack:
			if n > below.Count {
				below = trend.Count{Item: it, Count: n}
			}
		default:
			in.Items = append(in.Items, trend.Count{Item: it, Count: n})
		}
	}
	if below.Count > 0 {
		in.Items = append(in.Items, below)
	}
	in.Total = max(u.Pairs.Estimate(), sum)
	return in
}

// mod is a mod b in [0, b) for negative a too.
func mod(a, b int64) int64 { return (a%b + b) % b }

// dropTallies removes the panes before from, from Tallies and the list's
// copy of it.
func (fn *scoreFn) dropTallies(sp state.Provider, c *cached, from int64) error {
	for b := range c.panes {
		if b < from {
			if err := fn.Tallies.Remove(sp, b); err != nil {
				return err
			}
			delete(c.panes, b)
		}
	}
	return nil
}
