package slide

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/state"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/timers"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/topk-dev/topk/internal/stagemetrics"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/summary"
)

// Beam wrapper. Where the state lives, and why:
//
// The windows of a partition are one State, keyed in Beam by the partition
// (P keys, not lists x P), so the timers that slide them fire P times per
// slide, whatever the number of lists, and a slide's work is the merges of
// the lists that have data. The State itself lives in memory, in a
// process-wide cache keyed by (pipeline, partition): Beam state calls are
// synchronous round trips to the runner (PLATFORM.md), so the aggregators,
// which change every slide, are never written to Beam state.
//
// What Beam state holds is what the State cannot be rebuilt without: the
// panes (one summary set per bucket and per closed minute, written once when
// it arrives or closes, removed when it leaves the longest window), the last
// slide fired, and a generation, a new random number on every change. Every
// call first compares the cached State's generation with Beam's: equal, the
// cache is current; different or missing (another worker owned the key, the
// process restarted, a failed bundle's changes were rolled back by the
// runner), the State is rebuilt from the panes in Beam state and its
// aggregators re-merged at the next slide. A call that fails drops the
// cached State (it may have changed part way, and the runner retries the
// input), and a generation is random so that one a failed bundle left in
// the cache never matches what Beam state reaches without it
// (fault_test.go: a retry after a failed state write, and a bundle
// processed elsewhere meanwhile, each count a bucket once; a retried
// slide emits its window, where the failed one's "fired" left in the
// cache made it a slide armed twice, and its lists were never
// published). So the result is what Beam state says, on any runner: on
// Dataflow and Flink the runner's durable, checkpointed state, restored
// with the source position after a failure; on Prism, in-memory state that
// lives as long as the job (Config.Durable = false skips the pane writes
// where nothing survives a crash anyway).

// BeamConfig configures Windows.
type BeamConfig struct {
	Config
	// Shards splits each window's results into this many groups by list
	// hash: the list merge's parallelism.
	Shards int
	// Minutes also emits every closed minute (and late additions to one)
	// per (list, partition) for the long windows.
	Minutes bool
	// Durable keeps the panes in Beam state so that a State lost with its
	// worker is rebuilt; false keeps only the generation and the last slide.
	Durable bool
}

// Validate reports a configuration that cannot work.
func (c BeamConfig) Validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	if c.Shards < 1 || c.Shards > 1024 {
		return fmt.Errorf("slide: shards %d outside [1, 1024]", c.Shards)
	}
	if c.Minutes && !hasLevel(c.Config, time.Minute) {
		return fmt.Errorf("slide: minutes wanted but no window slides by the minute")
	}
	return nil
}

func hasLevel(c Config, d time.Duration) bool {
	for _, w := range c.Windows {
		if w.Period == d {
			return true
		}
	}
	return false
}

// ResultKey is the key of a window's results: "window\x00shard".
func ResultKey(window string, shard int) string { return window + "\x00" + strconv.Itoa(shard) }

// Windows slides cfg's windows over bucket sets: buckets is a
// PCollection<KV<string, []byte>> keyed by partition, each value a summary
// set (list key -> the list's summary of one bucket in that partition),
// timestamped within its bucket (counter.Buckets' output, late panes
// included). It returns results, a PCollection<KV<string, []byte>> keyed by
// ResultKey whose values are summary sets (list key -> the list's window
// summary in the partition, cut to PartLimit and MinCount), timestamped at the
// slide's end - 1 ms in the global window (window them by the bucket: the
// slide's end is the list's as_of); and, with cfg.Minutes, minutes: a
// PCollection<KV<"type\x00scope\x00partition", []byte summary>> of closed
// minutes and late additions to them, timestamped in their minute (what
// stitch.OpenParts reads).
func Windows(s beam.Scope, buckets beam.PCollection, cfg BeamConfig) (results, minutes beam.PCollection) {
	s = s.Scope("slide.Windows")
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	g := beam.WindowInto(s, window.NewGlobalWindows(), buckets)
	return beam.ParDo2(s, newWindowsFn(cfg), g)
}

// newWindowsFn is the DoFn of cfg: its fields are what reaches the
// workers, so every field of Config must be one (config rebuilds it;
// TestWindowsFnConfig checks that nothing is lost on the way).
func newWindowsFn(cfg BeamConfig) *windowsFn {
	id := make([]byte, 8)
	if _, err := rand.Read(id); err != nil {
		panic(err)
	}
	fn := &windowsFn{
		ID:       hex.EncodeToString(id),
		BucketMs: cfg.Bucket.Milliseconds(),
		Limit:    cfg.Limit,
		Parts:    cfg.Parts,
		UpperN:   cfg.UpperN,
		AggN:     cfg.AggN,
		Shards:   cfg.Shards,
		Minutes:  cfg.Minutes,
		Durable:  cfg.Durable,
		Panes:    state.MakeMapState[int64, []byte]("panes"),
		Gen:      state.MakeValueState[int64]("gen"),
		Fired:    state.MakeValueState[int64]("fired"),
		Slide:    timers.InEventTime("slide"),
	}
	for _, w := range cfg.Windows {
		fn.Windows = append(fn.Windows, windowSpec{Name: w.Name, LengthMs: w.Length.Milliseconds(), PeriodMs: w.Period.Milliseconds(), MinCount: w.MinCount})
	}
	return fn
}

type windowSpec struct {
	Name               string
	LengthMs, PeriodMs int64
	MinCount           uint64
}

func init() {
	register.DoFn8x1[context.Context, beam.EventTime, state.Provider, timers.Provider, string, []byte, func(beam.EventTime, string, []byte), func(beam.EventTime, string, []byte), error](&windowsFn{})
	register.Emitter3[beam.EventTime, string, []byte]()
}

var (
	slides      = beam.NewCounter("topk", "slides")
	rebuilds    = beam.NewCounter("topk", "slide_rebuilds")
	latePanes   = beam.NewCounter("topk", "slide_late_buckets")
	mergesCount = beam.NewCounter("topk", "slide_merges")
)

type windowsFn struct {
	// ID names this transform's states in the process-wide cache.
	ID       string
	BucketMs int64
	Windows  []windowSpec
	Limit    int
	Parts    schemas.Partitions
	UpperN   int
	AggN     int
	Shards   int
	Minutes  bool
	Durable  bool

	// Panes: level index (low 4 bits) and pane start (start*16 + level) ->
	// the summary set of that pane over the partition's lists.
	Panes state.Map[int64, []byte]
	Gen   state.Value[int64]
	Fired state.Value[int64]
	Slide timers.EventTime
}

// entry is a partition's cached State.
type entry struct {
	mu  sync.Mutex
	gen int64
	st  *State
	// durable pane keys written, so evictions remove them without a read
	keys map[int64]bool
}

var cache sync.Map // fn.ID + "\x00" + partition key -> *entry

func (fn *windowsFn) config() Config {
	c := Config{Bucket: time.Duration(fn.BucketMs) * time.Millisecond, Limit: fn.Limit, Parts: fn.Parts, UpperN: fn.UpperN, AggN: fn.AggN}
	for _, w := range fn.Windows {
		c.Windows = append(c.Windows, Window{Name: w.Name, Length: time.Duration(w.LengthMs) * time.Millisecond, Period: time.Duration(w.PeriodMs) * time.Millisecond, MinCount: w.MinCount})
	}
	return c
}

// load returns the partition's entry, locked, current with Beam state.
func (fn *windowsFn) load(ctx context.Context, sp state.Provider, key string) (*entry, error) {
	v, _ := cache.LoadOrStore(fn.ID+"\x00"+key, &entry{})
	e := v.(*entry)
	e.mu.Lock()
	gen, _, err := fn.Gen.Read(sp)
	if err != nil {
		e.mu.Unlock()
		return nil, err
	}
	if e.st != nil && e.gen == gen {
		return e, nil
	}
	// Rebuild from Beam state.
	rebuilds.Inc(ctx, 1)
	stagemetrics.StateCacheMiss(stagemetrics.StageWindows)
	st := NewState(fn.config())
	fired, _, err := fn.Fired.Read(sp)
	if err != nil {
		e.mu.Unlock()
		return nil, err
	}
	st.SetFired(fired)
	e.keys = map[int64]bool{}
	if fn.Durable {
		keys, _, err := fn.Panes.Keys(sp)
		if err != nil {
			e.mu.Unlock()
			return nil, err
		}
		for _, k := range keys {
			b, ok, err := fn.Panes.Get(sp, k)
			if err != nil {
				e.mu.Unlock()
				return nil, err
			}
			if !ok {
				continue
			}
			li, start := int(k&15), k>>4
			err = summary.EachInSet(b, func(list string, smb []byte) error {
				sm, err := summary.Unmarshal(smb)
				if err != nil {
					return err
				}
				return st.Restore(li, list, start, sm, fired)
			})
			if err != nil {
				e.mu.Unlock()
				return nil, fmt.Errorf("slide: restore %q: %w", key, err)
			}
			e.keys[k] = true
		}
	}
	e.st, e.gen = st, gen
	return e, nil
}

// save writes a new generation to Beam state and the cache: a random
// one, not the next number, so that a generation this cache holds from a
// bundle the runner then failed (its state writes discarded) can never
// match one that Beam state reaches without it (the key processed
// meanwhile by another worker, as many times). The caller then marks the
// call done as saved.
func (fn *windowsFn) save(sp state.Provider, e *entry) error {
	gen := mrand.Int64()
	if err := fn.Gen.Write(sp, gen); err != nil {
		return err
	}
	e.gen = gen
	return nil
}

// done unlocks e after a call. Unless the call saved, the cached State is
// dropped, to be rebuilt from Beam state at the next call: a call that
// failed may have changed it part way, and its bundle's state writes are
// discarded by the runner and its input retried (a bucket added twice
// otherwise; TestWindowsFnRetryAfterFailedWrite). Without Durable, Beam
// state holds no panes to rebuild from: the partition's windows start
// again empty, as after a lost worker.
func (e *entry) done(saved *bool) {
	if !*saved {
		e.st = nil
	}
	e.mu.Unlock()
}

// writePane writes the set of every list's pane at (level, start).
func (fn *windowsFn) writePane(sp state.Provider, e *entry, li int, start int64) error {
	if !fn.Durable {
		return nil
	}
	// PanesAt comes in list order, as the set wants; a packed pane (a
	// closed minute, a bucket a minute old) is written in its encoding,
	// decompressed when it is held compressed (a minute).
	var w summary.SetWriter
	var err error
	if perr := e.st.PanesAt(li, start, func(list string, sm *summary.Summary, packed []byte) {
		switch {
		case err != nil:
		case sm != nil:
			err = w.Add(list, sm)
		default:
			err = w.AddEncoded(list, packed)
		}
	}); perr != nil {
		return perr
	}
	if err != nil {
		return err
	}
	k := start<<4 | int64(li)
	if w.Len() == 0 {
		return nil
	}
	e.keys[k] = true
	return fn.Panes.Put(sp, k, w.Bytes())
}

func (fn *windowsFn) arm(tp timers.Provider, end int64) {
	fn.Slide.Set(tp, time.UnixMilli(end), timers.WithTag(strconv.FormatInt(end, 10)),
		timers.WithOutputTimestamp(time.UnixMilli(end-1)))
}

// ProcessElement adds one bucket pane of every list in the set and arms the
// timer of the bucket's slide (or, for a late bucket, of the next slide).
func (fn *windowsFn) ProcessElement(ctx context.Context, ts beam.EventTime, sp state.Provider, tp timers.Provider, key string, set []byte, _ func(beam.EventTime, string, []byte), emitMinute func(beam.EventTime, string, []byte)) error {
	e, err := fn.load(ctx, sp, key)
	if err != nil {
		return err
	}
	saved := false
	defer e.done(&saved)
	st := e.st
	bucket := floor(int64(ts), fn.BucketMs)
	late := st.Fired() != 0 && bucket+fn.BucketMs <= st.Fired()
	closedLevels := map[int]int64{}
	err = summary.EachInSet(set, func(list string, smb []byte) error {
		sm, err := summary.Unmarshal(smb)
		if err != nil {
			return err
		}
		ls, err := st.Add(list, bucket, sm)
		if err != nil {
			return err
		}
		for _, l := range ls {
			closedLevels[levelIndex(st, l.Level)] = l.Start
			if fn.Minutes && l.Level == minuteMs {
				b, err := l.Summary.MarshalBinary()
				if err != nil {
					return err
				}
				emitMinute(beam.EventTime(l.Start+l.Level-1), partKey(l.List, key), b)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("slide: partition %q bucket %d: %w", key, bucket, err)
	}
	if late {
		latePanes.Inc(ctx, 1)
	}
	if err := fn.writePane(sp, e, 0, bucket); err != nil {
		return err
	}
	for li, start := range closedLevels {
		if err := fn.writePane(sp, e, li, start); err != nil {
			return err
		}
	}
	if !late {
		fn.arm(tp, bucket+fn.BucketMs)
	} else if next, ok := st.Next(st.Fired()); ok {
		fn.arm(tp, next)
	}
	if err := fn.save(sp, e); err != nil {
		return err
	}
	saved = true
	return nil
}

const minuteMs = int64(time.Minute / time.Millisecond)

func levelIndex(st *State, size int64) int {
	for i, s := range st.Levels() {
		if s == size {
			return i
		}
	}
	return -1
}

// partKey is "type\x00scope\x00partition" for a list key and partition.
func partKey(list, part string) string { return list + "\x00" + part }

// OnTimer runs one slide: every window whose period divides the slide's end
// reports each list's summary, grouped by (window, shard) into one set.
func (fn *windowsFn) OnTimer(ctx context.Context, ts beam.EventTime, sp state.Provider, tp timers.Provider, key string, tc timers.Context, emit func(beam.EventTime, string, []byte), emitMinute func(beam.EventTime, string, []byte)) error {
	if tc.Family != fn.Slide.Family {
		return nil
	}
	end, err := strconv.ParseInt(tc.Tag, 10, 64)
	if err != nil {
		return fmt.Errorf("slide: timer tag %q: %w", tc.Tag, err)
	}
	e, err := fn.load(ctx, sp, key)
	if err != nil {
		return err
	}
	saved := false
	defer e.done(&saved)
	st := e.st
	if end <= st.Fired() {
		saved = true // unchanged
		return nil   // a slide armed twice
	}
	// Fire reports lists in key order: each result is encoded into its
	// group's set as it comes, and its summary reused for the next.
	groups := map[string]*summary.SetWriter{}
	var closed []Closed
	merges := st.Merges
	st.ShareResults = true
	err = st.Fire(end, func(r Result) error {
		k := ResultKey(fn.Windows[r.Window].Name, int(summary.Hash(r.List)%uint64(fn.Shards)))
		g := groups[k]
		if g == nil {
			g = new(summary.SetWriter)
			groups[k] = g
		}
		return g.Add(r.List, r.Summary)
	}, func(c Closed) error {
		closed = append(closed, c)
		return nil
	})
	if err != nil {
		return fmt.Errorf("slide: partition %q: %w", key, err)
	}
	slides.Inc(ctx, 1)
	mergesCount.Inc(ctx, int64(st.Merges-merges))
	for k, g := range groups {
		emit(beam.EventTime(end-1), k, g.Bytes()) // g is not used again
	}
	written := map[int64]bool{}
	for _, c := range closed {
		if fn.Minutes && c.Level == minuteMs {
			b, err := c.Summary.MarshalBinary()
			if err != nil {
				return err
			}
			emitMinute(beam.EventTime(end-1), partKey(c.List, key), b)
		}
		li := levelIndex(st, c.Level)
		if k := c.Start<<4 | int64(li); !written[k] {
			written[k] = true
			if err := fn.writePane(sp, e, li, c.Start); err != nil {
				return err
			}
		}
	}
	// Remove the panes that left every window.
	if fn.Durable {
		live := map[int64]bool{}
		for li := range st.Levels() {
			st.PaneStarts(li, func(s int64) { live[s<<4|int64(li)] = true })
		}
		for k := range e.keys {
			if !live[k] {
				if err := fn.Panes.Remove(sp, k); err != nil {
					return err
				}
				delete(e.keys, k)
			}
		}
	}
	if err := fn.Fired.Write(sp, end); err != nil {
		return err
	}
	if next, ok := st.Next(end); ok {
		fn.arm(tp, next)
	} else {
		// Nothing left to slide: forget the cached State (Beam state keeps
		// the last slide, for late data).
		defer cache.Delete(fn.ID + "\x00" + key)
	}
	if err := fn.save(sp, e); err != nil {
		return err
	}
	saved = true
	return nil
}
