// Package preagg is the fast path's first counting step: it decodes beacons,
// validates their events, buckets each by its own event time, and sums counts
// per (type, scope, partition, bucket, item) in a per-bundle hash map
// (summary.Counter) flushed as bounded summaries. Only summaries cross the
// shuffle: one summary set per (partition, bucket) holding a summary per
// list with events there (summary.AppendSet), keyed by partition and
// timestamped with the bucket's start, so a viral item costs one map
// increment per event and one entry per bundle, and the number of elements
// follows partitions and buckets, not lists (three scopes per event, for
// every type).
//
// Beam's own combiner lifting keeps only ~2,000 keys per bundle; this map is
// bounded by Config.MaxDistinct over all its groups and flushes early when
// full, so a spam wave of distinct keys costs flushes, not memory.
//
// Bad input never stops the stream: an undecodable beacon or an invalid event
// goes to the dead-letter output with its reason, and a counter moves. Events
// later than the allowed lateness (judged against the beacon's element
// timestamp, which follows the source's clock) are counted in the
// late_dropped metric and left to the exact path.
package preagg

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/summary"
)

// Config shapes the step. Zero values are not defaults: start from
// DefaultConfig.
type Config struct {
	// Partitions is P: every item lives in partition Hash(item) mod P.
	Partitions int
	// Bucket is the event-time bucket (10 s).
	Bucket time.Duration
	// AllowedLateness: an event whose bucket ended more than this before the
	// beacon's element time is dropped here (and counted) for the exact path.
	AllowedLateness time.Duration
	// Summary sizes the summaries flushed per (list, partition, bucket).
	Summary summary.Config
	// MaxDistinct caps distinct (group, item) keys held per bundle.
	MaxDistinct int
	// Types, when non-empty, are the only item types accepted.
	Types []string
	// MaxFuture rejects events further ahead of the beacon's element time.
	// Zero (the default): no limit. Clock skew is the ingest API's check,
	// against wall time; here element time is the source's data clock, which
	// a sparse replay legitimately outruns.
	MaxFuture time.Duration
	// Scopes: count each event in its country and region lists too, besides
	// "global" (the default; false counts global lists only).
	Scopes bool
}

// DefaultConfig is the fast path's configuration.
func DefaultConfig() Config {
	return Config{
		Partitions:      16,
		Bucket:          10 * time.Second,
		AllowedLateness: 2 * time.Minute,
		Summary:         summary.DefaultConfig(),
		MaxDistinct:     1 << 18,
		Scopes:          true,
	}
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.Partitions < 1 || c.Partitions > 4096 {
		return fmt.Errorf("partitions %d outside [1, 4096]", c.Partitions)
	}
	if c.Bucket < time.Millisecond || c.Bucket%time.Millisecond != 0 {
		return fmt.Errorf("bucket %v is not a positive whole number of milliseconds", c.Bucket)
	}
	if c.AllowedLateness < 0 {
		return fmt.Errorf("allowed lateness %v is negative", c.AllowedLateness)
	}
	if c.MaxDistinct < 1 {
		return fmt.Errorf("max distinct %d < 1", c.MaxDistinct)
	}
	for _, t := range c.Types {
		if !schemas.IsType(t) {
			return fmt.Errorf("type %q must match [a-z][a-z0-9_]*", t)
		}
	}
	return c.Summary.Validate()
}

// ListKey is a list's key in summary sets: "type\x00scope".
func ListKey(typ, scope string) string { return typ + "\x00" + scope }

// PartitionKey is the shuffle key of a partition's summary sets.
func PartitionKey(p int) string { return strconv.Itoa(p) }

// Key is the key of one list's summaries in one partition (the long
// windows' minutes): "type\x00scope\x00partition".
func Key(typ, scope string, partition int) string {
	return typ + "\x00" + scope + "\x00" + strconv.Itoa(partition)
}

// SplitKey is the inverse of Key.
func SplitKey(k string) (typ, scope string, partition int, err error) {
	parts := strings.Split(k, "\x00")
	if len(parts) != 3 {
		return "", "", 0, fmt.Errorf("summary key %q has %d parts, want 3", k, len(parts))
	}
	p, err := strconv.Atoi(parts[2])
	if err != nil {
		return "", "", 0, fmt.Errorf("summary key %q: partition: %w", k, err)
	}
	return parts[0], parts[1], p, nil
}

// Apply decodes beacons (PCollection<[]byte>) into summaries, a
// PCollection<KV<string, []byte>> of summary sets (summary.AppendSet: list
// key -> summary) keyed by PartitionKey and timestamped with the bucket's
// start, one per (bucket, partition) per flush, and dead letters, a
// PCollection<schemas.DeadLetter>. It panics on an invalid Config (at
// construction, not on a worker).
func Apply(s beam.Scope, beacons beam.PCollection, cfg Config) (summaries, dead beam.PCollection) {
	s = s.Scope("preagg.Apply")
	if err := cfg.Validate(); err != nil {
		panic(fmt.Sprintf("preagg: %v", err))
	}
	fn := &preaggFn{
		Partitions:  cfg.Partitions,
		BucketMs:    cfg.Bucket.Milliseconds(),
		LatenessMs:  cfg.AllowedLateness.Milliseconds(),
		N:           cfg.Summary.N,
		SketchW:     cfg.Summary.SketchWidth,
		SketchD:     cfg.Summary.SketchDepth,
		MaxDistinct: cfg.MaxDistinct,
		Types:       cfg.Types,
		MaxFutureMs: cfg.MaxFuture.Milliseconds(),
		Scopes:      cfg.Scopes,
	}
	return beam.ParDo2(s, fn, beacons)
}

var (
	eventsCounter = beam.NewCounter("topk", "events")
	badBeacons    = beam.NewCounter("topk", "bad_beacons")
	badEvents     = beam.NewCounter("topk", "bad_events")
	lateDropped   = beam.NewCounter("topk", "late_dropped")
	flushes       = beam.NewCounter("topk", "preagg_flushes")
)

func init() {
	register.DoFn5x1[context.Context, beam.EventTime, []byte, func(beam.EventTime, string, []byte), func(schemas.DeadLetter), error](&preaggFn{})
	register.Emitter3[beam.EventTime, string, []byte]()
	register.Emitter1[schemas.DeadLetter]()
}

// preaggFn is the per-bundle map. Exported fields are its configuration.
type preaggFn struct {
	Partitions  int
	BucketMs    int64
	LatenessMs  int64
	N           int
	SketchW     int
	SketchD     int
	MaxDistinct int
	Types       []string
	MaxFutureMs int64
	Scopes      bool

	cfg      summary.Config
	val      schemas.Validator
	reader   schemas.BeaconReader
	groups   map[groupKey]*group
	free     []*summary.Counter // reset counters for reuse
	distinct int
	last     *group // the group of the previous event: most events share it
	lastKey  groupKey
	scopes   []string
	buf      []byte
	// per-bundle metric deltas, added once in flush
	nEvents, nBadB, nBadE, nLate int64
}

type groupKey struct {
	typ, scope string
	bucket     int64 // bucket start, Unix ms
}

type group struct {
	key      groupKey
	counters []*summary.Counter // by partition, nil until used
}

func (fn *preaggFn) Setup() {
	fn.cfg = summary.Config{N: fn.N, SketchWidth: fn.SketchW, SketchDepth: fn.SketchD}
	fn.val = schemas.Validator{MaxFuture: time.Duration(fn.MaxFutureMs) * time.Millisecond}
	if len(fn.Types) > 0 {
		fn.val.Types = make(map[string]bool, len(fn.Types))
		for _, t := range fn.Types {
			fn.val.Types[t] = true
		}
	}
	fn.groups = make(map[groupKey]*group)
}

func (fn *preaggFn) StartBundle(_ context.Context, _ func(beam.EventTime, string, []byte), _ func(schemas.DeadLetter)) {
}

func (fn *preaggFn) ProcessElement(ctx context.Context, et beam.EventTime, beacon []byte, emit func(beam.EventTime, string, []byte), dead func(schemas.DeadLetter)) error {
	r := &fn.reader
	if err := r.Reset(beacon); err != nil {
		fn.nBadB++
		dead(schemas.DeadLetter{Stage: "decode", Reason: err.Error(), Payload: truncate(beacon), At: et.ToTime().UTC()})
		return nil
	}
	now := et.ToTime()
	clock := int64(et)
	var e schemas.Event
	for r.Next(&e) { // hot path: once per event
		if err := fn.val.Validate(&e, now); err != nil {
			fn.nBadE++
			dead(schemas.DeadLetter{Stage: "validate", Reason: err.Error(), EventID: strings.Clone(e.EventID), At: e.TS})
			continue
		}
		ms := e.TS.UnixMilli()
		bucket := ms - mod(ms, fn.BucketMs)
		if bucket+fn.BucketMs+fn.LatenessMs <= clock {
			fn.nLate++
			continue
		}
		fn.nEvents++
		h := summary.Hash(e.Item)
		p := summary.Partition(h, fn.Partitions)
		scopes := fn.scopes[:0]
		if fn.Scopes {
			scopes = e.Scopes(fn.scopes)
		} else {
			scopes = append(scopes, schemas.ScopeGlobal)
		}
		fn.scopes = scopes
		for _, sc := range scopes {
			g := fn.group(e.Type, sc, bucket)
			c := g.counters[p]
			if c == nil {
				c = fn.counter()
				g.counters[p] = c
			}
			before := c.Len()
			c.Add(e.Item, h, 1)
			fn.distinct += c.Len() - before
		}
		if fn.distinct >= fn.MaxDistinct {
			fn.flush(emit)
		}
	}
	if err := r.Err(); err != nil {
		// The events before the error were counted; the beacon is kept whole.
		fn.nBadB++
		dead(schemas.DeadLetter{Stage: "decode", Reason: err.Error(), Payload: truncate(beacon), At: now.UTC()})
	}
	return nil
}

// group returns the group for (typ, scope, bucket), creating it. The strings
// may point into the beacon: they are cloned before being kept as a map key.
func (fn *preaggFn) group(typ, scope string, bucket int64) *group {
	if fn.last != nil && fn.lastKey.bucket == bucket && fn.lastKey.typ == typ && fn.lastKey.scope == scope {
		return fn.last
	}
	k := groupKey{typ: typ, scope: scope, bucket: bucket}
	g, ok := fn.groups[k]
	if !ok {
		k = groupKey{typ: strings.Clone(typ), scope: strings.Clone(scope), bucket: bucket}
		g = &group{key: k, counters: make([]*summary.Counter, fn.Partitions)}
		fn.groups[k] = g
	}
	fn.last, fn.lastKey = g, g.key
	return g
}

func (fn *preaggFn) counter() *summary.Counter {
	if n := len(fn.free); n > 0 {
		c := fn.free[n-1]
		fn.free = fn.free[:n-1]
		return c
	}
	return summary.NewCounter(fn.MaxDistinct)
}

// flush emits one summary set per (bucket, partition) holding a summary per
// list with events there, and resets the map.
func (fn *preaggFn) flush(emit func(beam.EventTime, string, []byte)) {
	type out struct {
		keys []string
		sums []*summary.Summary
	}
	outs := map[[2]int64]*out{}
	for k, g := range fn.groups {
		for p, c := range g.counters {
			if c == nil {
				continue
			}
			if c.Len() > 0 {
				ok := [2]int64{k.bucket, int64(p)}
				o := outs[ok]
				if o == nil {
					o = &out{}
					outs[ok] = o
				}
				o.keys = append(o.keys, ListKey(k.typ, k.scope))
				o.sums = append(o.sums, c.Summary(fn.cfg))
			}
			c.Reset()
			fn.free = append(fn.free, c)
		}
		delete(fn.groups, k)
	}
	for k, o := range outs {
		var err error
		fn.buf, err = summary.AppendSet(fn.buf[:0], o.keys, o.sums)
		if err != nil {
			panic(err) // distinct lists, valid summaries: cannot fail
		}
		emit(beam.EventTime(k[0]), PartitionKey(int(k[1])), append([]byte(nil), fn.buf...))
	}
	fn.last = nil
	fn.distinct = 0
}

func (fn *preaggFn) FinishBundle(ctx context.Context, emit func(beam.EventTime, string, []byte), _ func(schemas.DeadLetter)) {
	fn.flush(emit)
	flushes.Inc(ctx, 1)
	eventsCounter.Inc(ctx, fn.nEvents)
	badBeacons.Inc(ctx, fn.nBadB)
	badEvents.Inc(ctx, fn.nBadE)
	lateDropped.Inc(ctx, fn.nLate)
	fn.nEvents, fn.nBadB, fn.nBadE, fn.nLate = 0, 0, 0, 0
}

func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

func truncate(b []byte) []byte {
	if len(b) > schemas.MaxDeadLetterPayload {
		b = b[:schemas.MaxDeadLetterPayload]
	}
	return append([]byte(nil), b...)
}
