package stitch

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/state"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/timers"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/exact/store"
	"github.com/topk-dev/topk/transforms/preagg"
	"github.com/topk-dev/topk/transforms/summary"
)

var (
	skipped   = beam.NewCounter("topk", "stitch_skipped")
	published = beam.NewCounter("topk", "stitch_lists")
)

func init() {
	register.DoFn7x1[context.Context, beam.EventTime, state.Provider, timers.Provider, string, []byte, func(beam.EventTime, string, []byte), error](&openFn{})
	register.Function3x1[string, []byte, func(string, []byte), error](byListFn)
	register.DoFn5x1[context.Context, typex.Window, string, func(*[]byte) bool, func(string, []byte), error](&listsFn{})
	register.Emitter2[string, []byte]()
	register.Emitter3[beam.EventTime, string, []byte]()
	register.Iter1[[]byte]()
}

// OpenParts turns minute summaries (KV<"type\x00scope\x00part", []byte>, one
// per key and minute, timestamped in their minute) into open parts:
// KV<same key, EncodeHours(open hours)> timestamped at each minute's end -
// 1 ms, in the global window.
func OpenParts(s beam.Scope, minutes beam.PCollection, cfg Config) beam.PCollection {
	s = s.Scope("stitch.OpenParts")
	if err := cfg.Validate(); err != nil {
		panic(fmt.Sprintf("stitch: %v", err))
	}
	idle := cfg.IdleLimit
	if idle == 0 {
		idle = 26 * time.Hour
	}
	g := beam.WindowInto(s, window.NewGlobalWindows(), minutes)
	return beam.ParDo(s, &openFn{
		Store:   cfg.Store,
		IdleMs:  idle.Milliseconds(),
		TTLMs:   cfg.ExactUntilTTL.Milliseconds(),
		Hours:   state.MakeMapState[int64, []byte]("hours"),
		Minutes: state.MakeMapState[int64, []byte]("minutes"),
		Minute:  timers.InEventTime("minute"),
	}, g)
}

type openFn struct {
	Store         StoreConfig
	IdleMs, TTLMs int64
	Hours         state.Map[int64, []byte]
	Minutes       state.Map[int64, []byte]
	Minute        timers.EventTime

	st     *store.Store
	mu     sync.Mutex
	e      time.Time
	eRead  time.Time
	hasAny bool
}

func (fn *openFn) Setup(ctx context.Context) error {
	st, err := fn.Store.Open(ctx)
	if err != nil {
		return err
	}
	fn.st = st
	return nil
}

func (fn *openFn) Teardown() {
	if fn.st != nil {
		fn.st.Close()
	}
}

func (fn *openFn) exactUntil(ctx context.Context) (time.Time, error) {
	fn.mu.Lock()
	defer fn.mu.Unlock()
	if fn.hasAny && time.Since(fn.eRead) < time.Duration(fn.TTLMs)*time.Millisecond {
		return fn.e, nil
	}
	e, err := fn.st.ExactUntil(ctx)
	if err != nil {
		return time.Time{}, err
	}
	fn.e, fn.eRead, fn.hasAny = e, time.Now(), true
	return e, nil
}

const minuteMs = int64(time.Minute / time.Millisecond)

// setTimer arms the timer of the minute ending at endMs, one tag per minute
// so minutes never overwrite each other's timers. It fires when the
// watermark reaches endMs, after every minute summary of the minute
// (timestamped up to endMs - 1 ms) has arrived, and holds the output at
// endMs - 1 ms, inside the minute's window. (Firing at endMs - 1 ms fired
// on Prism before the minute's summary, also stamped endMs - 1 ms, was
// processed: the minute was reported twice, once without its data.)
func (fn *openFn) setTimer(tp timers.Provider, endMs int64) {
	fn.Minute.Set(tp, time.UnixMilli(endMs), timers.WithTag(strconv.FormatInt(endMs, 10)),
		timers.WithOutputTimestamp(time.UnixMilli(endMs-1)))
}

// ProcessElement merges a minute summary into its minute entry (a late pane
// of a minute merges with what is there) and arms the minute's timer.
func (fn *openFn) ProcessElement(ctx context.Context, ts beam.EventTime, sp state.Provider, tp timers.Provider, key string, sm []byte, _ func(beam.EventTime, string, []byte)) error {
	m := floor(int64(ts), minuteMs)
	old, ok, err := fn.Minutes.Get(sp, m)
	if err != nil {
		return err
	}
	if ok {
		merged, err := mergeTwo(old, sm)
		if err != nil {
			return fmt.Errorf("stitch %q: %w", key, err)
		}
		sm = merged
	}
	if err := fn.Minutes.Put(sp, m, sm); err != nil {
		return err
	}
	fn.setTimer(tp, m+minuteMs)
	return nil
}

// OnTimer folds the minutes before the timer's minute end into their hours,
// drops the exact hours and emits the open hours.
func (fn *openFn) OnTimer(ctx context.Context, ts beam.EventTime, sp state.Provider, tp timers.Provider, key string, tc timers.Context, emit func(beam.EventTime, string, []byte)) error {
	if tc.Family != fn.Minute.Family {
		return nil
	}
	endMs, err := strconv.ParseInt(tc.Tag, 10, 64)
	if err != nil {
		return fmt.Errorf("stitch: timer tag %q: %w", tc.Tag, err)
	}
	e, err := fn.exactUntil(ctx)
	if err != nil {
		return err
	}
	hours, err := readMap(sp, &fn.Hours)
	if err != nil {
		return err
	}
	minutes, err := readMap(sp, &fn.Minutes)
	if err != nil {
		return err
	}
	if e.IsZero() {
		// Nothing is exact yet: keep no more than a day and an hour open
		// (Lists publishes nothing without exact_until).
		e = time.UnixMilli(floor(endMs, time.Hour.Milliseconds()) - 25*time.Hour.Milliseconds())
	}
	changed, delH, delM, open, err := Fold(hours, minutes, time.UnixMilli(endMs), e)
	if err != nil {
		return fmt.Errorf("stitch %q: %w", key, err)
	}
	for _, m := range delM {
		if err := fn.Minutes.Remove(sp, m); err != nil {
			return err
		}
	}
	for _, h := range delH {
		if err := fn.Hours.Remove(sp, h); err != nil {
			return err
		}
	}
	for h, v := range changed {
		if err := fn.Hours.Put(sp, h, v); err != nil {
			return err
		}
	}
	emit(beam.EventTime(endMs-1), key, EncodeHours(open))
	// Re-arm for the next minute while open hours remain, so the list of the
	// next minute has this partition even without new data.
	if len(open) > 0 {
		last := open[len(open)-1].Start.UnixMilli() + time.Hour.Milliseconds()
		if next := endMs + minuteMs; next <= last+fn.IdleMs {
			fn.setTimer(tp, next)
		}
	}
	return nil
}

func readMap(sp state.Provider, m *state.Map[int64, []byte]) (map[int64][]byte, error) {
	keys, _, err := m.Keys(sp)
	if err != nil {
		return nil, err
	}
	out := make(map[int64][]byte, len(keys))
	for _, k := range keys {
		v, ok, err := m.Get(sp, k)
		if err != nil {
			return nil, err
		}
		if ok {
			out[k] = v
		}
	}
	return out, nil
}

func mergeTwo(a, b []byte) ([]byte, error) {
	var mg summary.Merger
	if err := mg.AddEncoded(a); err != nil {
		return nil, err
	}
	if err := mg.AddEncoded(b); err != nil {
		return nil, err
	}
	return mg.Result().MarshalBinary()
}

// Lists stitches open parts (OpenParts' output) with the exact tables into
// the 24h and all lists: KV<list key, list JSON> in fixed 1-minute windows
// (as_of = the window's end), for publish.Lists.
func Lists(s beam.Scope, open beam.PCollection, cfg Config) beam.PCollection {
	s = s.Scope("stitch.Lists")
	if err := cfg.Validate(); err != nil {
		panic(fmt.Sprintf("stitch: %v", err))
	}
	w := beam.WindowInto(s, window.NewFixedWindows(time.Minute), open)
	byList := beam.ParDo(s, byListFn, w)
	return beam.ParDo(s, &listsFn{Store: cfg.Store, K: cfg.K, Margin: cfg.Margin}, beam.GroupByKey(s, byList))
}

// byListFn re-keys an open part by its list and prefixes the value with its
// partition (a uvarint), as merge's dropPartitionFn.
func byListFn(key string, v []byte, emit func(string, []byte)) error {
	typ, scope, part, err := preagg.SplitKey(key)
	if err != nil {
		return err
	}
	b := binary.AppendUvarint(make([]byte, 0, len(v)+3), uint64(part))
	emit(typ+"\x00"+scope, append(b, v...))
	return nil
}

type listsFn struct {
	Store     StoreConfig
	K, Margin int

	st *store.Store
}

func (fn *listsFn) Setup(ctx context.Context) error {
	st, err := fn.Store.Open(ctx)
	if err != nil {
		return err
	}
	fn.st = st
	return nil
}

func (fn *listsFn) Teardown() {
	if fn.st != nil {
		fn.st.Close()
	}
}

func (fn *listsFn) ProcessElement(ctx context.Context, w typex.Window, key string, values func(*[]byte) bool, emit func(string, []byte)) error {
	iw, ok := w.(window.IntervalWindow)
	if !ok {
		return fmt.Errorf("stitch: list %q in a %T, want an interval window", key, w)
	}
	typ, scope, found := cutKey(key)
	if !found {
		return fmt.Errorf("stitch: list key %q", key)
	}
	parts, err := decodeParts(values)
	if err != nil {
		return fmt.Errorf("stitch %q: %w", key, err)
	}
	asOf := iw.End.ToTime().UTC()
	lists, err := Build(ctx, fn.st, typ, scope, asOf, parts, fn.K, fn.Margin)
	if err != nil {
		return fmt.Errorf("stitch %q: %w", key, err)
	}
	skipped.Inc(ctx, int64(2-len(lists)))
	for _, l := range lists {
		out, err := schemas.MarshalList(l)
		if err != nil {
			return fmt.Errorf("stitch %q: %w", key, err)
		}
		published.Inc(ctx, 1)
		emit(l.Key().String(), out)
	}
	return nil
}

func decodeParts(values func(*[]byte) bool) ([]Part, error) {
	var parts []Part
	var b []byte
	for values(&b) {
		p, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, fmt.Errorf("partition prefix: bad uvarint")
		}
		hours, err := DecodeHours(b[n:])
		if err != nil {
			return nil, err
		}
		parts = append(parts, Part{Partition: int(p), Hours: hours})
	}
	return parts, nil
}

// Build reads the exact side of the 24h and all windows of one list from st
// and stitches each with the open parts of the minute ending at asOf. A
// window is left out (not published) when exact_until is unset, when the
// store's 24-hour window does not end at exact_until, or when exact_until is
// more than 25 hours behind asOf (OpenParts no longer holds its open hours).
func Build(ctx context.Context, st *store.Store, typ, scope string, asOf time.Time, parts []Part, k, margin int) ([]*schemas.List, error) {
	e, err := st.ExactUntil(ctx)
	if err != nil {
		return nil, err
	}
	if e.IsZero() || e.After(asOf) || asOf.Sub(e) > 25*time.Hour {
		return nil, nil
	}
	open, err := OpenSummary(parts, e)
	if err != nil {
		return nil, err
	}
	var out []*schemas.List
	for _, w := range []schemas.Window{schemas.Window24h, schemas.WindowAll} {
		cands, until, all, err := st.Candidates(ctx, typ, scope, w)
		if err != nil {
			return nil, err
		}
		if w == schemas.Window24h {
			end, err := st.End24h(ctx)
			if err != nil {
				return nil, err
			}
			if !end.Equal(e) || (len(cands) > 0 && !until.Equal(e)) {
				continue
			}
		} else if !until.Equal(e) {
			continue
		}
		ex := Exact{Until: e, Candidates: cands, All: all, Totals: func(items []string) (map[string]int64, error) {
			return st.Totals(ctx, typ, scope, w, items)
		}}
		l, err := Stitch(schemas.ListKey{Type: typ, Scope: scope, Window: w}, asOf, ex, open, k, margin)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

func cutKey(key string) (typ, scope string, ok bool) {
	for i := 0; i < len(key); i++ {
		if key[i] == 0 {
			return key[:i], key[i+1:], true
		}
	}
	return "", "", false
}
