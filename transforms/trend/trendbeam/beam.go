// Package trendbeam runs the trend scorer (transforms/trend) in the
// streaming job: a stateful DoFn keyed by list (type, scope) that consumes
// the fast path's 5-minute lists, KV<"type:scope:5m", schemas.List JSON>
// (merge.Lists' output), and emits trending lists, KV<"type:scope:trending",
// schemas.Trending JSON>, for publish.Lists.
//
// Lists are scored in as_of order whatever order they arrive in: each one
// waits in map state under its as_of and an event-time timer per as_of (tag
// = as_of) fires when the watermark passes it, scoring every waiting list up
// to that time, oldest first. A list older than the last one scored (late)
// is dropped and counted (topk/trend_late). The scorer's state is one value
// per list (trend.Scorer's binary format): read and written once per timer
// firing, about 1.6 MB at the default cap of 2,000 tracked items
// (BENCHMARKS.md), so the default cadence is one list a minute
// (Config.Every), not every 10 s.
//
// With Config.Store set, items that start being tracked are seeded from the
// exact tables (trend.StoreHistory): one point read per new item.
package trendbeam

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/state"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/timers"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/log"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/exact/store"
	"github.com/topk-dev/topk/transforms/stitch"
	"github.com/topk-dev/topk/transforms/trend"
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
	register.DoFn6x1[context.Context, state.Provider, timers.Provider, string, []byte, func(beam.EventTime, string, []byte), error](&scoreFn{})
	register.Emitter3[beam.EventTime, string, []byte]()
}

// Trending turns the fast path's 5-minute lists (KV<list key, list JSON>,
// any windowing) into trending lists: KV<"type:scope:trending", JSON>, one
// per list and Every, timestamped at as_of - 1 ms in the global window.
// Lists of other windows are ignored.
func Trending(s beam.Scope, lists5m beam.PCollection, cfg Config) beam.PCollection {
	s = s.Scope("trend.Trending")
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	keyed := beam.ParDo(s, &byListFn{EveryMs: cfg.Every.Milliseconds()}, lists5m)
	g := beam.WindowInto(s, window.NewGlobalWindows(), keyed)
	return beam.ParDo(s, &scoreFn{
		Trend:        cfg.Trend,
		Store:        cfg.Store,
		HistoryTTLMs: cfg.HistoryTTL.Milliseconds(),
		Scorer:       state.MakeValueState[[]byte]("scorer"),
		Pending:      state.MakeMapState[int64, []byte]("pending"),
		Tick:         timers.InEventTime("tick"),
	}, g)
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
	emit(beam.EventTime(ms-1), l.Type+":"+l.Scope, blob)
	return nil
}

type scoreFn struct {
	Trend        trend.Config
	Store        stitch.StoreConfig
	HistoryTTLMs int64
	Scorer       state.Value[[]byte]
	Pending      state.Map[int64, []byte]
	Tick         timers.EventTime

	st   *store.Store
	hist trend.History
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
func (fn *scoreFn) ProcessElement(ctx context.Context, sp state.Provider, tp timers.Provider, key string, blob []byte, _ func(beam.EventTime, string, []byte)) error {
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
	keys, _, err := fn.Pending.Keys(sp)
	if err != nil {
		return err
	}
	keys = slices.DeleteFunc(keys, func(k int64) bool { return k > upTo })
	if len(keys) == 0 {
		return nil
	}
	slices.Sort(keys)
	typ, scope, ok := strings.Cut(key, ":")
	if !ok {
		return fmt.Errorf("trend: key %q is not type:scope", key)
	}
	raw, ok, err := fn.Scorer.Read(sp)
	if err != nil {
		return err
	}
	var sc *trend.Scorer
	if ok && len(raw) > 0 {
		if sc, err = trend.Decode(typ, scope, fn.Trend, raw); err != nil {
			// A state this code cannot read (a format change) starts over
			// rather than stopping the job.
			log.Errorf(ctx, "trend %s: state dropped: %v", key, err)
			sc = nil
		}
	}
	if sc == nil {
		sc = trend.New(typ, scope, fn.Trend)
	}
	for _, ms := range keys {
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
		out, err := sc.Step(ctx, trend.InputFromList(l), fn.hist)
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
		out.Rules = l.Rules // scored from counts made with these rules
		js, err := schemas.MarshalTrending(out)
		if err != nil {
			return fmt.Errorf("trend %s: %w", key, err)
		}
		emit(beam.EventTime(ms-1), out.Key().String(), js)
		scored.Inc(ctx, 1)
	}
	enc, err := sc.MarshalBinary()
	if err != nil {
		return err
	}
	return fn.Scorer.Write(sp, enc)
}
