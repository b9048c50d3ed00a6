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
//
// # Partitions
//
// An item of a list lives in one of the list's partitions, so the
// partitions' summaries never share an item and a list's top K is inside
// the union of its partitions' tops (transforms/merge). The global and
// country lists use all P partitions (Config.Partitions, 16), each region
// list only Config.RegionPartitions of them (4): the RegionPartitions
// consecutive partitions (mod P) from one chosen by the list's type and
// region, so the many region lists spread over the P keys
// (Config.CountryPartitions does the same for country lists; off by
// default, see below). Each (list,
// partition) carries the sliding windows' fixed cost (transforms/slide:
// its panes, minutes and aggregates, each cut to at least four times the
// list's K + margin over its partitions), and the region lists are many
// and small (three types x four regions of each country: 240 of the 303
// lists with 20 countries). Even the quietest region of a 20-country
// synthetic load at 200k events/s sees about 230 events a second per
// type (200k x the 20th country's Zipf weight 1/(20 x H(20)) = 0.014,
// over 3 types and 4 regions), so in 16 partitions each partition's 5m
// aggregates hold over a thousand distinct items of a long tail and fill
// the cut (16 x 1,024 entries per aggregate); in 4 partitions the same
// window fills 4 x 1,100, a quarter of the state, and the list publishes
// K + margin = 1,100 either way. A region list's buckets keep 4 x N entries (N =
// 4,096 per partition), more than its events hold per bucket unless a
// region sees about 16k events per type in 10 s; a busier region's
// buckets are cut as the busiest lists' are, with the same bounds.
//
// Country lists stay in all P by default: a big country is a list as busy
// as the global ones, and in 4 partitions it keeps a quarter of the
// entries. Measured (BENCHMARKS.md, "Country lists in fewer partitions"):
// the 80-minute replay's peak RSS fell by about 0.15 GB with countries in
// 4 (CPU within the noise), but through a spam wave on a one-country
// stream the country's recall@100 fell from 1 to 0.98 and its recall@1000
// from 0.97-1 to 0.80-0.83. CountryPartitions is there for a job of many
// small countries.
//
// # Cut once per bucket
//
// A flush's summaries are partial: one bundle's share of a bucket. They
// are not cut to the bucket's Summary.N but keep up to Config.PartialN
// entries per (list, partition) (by default 8N: 32,768), and
// counter.Buckets merges a bucket's partials at that size and cuts each
// list to N once, at the end. Live, a 10 s bucket spans many bundles (1 s
// each, or a flush at MaxDistinct), and a cut per bundle lost every item
// that was below the cut in each bundle but above it in the bucket, while
// the bundles' Theta added up: on a dense stream read in eight bundles a
// bucket, recall@1000 of the 1m lists fell from 0.93 to 0.76 and
// recall@100 below 1 (BENCHMARKS.md "Cut once per bucket"); cut once, the
// lists are those of one bundle a bucket. A flush still holds at most
// MaxDistinct keys in all, and the bucket's merge at most PartialN
// entries per list. What grows is the shuffle's share: a bucket's
// partials wait there until it closes, and they now hold up to its
// distinct items (MaxDistinct per flush) where each flush used to be cut
// to N per (list, partition); with the defaults a flush reached
// MaxDistinct long before that cut, so the bound is the same.
//
// # Countable-event rules
//
// With Config.Rules set, every event that passed validation and the
// lateness drop goes through a rules.Filter (transforms/rules: the one
// definition of a countable event the exact recount applies too) before it
// is counted: duplicates by event_id, the safety blocklist, known bots,
// repeats and the per-account cap. An event the rules drop is not counted
// (topk/rules_dropped_<reason>, not in topk/events); the trust weight is
// for trend scores and does not change counts. Config.Rules nil applies no
// rule at all, not even the dedupe (the behaviour before the rules, kept
// for the replay tests that compare with plain recounts); Off
// (--rules=none) keeps only the dedupe.
//
// Each DoFn instance builds one Filter in Setup. Its memory is fixed at
// rules.Config.FilterMaxBytes whatever the events; the fast path's
// defaults (DefaultRules) are sized for several instances per worker: 2^15
// event_ids per 30 s dedupe bucket over a 3 min horizon (7 sets) and 2^15
// (user, type, item) keys per 1 h rule window (2 tables), 28.4 MiB per
// instance (the rules package's own defaults take 187 MiB). That dedupes
// every event up to about 1,090 events/s per instance, and applies repeats
// and caps to the 16,384 to 32,768 most recently active keys of each hour
// (two generations: a long tail of one-off keys ages out instead of
// switching the rules off for the accounts that keep posting). Beyond
// either bound the rules do not apply to the event and it counts
// (topk/rules_unchecked, topk/rules_untracked; a forgotten key starts
// afresh if it comes back, topk/rules_forgotten, at most the cap more per
// key): the fast path over-counts by at most that, it never drops an event
// the definition counts, and the exact path corrects the hour. Events of one
// event_id or account that reach different instances are judged by each
// apart (again an over-count only).
//
// Out of order, one bound is weaker: a filter judges events in arrival
// order, so where an account's cap bites it may keep later events of the
// key than the definition does (as many or more in the rule window). A
// list whose window covers whole rule windows never under-counts; one that
// covers part of a rule window can under-count an item by the events of
// accounts that posted it more than the cap in that rule window, at most
// the cap per such account (TestReplayRulesOutOfOrder in pipelines/fastpath:
// 20 s of jitter, under by up to 18 in a partial 1h window).
//
// # Distinct users
//
// With Config.UsersTop (the streaming job's default when trending counts
// users), the step also keeps, per (list, partition, bucket), the (item,
// user) hash pairs of the counted events, each user sampled by its trust
// weight (users.Keep), and at each flush emits one users.Tally per (list,
// bucket): a sketch of every distinct pair, and one of the users of each
// partition's UsersTop biggest items (ApplyWithUsers; UsersTop x P / 4 in
// each of a region list's 4 partitions, the same room per list). The pairs of an
// item whose users are an exact set in the tally are not in the pairs'
// sketch: its set implies them (users.TallyWriter, version 3), which in
// a small list is nearly every pair. The pairs are
// bounded by Config.MaxPairs per bundle (an early flush, as for keys);
// the tallies feed the trend scorer (transforms/trend/trendbeam).
//
// A flush for MaxDistinct (the summaries' bound) keeps the pairs and
// emits no tally: the tallies go out at the bundle's end or at MaxPairs,
// one per (list, bucket) and bundle, with the biggest items of the
// summaries flushed before (each one's count summed over them) as
// candidates beside the counters' own. At 200k events/s and more over
// millions of items the summaries can flush several times a bundle (at
// MaxDistinct distinct keys), and a tally per summary flush gave each
// list that many more tally pieces to encode, ship and unite, with the
// same head items' users in each.
package preagg

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/topk-dev/topk/internal/stagemetrics"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/rules"
	"github.com/topk-dev/topk/transforms/summary"
	"github.com/topk-dev/topk/transforms/users"
)

// Config shapes the step. Zero values are not defaults: start from
// DefaultConfig.
type Config struct {
	// Partitions is P: an item of a list lives in one partition, chosen by
	// its hash: in the global and country lists, Partition(Hash(item), P).
	Partitions int
	// RegionPartitions, when in [1, P), is how many partitions each
	// region's lists use: the RegionPartitions consecutive ones (mod P)
	// from one chosen by the list's type and region, an item in the
	// (Partition(Hash(item), RegionPartitions))-th of them. 0 or P and
	// more: P, as the other lists. See the package doc ("Partitions").
	// Like Partitions, it decides where an item's counts live: changed
	// on a running job (an update that keeps the windows' state), a
	// region item's counts would sit in two partitions until the windows
	// that hold the old ones close; change it with a new job.
	RegionPartitions int
	// CountryPartitions is RegionPartitions for the country lists: when
	// in [1, P), each country's lists use that many consecutive
	// partitions (mod P) from one chosen by the list's type and country.
	// 0 or P and more: P, the default (see the package doc). The same
	// caution applies to changing it.
	CountryPartitions int
	// Bucket is the event-time bucket (10 s).
	Bucket time.Duration
	// AllowedLateness: an event whose bucket ended more than this before the
	// beacon's element time is dropped here (and counted) for the exact path.
	AllowedLateness time.Duration
	// Summary sizes a bucket's summaries per (list, partition): N entries
	// each, the cut counter.Buckets makes once it has merged the bucket's
	// partial summaries (the bundles' flushes).
	Summary summary.Config
	// PartialN is how many entries a flushed partial summary keeps per
	// (list, partition, bucket), and the bucket's merge of them until its
	// end (counter.Buckets). 0: DefaultPartialFactor x Summary.N (a flush
	// holds at most MaxDistinct keys, so no more than that either).
	// Otherwise at least Summary.N. See the package doc ("Cut once per
	// bucket").
	PartialN int
	// MaxDistinct caps distinct (group, item) keys held per bundle: at
	// that many the bundle's counters flush early. The default, 2^20
	// keys, holds at most about 60 MB of counters per pre-aggregation
	// instance (a slot and the item's bytes per key). At 1M events/s
	// with every scope a bundle holds far more distinct keys than that,
	// and every early flush sends each key it holds through the shuffle
	// once more: 2^20 against 2^18 cut the job's CPU by about 5% and its
	// peak RSS by 0.4-1.4 GB (BENCHMARKS.md, "Fewer early flushes"). A
	// replay's bundles seldom reach either.
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
	// Rules, when not nil, are the countable-event rules applied to every
	// event before it is counted (see the package doc); nil applies none,
	// not even the event_id dedupe. Start from DefaultRules, whose stream
	// state is sized for the fast path.
	Rules *rules.Config
	// BeaconsOnce says the source delivers each beacon_id once, except
	// when a runner retries a bundle it discarded (Dataflow's Pub/Sub read
	// with the beacon_id id attribute; the recovery log on other runners):
	// then an event seen again in a new delivery of its beacon is that
	// retry and gets its first verdict again, rather than being dropped as
	// a duplicate (rules.Filter.RetriesByBeacon). False for sources that
	// may deliver a beacon twice (a file, a subscription without the log).
	BeaconsOnce bool
	// UsersTop, when > 0, makes ApplyWithUsers emit distinct-users tallies
	// (users.Tally) per (list, bucket) and flush: a sketch of every (user,
	// item) pair counted, and the users of the UsersTop biggest items by
	// count of each partition. Users are sampled by trust weight
	// (users.Keep), so estimates count distinct trusted users; an event
	// without an account is a user of its own (weight TrustUnknown). 0:
	// none.
	UsersTop int
	// MaxPairs bounds the (item, user) pairs held per bundle for the
	// tallies; the tallies flush early when full. 0: DefaultMaxPairs.
	MaxPairs int
}

// DefaultMaxPairs is MaxPairs' default: 2^22 pairs of 16 bytes, 64 MiB
// per pre-aggregation instance (and up to twice that in slices kept for
// reuse, see freePairSlice). With every scope an event is three pairs, so
// at 1M events/s a bundle of about a second held more than 2^20 and sent
// every list's tally twice or more: at 2^22 the tallies' bytes per event
// fell from 16.8 to 13.2 and the job's CPU by 7% (BENCHMARKS.md, "Fewer
// early flushes"). Below about 300k events/s a bundle's pairs stay under
// either bound.
const DefaultMaxPairs = 1 << 22

// DefaultRules is rules.DefaultConfig with the stream state scaled down for
// several pre-aggregation instances per worker: 2^15 event_ids per dedupe
// bucket and 2^15 keys per rule window, 28.4 MiB per instance
// (rules.Config.FilterMaxBytes) instead of 187 MiB.
func DefaultRules() rules.Config {
	c := rules.DefaultConfig()
	c.MaxIDs = 1 << 15
	c.MaxKeys = 1 << 15
	return c
}

// DefaultConfig is the fast path's configuration.
func DefaultConfig() Config {
	return Config{
		Partitions:       16,
		RegionPartitions: 4,
		Bucket:           10 * time.Second,
		AllowedLateness:  2 * time.Minute,
		Summary:          summary.DefaultConfig(),
		MaxDistinct:      1 << 20,
		MaxPairs:         DefaultMaxPairs,
		Scopes:           true,
	}
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.Partitions < 1 || c.Partitions > 4096 {
		return fmt.Errorf("partitions %d outside [1, 4096]", c.Partitions)
	}
	if c.RegionPartitions < 0 || c.RegionPartitions > 4096 {
		return fmt.Errorf("region partitions %d outside [0, 4096]", c.RegionPartitions)
	}
	if c.CountryPartitions < 0 || c.CountryPartitions > 4096 {
		return fmt.Errorf("country partitions %d outside [0, 4096]", c.CountryPartitions)
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
	if c.PartialN != 0 && (c.PartialN < c.Summary.N || c.PartialN > summary.MaxN) {
		return fmt.Errorf("partial N %d outside [summary N %d, %d]", c.PartialN, c.Summary.N, summary.MaxN)
	}
	if c.UsersTop < 0 || c.UsersTop > 1<<16 {
		return fmt.Errorf("users top %d outside [0, 65536]", c.UsersTop)
	}
	if c.MaxPairs < 0 {
		return fmt.Errorf("max pairs %d < 0", c.MaxPairs)
	}
	for _, t := range c.Types {
		if !schemas.IsType(t) {
			return fmt.Errorf("type %q must match [a-z][a-z0-9_]*", t)
		}
	}
	if c.Rules != nil {
		if err := c.Rules.Validate(); err != nil {
			return err
		}
		// An event is counted until its bucket ends AllowedLateness before
		// the beacon's time: the dedupe must remember it that long, or its
		// late duplicates count again.
		if need := c.AllowedLateness + c.Bucket; c.Rules.DedupeHorizon < need {
			return fmt.Errorf("dedupe_horizon %v is shorter than the allowed lateness plus a bucket (%v): late duplicates would count again", c.Rules.DedupeHorizon, need)
		}
	}
	return c.Summary.Validate()
}

// DefaultPartialFactor: a partial summary keeps up to 8 times the
// bucket's N per (list, partition). Measured on TestReplayDense read in
// eight bundles a bucket (BENCHMARKS.md "Cut once per bucket"), the 1m
// lists' recall@1000 was 0.807 at 2N, 0.907 at 4N, 0.942-0.947 at 8N
// (4 runs: where the merge cuts, the partials' order counts) and 0.933
// uncut (the ties at the N-th count ranked otherwise), 0.755 cut to N
// (all before summary.Drops, which took the 8N figure to 1.000).
const DefaultPartialFactor = 8

// PartialSize is the N of the partial summaries flushed: PartialN, or for
// 0 DefaultPartialFactor x Summary.N, no more than MaxDistinct (a flush's
// keys) nor summary.MaxN, and at least Summary.N.
func (c Config) PartialSize() int {
	if c.PartialN != 0 {
		return c.PartialN
	}
	return max(c.Summary.N, min(DefaultPartialFactor*c.Summary.N, c.MaxDistinct, summary.MaxN))
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
	summaries, _, dead = ApplyWithUsers(s, beacons, cfg)
	return summaries, dead
}

// ApplyWithUsers is Apply that also returns the distinct-users tallies of
// cfg.UsersTop > 0: a PCollection<KV<ListKey, users.Tally binary>>
// timestamped with the bucket's start, one per (list, bucket) per flush
// with users (empty when UsersTop is 0).
func ApplyWithUsers(s beam.Scope, beacons beam.PCollection, cfg Config) (summaries, tallies, dead beam.PCollection) {
	if err := cfg.Validate(); err != nil {
		panic(fmt.Sprintf("preagg: %v", err))
	}
	fn, err := newPreaggFn(cfg)
	if err != nil {
		panic(fmt.Sprintf("preagg: %v", err))
	}
	return beam.ParDo3(s, fn, beacons)
}

// newPreaggFn copies cfg into the DoFn's exported fields, reading the rule
// files for their version.
func newPreaggFn(cfg Config) (*preaggFn, error) {
	fn := &preaggFn{
		Partitions:   cfg.Partitions,
		RegionParts:  cfg.RegionPartitions,
		CountryParts: cfg.CountryPartitions,
		BucketMs:     cfg.Bucket.Milliseconds(),
		LatenessMs:   cfg.AllowedLateness.Milliseconds(),
		N:            cfg.PartialSize(),
		SketchW:      cfg.Summary.SketchWidth,
		SketchD:      cfg.Summary.SketchDepth,
		MaxDistinct:  cfg.MaxDistinct,
		Types:        cfg.Types,
		MaxFutureMs:  cfg.MaxFuture.Milliseconds(),
		Scopes:       cfg.Scopes,
		UsersTop:     cfg.UsersTop,
		MaxPairs:     cfg.MaxPairs,
		BeaconsOnce:  cfg.BeaconsOnce,
	}
	if fn.MaxPairs == 0 {
		fn.MaxPairs = DefaultMaxPairs
	}
	if cfg.Rules != nil {
		v, err := RulesVersion(cfg)
		if err != nil {
			return nil, err
		}
		rc := *cfg.Rules
		fn.Rules, fn.RulesVersion = &rc, v
	}
	return fn, nil
}

// RulesVersion reads cfg.Rules' files and returns the rule set's version
// (rules.Rules.Version), what the lists carry as "rules"; "" without
// rules. A missing or bad file is an error at submit time.
func RulesVersion(cfg Config) (string, error) {
	if cfg.Rules == nil {
		return "", nil
	}
	r, err := rules.New(*cfg.Rules)
	if err != nil {
		return "", err
	}
	return r.Version(), nil
}

var (
	eventsCounter = beam.NewCounter("topk", "events")
	badBeacons    = beam.NewCounter("topk", "bad_beacons")
	badEvents     = beam.NewCounter("topk", "bad_events")
	lateDropped   = beam.NewCounter("topk", "late_dropped")
	flushes       = beam.NewCounter("topk", "preagg_flushes")
	// setsCounter and setBytesCounter count the summary sets emitted and
	// their bytes: the shuffle's volume into the bucket merge.
	setsCounter     = beam.NewCounter("topk", "preagg_sets")
	setBytesCounter = beam.NewCounter("topk", "preagg_set_bytes")
	// talliesCounter and tallyBytesCounter count the users tallies
	// emitted and their bytes: trending's volume, which most of its cost
	// follows (transforms/trend/trendbeam).
	talliesCounter    = beam.NewCounter("topk", "trend_tallies")
	tallyBytesCounter = beam.NewCounter("topk", "trend_tally_bytes")

	// rulesDropped counts the events the rules drop, by reason
	// (topk/rules_dropped_duplicate, ..._blocked, ..._bot, ..._repeat,
	// ..._capped); rulesUnchecked and rulesUntracked count the events that
	// counted because the filter's state was full or too old: the bound of
	// the fast path's over-count against the rules.
	rulesDropped   = newReasonCounters()
	rulesUnchecked = beam.NewCounter("topk", "rules_unchecked")
	rulesUntracked = beam.NewCounter("topk", "rules_untracked")
	rulesForgotten = beam.NewCounter("topk", "rules_forgotten")
	// rulesRedelivered counts the events of a beacon delivered again (a
	// runner's retry of a discarded bundle) that got their first verdict
	// again (Config.BeaconsOnce).
	rulesRedelivered = beam.NewCounter("topk", "rules_redelivered")
)

func newReasonCounters() (cs [rules.NumReasons]beam.Counter) {
	for r := rules.OK + 1; r < rules.NumReasons; r++ {
		cs[r] = beam.NewCounter("topk", "rules_dropped_"+r.String())
	}
	return cs
}

func init() {
	register.DoFn6x1[context.Context, beam.EventTime, []byte, func(beam.EventTime, string, []byte), func(beam.EventTime, string, []byte), func(schemas.DeadLetter), error](&preaggFn{})
	register.Emitter3[beam.EventTime, string, []byte]()
	register.Emitter1[schemas.DeadLetter]()
}

// preaggFn is the per-bundle map. Exported fields are its configuration.
type preaggFn struct {
	Partitions   int
	RegionParts  int
	CountryParts int
	BucketMs     int64
	LatenessMs   int64
	N            int
	SketchW      int
	SketchD      int
	MaxDistinct  int
	Types        []string
	MaxFutureMs  int64
	Scopes       bool
	UsersTop     int
	MaxPairs     int
	// Rules, nil for none; RulesVersion is their version when the pipeline
	// was built (what the lists carry).
	Rules        *rules.Config
	RulesVersion string
	BeaconsOnce  bool

	filter *rules.Filter // nil without rules
	cfg    summary.Config
	val    schemas.Validator
	reader schemas.BeaconReader
	groups map[groupKey]*group
	// parked holds the counters the last flush reset, by list and
	// partition, for the same list's next groups (its next bucket counts
	// about as many items as its last); parking collects this flush's.
	// Counters a flush leaves parked (a list gone quiet) are dropped. One
	// free list shared by every list let each counter grow, flush after
	// flush, to the largest size any list needed (TestCountersKeepTheirSize:
	// 3.2 slots a key after one flush, 10.1 after eight), and a flush
	// scans and clears every slot (Counter.Summary, Reset).
	parked, parking map[partKey][]*summary.Counter
	distinct        int
	adds            []pendingAdd         // counts not yet made (applyAdds)
	sink            uint64               // applyAdds' peeks
	pairs           int                  // (item, user) pairs held for the tallies
	tops            topIndex             // addTally's scratch: a top item's hash to its index
	sketches        []users.Sketch       // addTally's scratch: the top items' users
	tw              *users.TallyWriter   // flush's scratch: the group's tally
	recent          [recentGroups]*group // the groups used since the last flush, by groupSlot (see group)
	scopes          []string
	buf             []byte

	// freePairs holds emptied pair slices for reuse: a group lives until
	// its tally is emitted (the bundle's end, or MaxPairs), and growing
	// its partitions' slices anew every bundle was 2 of the 44 CPU-s
	// trending by users added to a 100k events/s run.
	freePairs [][]pair
	freeCap   int // the capacity of freePairs' slices, in pairs
	// topBuf is flush's scratch for a counter's top items (summaryTop): at
	// most a bundle's distinct keys.
	topBuf []summary.Counted
	// candBuf is stash's and tallyTop's scratch for the candidates (at
	// most 4 x UsersTop + a counter's top); tallyTop's result lives in
	// it until the next call.
	candBuf []summary.Counted

	// per-bundle metric deltas, added once in FinishBundle
	nEvents, nBadB, nBadE, nLate int64
	nTallies, nTallyBytes        int64
	nSets, nSetBytes             int64
}

type groupKey struct {
	typ, scope string
	bucket     int64 // bucket start, Unix ms
}

type group struct {
	key groupKey
	// The list's partitions: np of them from off (mod P; see
	// Config.RegionPartitions), and the users tallies' top items per
	// partition, UsersTop x P / np, so that a list's tally has room for
	// as many items whatever its partitions.
	off, np, usersTop int
	counters          []*summary.Counter // by partition, nil until used
	pairs             [][]pair           // by partition: counted (item, user) pairs, with UsersTop
	// cands, by partition (nil until used): the biggest items of the
	// summaries flushed since the last tally, by item hash, counts summed;
	// at most 4 x UsersTop each (see stash).
	cands []map[uint64]summary.Counted
}

// recentGroups is the size of group's cache (8 KiB): more than the
// groups of a bucket at the default workload (3 types x 101 scopes).
const (
	recentBits   = 10
	recentGroups = 1 << recentBits
)

// anonymous tells an event without an account (its user hash is its
// event_id's) from an account of the same name.
const anonymous = 0x5bd1e9955bd1e995

// pair is one counted event's item and (trust-sampled) user hashes.
type pair struct{ item, user uint64 }

func (fn *preaggFn) Setup() error {
	fn.cfg = summary.Config{N: fn.N, SketchWidth: fn.SketchW, SketchDepth: fn.SketchD}
	fn.val = schemas.Validator{MaxFuture: time.Duration(fn.MaxFutureMs) * time.Millisecond}
	if len(fn.Types) > 0 {
		fn.val.Types = make(map[string]bool, len(fn.Types))
		for _, t := range fn.Types {
			fn.val.Types[t] = true
		}
	}
	fn.groups = make(map[groupKey]*group)
	fn.parked, fn.parking = make(map[partKey][]*summary.Counter), make(map[partKey][]*summary.Counter)
	if fn.Rules != nil {
		// The files are read once per instance; Watch is not started, so
		// that the counts keep the version the lists carry (a changed file
		// takes effect when the job is restarted or updated).
		r, err := rules.New(*fn.Rules)
		if err != nil {
			return fmt.Errorf("preagg: %w", err)
		}
		if v := r.Version(); v != fn.RulesVersion {
			slog.Warn("preagg: the rule files changed since the job was built; lists carry the old version", "built", fn.RulesVersion, "now", v)
		}
		fn.filter = r.NewFilter()
		fn.filter.RetriesByBeacon(fn.BeaconsOnce)
	}
	return nil
}

func (fn *preaggFn) StartBundle(_ context.Context, _, _ func(beam.EventTime, string, []byte), _ func(schemas.DeadLetter)) {
}

func (fn *preaggFn) ProcessElement(ctx context.Context, et beam.EventTime, beacon []byte, emit, tallies func(beam.EventTime, string, []byte), dead func(schemas.DeadLetter)) error {
	r := &fn.reader
	if err := r.Reset(beacon); err != nil {
		fn.nBadB++
		dead(schemas.DeadLetter{Stage: "decode", Reason: err.Error(), Payload: truncate(beacon), At: et.ToTime().UTC()})
		return nil
	}
	now := et.ToTime()
	clock := int64(et)
	if fn.filter != nil {
		fn.filter.Advance(now)
		fn.filter.Beacon(r.BeaconID())
	}
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
		w := 1.0 // the trust weight is for the users tallies; counts add 1
		if fn.filter != nil {
			var why rules.Reason
			if w, why = fn.filter.Check(&e); why != rules.OK {
				continue // counted by reason in FinishBundle
			}
		}
		var uh uint64 // 0: not in the tallies
		if fn.UsersTop > 0 {
			// An event without an account is a user of its own (its
			// event_id's hash): anonymous views count as events do.
			h := users.Hash(e.User)
			if e.User == "" {
				h = users.Hash(e.EventID) ^ anonymous
			}
			if users.Keep(h, w) {
				uh = h | 1 // never 0
			}
		}
		fn.nEvents++
		h := summary.Hash(e.Item)
		pAll := summary.Partition(h, fn.Partitions) // the partition in lists that use all P
		scopes := fn.scopes[:0]
		if fn.Scopes {
			scopes = e.Scopes(fn.scopes)
		} else {
			scopes = append(scopes, schemas.ScopeGlobal)
		}
		fn.scopes = scopes
		for _, sc := range scopes {
			g := fn.group(e.Type, sc, bucket)
			p := pAll
			if g.np != fn.Partitions {
				p = (g.off + summary.Partition(h, g.np)) % fn.Partitions
			}
			c := g.counters[p]
			if c == nil {
				c = fn.counter(g, p)
				g.counters[p] = c
			}
			a := pendingAdd{c: c, item: e.Item, h: h}
			if uh != 0 {
				if g.pairs == nil {
					g.pairs = make([][]pair, fn.Partitions)
				}
				if g.pairs[p] == nil {
					g.pairs[p] = fn.pairSlice()
				}
				a.pairs, a.uh = &g.pairs[p], uh // appended with the Add
				fn.pairs++
			}
			fn.adds = append(fn.adds, a)
		}
		if len(fn.adds) >= addBatch {
			fn.applyAdds()
		}
		if fn.pairs >= fn.MaxPairs {
			fn.flush(emit, tallies, true)
		} else if fn.distinct >= fn.MaxDistinct {
			// The groups kept for their tally are bounded as keys are: a
			// flood of distinct scopes (a region is checked for its form
			// only) or buckets makes a group per event, and keeping them
			// all until MaxPairs would hold up to MaxPairs groups. Past
			// MaxDistinct/2 groups the tallies go out now, as they did at
			// every summary flush before tallies were per bundle; a
			// normal bundle has a few hundred (lists x buckets).
			fn.flush(emit, tallies, len(fn.groups) > fn.MaxDistinct/2)
		}
	}
	fn.applyAdds() // before the beacon's bytes, which the items point into, go
	if err := r.Err(); err != nil {
		// The events before the error were counted; the beacon is kept whole.
		fn.nBadB++
		dead(schemas.DeadLetter{Stage: "decode", Reason: err.Error(), Payload: truncate(beacon), At: now.UTC()})
	}
	return nil
}

// pendingAdd is an event's count of one in one counter, not yet made,
// and its (item, user) pair for the list's partition, not yet appended.
// item points into the beacon being read.
type pendingAdd struct {
	c    *summary.Counter
	item string
	h    uint64
	// pairs, when not nil, is the group's pair slice of the partition
	// (&group.pairs[p], stable until the next flush, which makes the
	// pending Adds first), which gets {h, uh}.
	pairs *[]pair
	uh    uint64
}

// addBatch is how many counter Adds ProcessElement collects before it
// makes them (applyAdds): about 85 events of three scopes, whose slots'
// cache lines (256 x 64 bytes, twice that with their items) stay in a
// core's L2 until their Adds come. The rules' tables were peeked at the
// same way (a batch of events read, each one's filter state peeked at
// before the first was checked): no gain in BenchmarkPreaggScale, six
// pairs of runs, so not kept.
const addBatch = 256

// applyAdds makes the pending Adds. It first peeks at every one's slot
// (summary.Counter.Peek): with every scope, the thousands of counters a
// bundle fills are far larger than the caches, and each Add made on its
// own waited for one or two cache misses in turn (Counter.Add was 32% of
// BenchmarkPreaggScale, nearly all of it on its first load), and the
// slot each pending (item, user) pair goes to. The distinct keys it adds
// count towards MaxDistinct, so a flush for MaxDistinct comes at most a
// batch late.
func (fn *preaggFn) applyAdds() {
	if len(fn.adds) == 0 {
		return
	}
	var sink uint64
	for i := range fn.adds {
		a := &fn.adds[i]
		sink += a.c.Peek(a.h)
		if a.pairs != nil {
			// The pair's slot: a store into a cold line of one of
			// thousands of slices (the append on its own was 5.6% of a
			// 200k events/s profile).
			if ps := *a.pairs; len(ps) < cap(ps) {
				sink += ps[:len(ps)+1][len(ps)].item
			}
		}
	}
	fn.sink = sink
	for i := range fn.adds {
		a := &fn.adds[i]
		before := a.c.Len()
		a.c.Add(a.item, a.h, 1)
		fn.distinct += a.c.Len() - before
		if a.pairs != nil {
			*a.pairs = append(*a.pairs, pair{a.h, a.uh})
			a.pairs = nil
		}
		a.item = ""
	}
	fn.adds = fn.adds[:0]
}

// group returns the group for (typ, scope, bucket), creating it. The
// strings may point into the beacon: they are cloned before being kept as
// a map key. Groups are found first in a direct-mapped cache by a cheap
// hash of the key's first bytes (groupSlot), then in the map: with every
// scope, an event's country and region groups change from event to
// event, and a cache of the last four groups of each scope position
// missed for most of them, so that group was 4.7% of a 1M events/s
// profile, nearly all of it the map's hashing of two strings
// (BENCHMARKS.md, "Where 1M events/s goes now, and groups found by a
// cheap hash").
func (fn *preaggFn) group(typ, scope string, bucket int64) *group {
	slot := &fn.recent[groupSlot(typ, scope, bucket)]
	if g := *slot; g != nil && g.key.bucket == bucket && g.key.scope == scope && g.key.typ == typ {
		return g
	}
	k := groupKey{typ: typ, scope: scope, bucket: bucket}
	g, ok := fn.groups[k]
	if !ok {
		k = groupKey{typ: strings.Clone(typ), scope: strings.Clone(scope), bucket: bucket}
		g = &group{key: k, counters: make([]*summary.Counter, fn.Partitions), np: fn.Partitions}
		if np := fn.scopeParts(scope); np < fn.Partitions {
			g.np = np
			g.off = summary.Partition(summary.Hash(ListKey(typ, scope)), fn.Partitions)
		}
		g.usersTop = fn.UsersTop * fn.Partitions / g.np
		fn.groups[k] = g
	}
	*slot = g
	return g
}

// groupSlot is (typ, scope, bucket)'s slot in group's cache: a multiply
// of the first eight bytes of scope (a region code, a country, "global"),
// its length, typ's first two bytes and length, and the bucket. Keys it
// confuses only share a slot; group compares the whole key.
func groupSlot(typ, scope string, bucket int64) int {
	var v uint64
	for i := range min(len(scope), 8) {
		v |= uint64(scope[i]) << (8 * i)
	}
	t := uint64(len(typ)) | uint64(len(scope))<<8
	if len(typ) > 0 {
		t |= uint64(typ[0]) << 16
	}
	if len(typ) > 1 {
		t |= uint64(typ[1]) << 24
	}
	m := (v ^ t<<32 ^ t) * 0x9e3779b97f4a7c15
	m ^= uint64(bucket) * 0xc2b2ae3d27d4eb4f
	m *= 0x9e3779b97f4a7c15
	return int(m >> (64 - recentBits))
}

// scopeParts is how many of the P partitions scope's lists use
// (Config.RegionPartitions, Config.CountryPartitions).
func (fn *preaggFn) scopeParts(scope string) int {
	return schemas.Partitions{P: fn.Partitions, Region: fn.RegionParts, Country: fn.CountryParts}.Of(scope)
}

// partKey is a list's partition: where a counter is parked.
type partKey struct {
	typ, scope string
	p          int
}

// counter returns a counter for g's partition p: the one the last flush
// parked for that list and partition, else a new one.
func (fn *preaggFn) counter(g *group, p int) *summary.Counter {
	k := partKey{g.key.typ, g.key.scope, p}
	if cs := fn.parked[k]; len(cs) > 0 {
		c := cs[len(cs)-1]
		cs[len(cs)-1] = nil
		fn.parked[k] = cs[:len(cs)-1]
		return c
	}
	return summary.NewCounter(fn.MaxDistinct)
}

// pairSlice returns an empty pair slice, reused when one is free, else
// nil (append allocates as it goes: a group of one pair stays small).
func (fn *preaggFn) pairSlice() []pair {
	if n := len(fn.freePairs); n > 0 {
		ps := fn.freePairs[n-1]
		fn.freePairs = fn.freePairs[:n-1]
		fn.freeCap -= cap(ps)
		return ps
	}
	return nil
}

// freePairSlice keeps ps for reuse while the free slices' capacity stays
// within 2 x MaxPairs (a bundle holds at most MaxPairs pairs before it
// flushes, and a slice at most twice what it held); past that it is left
// to the collector, so the pool is bounded however slices grow.
func (fn *preaggFn) freePairSlice(ps []pair) {
	if fn.freeCap+cap(ps) > 2*fn.MaxPairs {
		return
	}
	fn.freePairs = append(fn.freePairs, ps[:0])
	fn.freeCap += cap(ps)
}

// flush emits one summary set per (bucket, partition) holding a summary per
// list with events there, and resets the counters. With withTallies it
// also emits each (list, bucket)'s users tally and forgets the groups;
// without, a group's pairs are kept for the next tally, and its counters'
// biggest items with them as candidates (stash).
func (fn *preaggFn) flush(emit, tallies func(beam.EventTime, string, []byte), withTallies bool) {
	fn.applyAdds() // the pending counts, before their counters are summarised and reset
	type out struct {
		keys []string
		sums []*summary.Summary
	}
	outs := map[[2]int64]*out{}
	for k, g := range fn.groups {
		var t *users.TallyWriter // the group's users, over its partitions
		keep := false            // pairs stay for a later tally
		for p, c := range g.counters {
			var top []summary.Counted
			if c != nil && c.Len() > 0 {
				ok := [2]int64{k.bucket, int64(p)}
				o := outs[ok]
				if o == nil {
					o = &out{}
					outs[ok] = o
				}
				sm := c.Summary(fn.cfg)
				o.keys = append(o.keys, ListKey(k.typ, k.scope))
				o.sums = append(o.sums, sm)
				if g.pairs != nil && len(g.pairs[p]) > 0 {
					if g.usersTop <= len(sm.Entries) || len(sm.Entries) == c.Len() {
						fn.topBuf = summaryTop(fn.topBuf, sm, g.usersTop)
					} else {
						// More items wanted than the summary keeps
						// (UsersTop > N): from the counter, whose names
						// its reset reuses.
						fn.topBuf = c.TopInto(fn.topBuf, g.usersTop)
						for i := range fn.topBuf {
							fn.topBuf[i].Item = strings.Clone(fn.topBuf[i].Item)
						}
					}
					top = fn.topBuf
				}
			}
			if g.pairs != nil && len(g.pairs[p]) > 0 {
				if !withTallies {
					fn.stash(g, p, top)
					keep = true
				} else {
					if t == nil {
						if fn.tw == nil {
							fn.tw = users.NewTallyWriter()
						}
						t = fn.tw
						t.Reset()
					}
					fn.addTally(t, fn.tallyTop(g, p, top), g.pairs[p])
				}
			}
			if withTallies {
				if g.pairs != nil && g.pairs[p] != nil {
					fn.freePairSlice(g.pairs[p])
					g.pairs[p] = nil
				}
				if g.cands != nil {
					g.cands[p] = nil
				}
			}
			if c != nil {
				c.Reset()
				pk := partKey{k.typ, k.scope, p}
				fn.parking[pk] = append(fn.parking[pk], c)
				g.counters[p] = nil
			}
		}
		if t != nil {
			b, err := t.AppendBinary(nil)
			if err != nil {
				panic(err) // fresh sketches: cannot fail
			}
			tallies(beam.EventTime(k.bucket), ListKey(k.typ, k.scope), b)
			fn.nTallies++
			fn.nTallyBytes += int64(len(b))
		}
		if !keep {
			delete(fn.groups, k)
		}
	}
	for k, o := range outs {
		var err error
		fn.buf, err = summary.AppendSet(fn.buf[:0], o.keys, o.sums)
		if err != nil {
			panic(err) // distinct lists, valid summaries: cannot fail
		}
		emit(beam.EventTime(k[0]), PartitionKey(int(k[1])), append([]byte(nil), fn.buf...))
		fn.nSets++
		fn.nSetBytes += int64(len(fn.buf))
	}
	clear(fn.parked) // not taken since the last flush: dropped
	fn.parked, fn.parking = fn.parking, fn.parked
	clear(fn.recent[:])
	fn.distinct = 0
	if withTallies {
		fn.pairs = 0
	}
}

// summaryTop returns the n biggest entries of sm, the summary a counter
// just built (its entries' counts are exact, Lo = Hi), as Counted items in
// buf's memory. A counter's summary keeps its N biggest items in the order
// of CompareCounted (count, then hash), so for n <= N these are exactly
// the counter's Top(n), taken from at most N entries instead of a second
// pass over every item counted (Counter.TopInto was 1.8 s of a 90 s
// profile at 400k events/s, every scope, where bundles flush their
// summaries many times); and the names are the summary's own strings, so
// they outlive the counter's reset without a copy (stash keeps them).
func summaryTop(buf []summary.Counted, sm *summary.Summary, n int) []summary.Counted {
	all := slices.Grow(buf[:0], len(sm.Entries))
	for _, e := range sm.Entries {
		all = append(all, summary.Counted{Item: e.Item, Hash: e.Hash, Count: e.Lo})
	}
	return summary.SelectTop(all, n)
}

// stash keeps top (a counter's biggest items, from summaryTop: their
// names outlive the counter) as candidates for partition p's next tally, adding to the counts of
// those already kept. Past 4 x g.usersTop candidates it keeps the 2 x
// g.usersTop biggest, so a bundle of many summary flushes holds a bounded
// number.
func (fn *preaggFn) stash(g *group, p int, top []summary.Counted) {
	if len(top) == 0 {
		return
	}
	if g.cands == nil {
		g.cands = make([]map[uint64]summary.Counted, fn.Partitions)
	}
	m := g.cands[p]
	if m == nil {
		m = make(map[uint64]summary.Counted, len(top))
		g.cands[p] = m
	}
	for _, it := range top {
		if c, ok := m[it.Hash]; ok {
			c.Count += it.Count
			m[it.Hash] = c
		} else {
			m[it.Hash] = it
		}
	}
	if len(m) > 4*g.usersTop {
		all := slices.Grow(fn.candBuf[:0], len(m))
		defer func() { fn.candBuf = all[:0] }()
		for _, c := range m {
			all = append(all, c)
		}
		keep := summary.SelectTop(all, 2*g.usersTop)
		for _, c := range all[len(keep):] {
			delete(m, c.Hash)
		}
	}
}

// tallyTop returns partition p's g.usersTop biggest items for its tally: the
// candidates stashed from earlier summary flushes and the current
// counter's top (nil if it has none), counts added where they meet. It
// uses the candidates up.
func (fn *preaggFn) tallyTop(g *group, p int, top []summary.Counted) []summary.Counted {
	if g.cands == nil || len(g.cands[p]) == 0 {
		return top
	}
	m := g.cands[p]
	all := slices.Grow(fn.candBuf[:0], len(top)+len(m))
	defer func() { fn.candBuf = all[:0] }()
	for _, it := range top {
		if c, ok := m[it.Hash]; ok {
			it.Count += c.Count
			delete(m, it.Hash)
		}
		all = append(all, it)
	}
	for _, c := range m {
		all = append(all, c)
	}
	g.cands[p] = nil
	return summary.SelectTop(all, g.usersTop)
}

// addTally adds one partition's users to its (list, bucket)'s tally t:
// the users of top, the partition's UsersTop biggest items (a partition's
// items are its own, so the partitions' entries never meet, and each item
// is added to t once), and into Pairs the pairs of the other items and of
// top items whose users turn into a HyperLogLog (the pairs of a top item
// whose users stay a set are implied by that set: users.TallyWriter). One
// pass over ps in arrival order (a second over the few pairs of dense
// top items, if any): sketches ignore repeats, so the pairs need no
// sorting or dedupe (sorting and searching them was about half of this
// function's time in BenchmarkPreagg/all+users).
func (fn *preaggFn) addTally(t *users.TallyWriter, top []summary.Counted, ps []pair) {
	fn.tops.reset(top)
	if len(fn.sketches) < len(top) {
		fn.sketches = make([]users.Sketch, len(top))
	}
	for i := range top {
		fn.sketches[i].ResetTally()
	}
	for _, q := range ps {
		if i := fn.tops.get(q.item); i >= 0 {
			fn.sketches[i].AddHash(q.user)
		} else {
			t.Pairs.AddHash(users.PairHash(q.user, q.item))
		}
	}
	dense := false
	for i := range top {
		if !fn.sketches[i].IsSet() {
			dense = true
		}
	}
	if dense {
		for _, q := range ps {
			if i := fn.tops.get(q.item); i >= 0 && !fn.sketches[i].IsSet() {
				t.Pairs.AddHash(users.PairHash(q.user, q.item))
			}
		}
	}
	for i, it := range top {
		// An entry only if one of its events has a user.
		if u := &fn.sketches[i]; !u.Empty() {
			if err := t.Add(it.Item, it.Count, u); err != nil {
				panic(err) // fresh sketches of one precision: cannot fail
			}
		}
	}
}

// topIndex maps the hashes of a tally's top items (distinct: a counter's
// entries) to their index in top. It is looked up once per (item, user)
// pair, so it is an open-addressing table of at least 4 slots per item,
// a few KB that stay in cache, instead of a Go map: the map's lookups were
// a third of addTally's time (2.7 of 8.0 CPU-s at 1M events/s, one scope).
type topIndex struct {
	keys  []uint64
	idx   []int32 // index in top; -1: an empty slot
	shift uint8
}

// reset empties the table and adds top's items.
func (t *topIndex) reset(top []summary.Counted) {
	bits := uint8(4)
	for 1<<bits < 4*len(top) {
		bits++
	}
	n := 1 << bits
	if cap(t.keys) < n {
		t.keys, t.idx = make([]uint64, n), make([]int32, n)
	}
	t.keys, t.idx = t.keys[:n], t.idx[:n]
	for i := range t.idx {
		t.idx[i] = -1
	}
	t.shift = 64 - bits
	mask := uint64(n - 1)
	for i, it := range top {
		j := t.slot(it.Hash)
		for t.idx[j] >= 0 {
			j = (j + 1) & mask
		}
		t.keys[j], t.idx[j] = it.Hash, int32(i)
	}
}

// slot is h's first slot: the top bits of a multiplicative hash (the items
// of one partition share bits of summary.Partition's mix, not of this one).
func (t *topIndex) slot(h uint64) uint64 { return (h * 0x9e3779b97f4a7c15) >> t.shift }

// get returns h's index in top, or -1.
func (t *topIndex) get(h uint64) int32 {
	mask := uint64(len(t.idx) - 1)
	for j := t.slot(h); ; j = (j + 1) & mask {
		i := t.idx[j]
		if i < 0 || t.keys[j] == h {
			return i
		}
	}
}

func (fn *preaggFn) FinishBundle(ctx context.Context, emit, tallies func(beam.EventTime, string, []byte), _ func(schemas.DeadLetter)) {
	fn.flush(emit, tallies, true)
	flushes.Inc(ctx, 1)
	eventsCounter.Inc(ctx, fn.nEvents)
	badBeacons.Inc(ctx, fn.nBadB)
	badEvents.Inc(ctx, fn.nBadE)
	lateDropped.Inc(ctx, fn.nLate)
	stagemetrics.Preagg(fn.nEvents, fn.nBadB, fn.nBadE, fn.nLate)
	fn.nEvents, fn.nBadB, fn.nBadE, fn.nLate = 0, 0, 0, 0
	if fn.nSets > 0 {
		setsCounter.Inc(ctx, fn.nSets)
		setBytesCounter.Inc(ctx, fn.nSetBytes)
		stagemetrics.PreaggSets(fn.nSets, fn.nSetBytes)
		fn.nSets, fn.nSetBytes = 0, 0
	}
	if fn.nTallies > 0 {
		talliesCounter.Inc(ctx, fn.nTallies)
		tallyBytesCounter.Inc(ctx, fn.nTallyBytes)
		stagemetrics.TrendTallies(fn.nTallies, fn.nTallyBytes)
		fn.nTallies, fn.nTallyBytes = 0, 0
	}
	if fn.filter != nil {
		st := fn.filter.TakeStats()
		for r := rules.OK + 1; r < rules.NumReasons; r++ {
			if n := st.Events[r]; n > 0 {
				rulesDropped[r].Inc(ctx, int64(n))
				stagemetrics.RulesDropped(r.String(), int64(n))
			}
		}
		if st.Unchecked > 0 {
			rulesUnchecked.Inc(ctx, int64(st.Unchecked))
		}
		if st.Untracked > 0 {
			rulesUntracked.Inc(ctx, int64(st.Untracked))
		}
		if st.Forgotten > 0 {
			rulesForgotten.Inc(ctx, int64(st.Forgotten))
		}
		if st.Redelivered > 0 {
			rulesRedelivered.Inc(ctx, int64(st.Redelivered))
		}
		stagemetrics.RulesUnverified(st.Unchecked, st.Untracked, st.Forgotten)
	}
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
