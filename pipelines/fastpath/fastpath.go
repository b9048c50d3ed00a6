// Package fastpath is the streaming job: read beacons, decode and validate,
// pre-aggregate per bundle, merge bucket summary sets per partition, slide
// windows incrementally per partition, merge partitions into ranked lists,
// publish. Build adds it to a Beam pipeline; Run builds, runs it on the
// runner selected by Beam's --runner flag (Prism in-process by default) and
// reports what it did.
//
//	source -> preagg --(KV<partition, summary set>, ts = bucket)--> counter.Buckets (fixed 10 s, allowed lateness)
//	   -> slide.Windows (state + event-time timers per partition: 1m, 5m every 10 s; 1h every minute)
//	   -> merge.Lists (per window and shard: one union of the partitions per list) -> publish
//	   5m lists + users tallies (preagg) -> trend (transforms/trend/trendbeam) -> publish (Config.Trending)
//	   slide minutes -> stitch.OpenParts -> stitch.Lists -> lists(24h, all)       (Config.Long)
//	   dead letters -> files
package fastpath

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/counter"
	"github.com/topk-dev/topk/transforms/merge"
	"github.com/topk-dev/topk/transforms/preagg"
	"github.com/topk-dev/topk/transforms/publish"
	"github.com/topk-dev/topk/transforms/slide"
	"github.com/topk-dev/topk/transforms/source"
	"github.com/topk-dev/topk/transforms/stitch"
	"github.com/topk-dev/topk/transforms/summary"
	"github.com/topk-dev/topk/transforms/trend/trendbeam"
)

// Config is the whole fast path's configuration.
type Config struct {
	Source     source.Spec
	SourceOpts source.Options
	// Preagg.Rules are the countable-event rules; DefaultConfig leaves
	// them nil (none, not even the event_id dedupe), the streaming command
	// sets them from its flags (all rules by default).
	Preagg  preagg.Config
	Lists   merge.Config
	Publish publish.Config
	// DeadLetterDir receives dead letters as NDJSON; "" only counts them.
	DeadLetterDir string
	// Windows to publish; each of 1m, 5m, 1h (24h and all come from the
	// exact path's stitching).
	Windows []schemas.Window
	// Long adds the 24h and all lists: the exact tables in Exact stitched
	// with the open hours' minute summaries (transforms/stitch).
	Long  bool
	Exact stitch.StoreConfig
	// MinCount per window: entries below it are left out of lists whose
	// scope is not global (a quiet region's list is shorter, not a thousand
	// items with one view each). Missing or 0: no minimum.
	MinCount map[schemas.Window]uint64
	// Trending scores the 5m lists into trending lists per (type, scope)
	// (transforms/trend), published next to them; with Long, older
	// history comes from the exact tables.
	Trending bool
	// Trend configures the trending step (its Store is set from Exact when
	// Long is on: older history from the exact tables).
	Trend trendbeam.Config
	// MinuteN is the number of entries per (list, partition) a closed
	// minute keeps, and so the 1h window's aggregates over those minutes
	// (slide.Config.UpperN). The 1h window's sixty minutes and their
	// aggregates are about two thirds of a full list's state, and a 1h
	// list counts sixty minutes' events, so it needs fewer entries per
	// minute than a 1m list per bucket. 0 (the default): a quarter of the buckets'
	// Preagg.Summary.N, but at least four times a partition's share of
	// the list (K + margin over the partitions); Preagg.Summary.N or more:
	// no cut (see BENCHMARKS.md, "Smaller minutes and aggregates").
	MinuteN int
	// AggN is the number of entries per (list, partition) each window's
	// aggregates keep (slide.Config.AggN): the two-stacks' front holds up
	// to one aggregate per pane, each a merge of many panes, so a list of
	// a few hundred items per bucket holds aggregates as big as a full
	// one. 0 (the default): as MinuteN's default; Preagg.Summary.N or
	// more: no cut.
	AggN int
	// Shards is the list merge's parallelism per window (0: 4).
	Shards int
	// Durable keeps the windows' panes in Beam state, so a partition's
	// windows are rebuilt after a worker is lost (slide.BeamConfig.Durable).
	// DefaultConfig sets it; the streaming command and the local run turn
	// it off on Prism in their own process, whose state dies with it.
	Durable bool
	// LongIdle is how long after a list's last hour with data its open
	// hours are still reported every minute (0: stitch's default, 26 h,
	// right for a stream; a bounded replay wants minutes, or its end
	// fires a day of minute timers).
	LongIdle time.Duration
}

// DefaultConfig publishes 1m, 5m and 1h lists with the default counting
// configuration; Source must still be set.
func DefaultConfig() Config {
	c := Config{
		Preagg:  preagg.DefaultConfig(),
		Lists:   merge.DefaultConfig(),
		Windows: []schemas.Window{schemas.Window1m, schemas.Window5m, schemas.Window1h},
		MinCount: map[schemas.Window]uint64{
			schemas.Window1m: 3, schemas.Window5m: 5, schemas.Window1h: 10,
		},
		Durable:  true,
		Trending: true,
		Trend:    trendbeam.DefaultConfig(),
	}
	// Trending ranks by distinct trusted users: the pre-aggregation tallies
	// the users of the 64 biggest items per (list, partition, bucket).
	c.Trend.Trend.Counts = schemas.CountsUsers
	c.Preagg.UsersTop = 64
	return c
}

// Validate reports what cannot work, before anything runs.
func (c Config) Validate() error {
	if err := c.Source.Validate(); err != nil {
		return fmt.Errorf("source: %w", err)
	}
	return c.validateAfterSource()
}

// validateAfterSource is Validate without the source (what BuildFrom needs).
func (c Config) validateAfterSource() error {
	if err := c.Preagg.Validate(); err != nil {
		return fmt.Errorf("preagg: %w", err)
	}
	if err := c.Lists.Validate(); err != nil {
		return fmt.Errorf("lists: %w", err)
	}
	if len(c.Windows) == 0 {
		return errors.New("no windows to publish")
	}
	if c.Trending {
		if err := c.Trend.Validate(); err != nil {
			return fmt.Errorf("trending: %w", err)
		}
		if c.Trend.Trend.Counts == schemas.CountsUsers && c.Preagg.UsersTop == 0 {
			return errors.New("trending: counts users needs the pre-aggregation's users tallies (preagg users top > 0)")
		}
	}
	if c.MinuteN < 0 || c.MinuteN > summary.MaxN {
		return fmt.Errorf("minute N %d outside [0, %d]", c.MinuteN, summary.MaxN)
	}
	if c.AggN < 0 || c.AggN > summary.MaxN {
		return fmt.Errorf("aggregates' N %d outside [0, %d]", c.AggN, summary.MaxN)
	}
	if c.Shards < 0 || c.Shards > 1024 {
		return fmt.Errorf("shards %d outside [0, 1024]", c.Shards)
	}
	if c.Long {
		if err := c.Exact.Validate(); err != nil {
			return err
		}
		if c.LongIdle < 0 {
			return errors.New("negative long idle limit")
		}
	}
	for _, w := range c.Windows {
		if !slices.Contains([]schemas.Window{schemas.Window1m, schemas.Window5m, schemas.Window1h}, w) {
			return fmt.Errorf("window %q is not one the fast path publishes (1m, 5m, 1h)", w)
		}
		if w.Length()%w.Period() != 0 || w.Period()%c.Preagg.Bucket != 0 {
			return fmt.Errorf("window %s moves every %v, not a multiple of the %v bucket", w, w.Period(), c.Preagg.Bucket)
		}
	}
	return nil
}

// Build adds the fast path to s: the source cfg.Source, then BuildFrom.
func Build(s beam.Scope, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	s = s.Scope("fastpath")
	if need := cfg.Preagg.AllowedLateness + cfg.Preagg.Bucket; cfg.Source.Kind == source.KindFile && cfg.Source.File.Slack < need {
		// A replay's watermark stays far enough behind its data clock
		// that every event the pre-aggregation still counts is read
		// before its bucket closes: it counts what one pass over the
		// whole file would.
		cfg.Source.File.Slack = need
	}
	if cfg.SourceOpts.Bucket == 0 {
		// The readers end their calls where a checkpoint can close a
		// bucket: one pre-aggregation flush per bucket at low rates, not
		// one per second (source.Options.Bucket).
		cfg.SourceOpts.Bucket = cfg.Preagg.Bucket
	}
	beacons, srcDead := source.Read(s, cfg.Source, cfg.SourceOpts)
	// A runner's retry of a discarded bundle is told from a duplicate by
	// its beacon where the source delivers each beacon once.
	cfg.Preagg.BeaconsOnce = source.BeaconsOnce(cfg.Source, cfg.SourceOpts)
	return buildFrom(s, beacons, srcDead, cfg)
}

// BuildFrom adds everything after the source to s: beacons is a
// PCollection<[]byte> of binary beacons timestamped on the source's clock,
// sourceDead a PCollection<schemas.DeadLetter> (both in the global window).
// cfg.Source is not used nor validated. Tests feed a TestStream through it.
func BuildFrom(s beam.Scope, beacons, sourceDead beam.PCollection, cfg Config) error {
	if err := cfg.validateAfterSource(); err != nil {
		return err
	}
	return buildFrom(s.Scope("fastpath"), beacons, sourceDead, cfg)
}

func buildFrom(s beam.Scope, beacons, srcDead beam.PCollection, cfg Config) error {
	// Lists carry the version of the rules their counts were made with.
	v, err := preagg.RulesVersion(cfg.Preagg)
	if err != nil {
		return fmt.Errorf("rules: %w", err)
	}
	cfg.Lists.Rules = v
	pc := cfg.Preagg
	trending := cfg.Trending && slices.Contains(cfg.Windows, schemas.Window5m)
	if !trending || cfg.Trend.Trend.Counts != schemas.CountsUsers {
		pc.UsersTop = 0 // no tallies nobody reads
	}
	partials, tallies, decodeDead := preagg.ApplyWithUsers(s, beacons, pc)
	publish.DeadLetters(s, beam.Flatten(s, srcDead, decodeDead), cfg.DeadLetterDir)

	buckets := counter.Buckets(s, partials, cfg.Preagg.Bucket, cfg.Preagg.AllowedLateness, cfg.Preagg.Summary.N)
	sc := cfg.slideConfig()
	results, minutes := slide.Windows(s, buckets, sc)
	var mw []merge.Window
	for _, w := range sc.Windows {
		mw = append(mw, merge.Window{Name: w.Name, MinCount: w.MinCount})
	}
	lists := merge.Lists(s, results, cfg.Preagg.Bucket, mw, cfg.Lists)
	publish.Lists(s, lists, cfg.Publish)
	if trending {
		tc := cfg.Trend
		tc.Bucket, tc.Rules = cfg.Preagg.Bucket, cfg.Lists.Rules
		if cfg.Long {
			tc.Store = cfg.Exact
		}
		PublishTrending(s, lists, tallies, tc, cfg.Publish)
	}
	if cfg.Long {
		lc := stitch.DefaultConfig()
		lc.Store, lc.K, lc.Margin = cfg.Exact, cfg.Lists.K, cfg.Lists.Margin
		if cfg.LongIdle > 0 {
			lc.IdleLimit = cfg.LongIdle
		}
		publish.Lists(s, stitch.Lists(s, stitch.OpenParts(s, minutes, lc), lc), cfg.Publish)
	}
	return nil
}

// RecoveryHorizon is how much of the past a restarted job must replay to
// rebuild every window it publishes: the longest window, plus the allowed
// lateness and one bucket (events that late still count).
func (c Config) RecoveryHorizon() time.Duration {
	var longest time.Duration
	for _, w := range c.Windows {
		longest = max(longest, w.Length())
	}
	return longest + c.Preagg.AllowedLateness + c.Preagg.Bucket
}

// slideConfig is the sliding windows' configuration: the published windows
// (and the minutes the long windows read).
func (c Config) slideConfig() slide.BeamConfig {
	sc := slide.BeamConfig{
		Config: slide.Config{
			Bucket: c.Preagg.Bucket, Limit: c.Lists.K + c.Lists.Margin,
			Parts:  schemas.Partitions{P: c.Preagg.Partitions, Region: c.Preagg.RegionPartitions, Country: c.Preagg.CountryPartitions},
			UpperN: c.cutN(c.MinuteN), AggN: c.cutN(c.AggN),
		},
		Shards:  c.Shards,
		Minutes: c.Long,
		Durable: c.Durable,
	}
	if sc.Shards == 0 {
		sc.Shards = 4
	}
	windows := slices.Clone(c.Windows)
	if c.Long && !slices.Contains(windows, schemas.Window1h) {
		// The long windows read the minutes the 1h window slides over; a
		// 1h window that is not published still keeps them.
		windows = append(windows, schemas.Window1h)
	}
	for _, w := range windows {
		sc.Windows = append(sc.Windows, slide.Window{Name: string(w), Length: w.Length(), Period: w.Period(), MinCount: c.MinCount[w]})
	}
	return sc
}

// cutN is the entries per (list, partition) a closed minute or a window's
// aggregate keeps: n if set, else a quarter of the buckets' N but at least
// four times a partition's share of the list (of a region list when there
// are scopes: it has the fewest partitions), at most the buckets' N. A
// cut to about one share loses items near the K-th: in TestReplayDense
// (a share is 275 entries there), aggregates of 256, 384 and 448 entries
// (0.9, 1.4 and 1.6 shares) gave recall@1000 0.89, 0.93 and 0.935, whole
// ones (512) 0.945 (before summary.Drops; with them, 1m and 5m lists
// reach 1.000 at 448).
func (c Config) cutN(n int) int {
	if n > 0 {
		return n
	}
	bn, p := c.Preagg.Summary.N, max(c.Preagg.Partitions, 1)
	if c.Preagg.Scopes {
		// Region and country lists may have fewer partitions, so a bigger share.
		for _, sp := range []int{c.Preagg.RegionPartitions, c.Preagg.CountryPartitions} {
			if sp > 0 {
				p = min(p, sp)
			}
		}
	}
	share := (c.Lists.K + c.Lists.Margin + p - 1) / p
	return min(bn, max(bn/4, 4*share))
}

// Report is what a finite run did: the line the streaming command prints.
type Report struct {
	Events      int64   `json:"events"`
	Bad         int64   `json:"bad"`
	LateDropped int64   `json:"late_dropped"`
	Seconds     float64 `json:"seconds"`
	EventsPerS  float64 `json:"events_per_s"`
	Lists       int64   `json:"lists"`
	LagP50Ms    float64 `json:"lag_p50_ms"`
	LagP99Ms    float64 `json:"lag_p99_ms"`
	PeakRSSMB   float64 `json:"peak_rss_mb"`
}

// Metrics are the pipeline counters Run reads back.
type Metrics map[string]int64

// Runner executes a built pipeline and returns its counters; the default
// runs beamx.RunWithMetrics (Beam's --runner flag, Prism by default).
type Runner func(ctx context.Context, p *beam.Pipeline) (Metrics, error)

// Run builds and runs the fast path and reports what it did. lag, when not
// nil, is started before the pipeline and stopped after it: it returns the
// 1m lists' publish lag percentiles (ms).
func Run(ctx context.Context, cfg Config, run Runner, lag func() (p50, p99 float64)) (Report, error) {
	p, s := beam.NewPipelineWithRoot()
	if err := Build(s, cfg); err != nil {
		return Report{}, err
	}
	start := time.Now()
	m, err := run(ctx, p)
	secs := time.Since(start).Seconds()
	if err != nil {
		return Report{}, fmt.Errorf("run: %w", err)
	}
	r := Report{
		Events:      m["events"],
		Bad:         m["dead_letters"],
		LateDropped: m["late_dropped"],
		Seconds:     secs,
		Lists:       m["lists"],
		PeakRSSMB:   peakRSSMB(),
	}
	if secs > 0 {
		r.EventsPerS = float64(r.Events) / secs
	}
	if lag != nil {
		r.LagP50Ms, r.LagP99Ms = lag()
	}
	return r, nil
}
