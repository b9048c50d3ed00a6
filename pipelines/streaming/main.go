// Command streaming runs topk's fast path: the streaming Beam job that turns
// beacons into 1m, 5m and 1h lists in Redis (and files with --lists_out).
//
//	go run ./pipelines/streaming --source=file:events.ndjson.gz --lists_out=/tmp/lists
//	go run ./pipelines/streaming --source=synthetic:rate=200000,duration=2m
//	go run ./pipelines/streaming --source=pubsub:projects/P/subscriptions/S
//
// The runner is Beam's --runner flag: Prism in-process by default,
// --runner=universal --endpoint=HOST:PORT --environment_type=LOOPBACK for a
// portable job server (Flink's, or a standalone Prism), --runner=dataflow
// --project --region --staging_location for Dataflow (--dry_run translates
// offline). A finite run prints one line of JSON with what it did.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners"

	"github.com/topk-dev/topk/internal/prismopt"
	"github.com/topk-dev/topk/internal/recoverylog"
	"github.com/topk-dev/topk/internal/redisx"
	"github.com/topk-dev/topk/pipelines/fastpath"
	"github.com/topk-dev/topk/pipelines/internal/beamrun"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/preagg"
	"github.com/topk-dev/topk/transforms/publish/liststore"
	"github.com/topk-dev/topk/transforms/rules"
	"github.com/topk-dev/topk/transforms/source"
	"github.com/topk-dev/topk/transforms/trend/trendbeam"
)

// Flags holds the command line; Config turns it into a fastpath.Config.
type Flags struct {
	Source          string
	Partitions      int
	RegionParts     int
	CountryParts    int
	AllowedLateness time.Duration
	K, Margin       int
	SummaryN        int
	MinuteN         int
	AggN            int
	SketchWidth     int
	SketchDepth     int
	MaxDistinct     int
	MaxPairs        int
	Types           string
	Scopes          bool
	Windows         string
	MinCount        string
	Shards          int
	DurableWindows  OptBool
	Redis           string
	RedisPrefix     string
	ListsOut        string
	DeadLetterDir   string
	PubsubEndpoint  string
	CPUProfile      string
	CPUProfileFrom  time.Duration
	CPUProfileTo    time.Duration
	HeapProfile     string
	BundleTime      time.Duration
	MemoryLimitMB   int
	Long            bool
	LongIdle        time.Duration
	BTProject       string
	BTInstance      string
	MetricsAddr     string
	RecoveryLog     bool
	RecoveryHorizon time.Duration
	Trending        bool
	Trend           trendbeam.Config
	UsersTop        int
	Rules           *rules.Config // --rules, --bots, --cap, ...: all rules by default
}

// Register defines the flags on fs with their defaults.
func (f *Flags) Register(fs *flag.FlagSet) {
	d := fastpath.DefaultConfig()
	fs.StringVar(&f.Source, "source", "", "pubsub:projects/P/subscriptions/S | file:PATH[?beacon=B,slack=D] | synthetic:rate=R,duration=D,items=N,zipf=S,seed=X,beacon=B")
	fs.IntVar(&f.Partitions, "partitions", d.Preagg.Partitions, "counter partitions P (item lives in hash(item) mod P)")
	fs.IntVar(&f.RegionParts, "region_partitions", d.Preagg.RegionPartitions, "partitions each region's lists use, of the P (fewer: less window state for the many small lists); 0 or P: all. Like --partitions, change it with a new job, not an update")
	fs.IntVar(&f.CountryParts, "country_partitions", d.Preagg.CountryPartitions, "partitions each country's lists use, of the P (as --region_partitions; less window state, but a big country's list keeps fewer entries: see transforms/preagg); 0 or P: all. Change it with a new job, not an update")
	fs.DurationVar(&f.AllowedLateness, "allowed_lateness", d.Preagg.AllowedLateness, "events later than this are left to the exact path")
	fs.IntVar(&f.K, "k", d.Lists.K, "list depth K (complete means certified to K)")
	fs.IntVar(&f.Margin, "margin", d.Lists.Margin, "entries published beyond K, so takedowns keep lists full")
	fs.IntVar(&f.SummaryN, "summary_n", d.Preagg.Summary.N, "entries tracked per (list, partition, bucket) summary")
	fs.IntVar(&f.MinuteN, "minute_n", d.MinuteN, "entries a closed minute keeps per (list, partition), and so the 1h window's aggregates; 0: a quarter of summary_n, at least four times (K + margin) / the fewest partitions a list has (region_partitions or country_partitions when set); summary_n or more: no cut")
	fs.IntVar(&f.AggN, "agg_n", d.AggN, "entries each window's aggregates keep per (list, partition); 0: as minute_n's default; summary_n or more: no cut")
	fs.IntVar(&f.SketchWidth, "sketch_width", d.Preagg.Summary.SketchWidth, "count-min sketch width (power of two; 0: no sketch)")
	fs.IntVar(&f.SketchDepth, "sketch_depth", d.Preagg.Summary.SketchDepth, "count-min sketch depth")
	fs.IntVar(&f.MaxDistinct, "max_distinct", d.Preagg.MaxDistinct, "distinct keys held per bundle before an early flush")
	fs.IntVar(&f.MaxPairs, "max_pairs", d.Preagg.MaxPairs, "(item, user) pairs held per bundle for trending's users tallies before an early flush of the tallies (16 bytes each)")
	fs.StringVar(&f.Types, "types", "", "comma-separated item types to accept (empty: any well-formed type)")
	fs.BoolVar(&f.Scopes, "scopes", d.Preagg.Scopes, "count every event in its country and region lists too, besides global (false: global lists only)")
	fs.StringVar(&f.Windows, "windows", "1m,5m,1h", "windows to publish")
	fs.StringVar(&f.MinCount, "min_count", formatMinCount(d.MinCount), "per window, the smallest count a country or region list shows (WINDOW=N,...; global lists show every entry)")
	fs.IntVar(&f.Shards, "shards", 4, "list merge groups per window (parallelism of the merge across partitions)")
	fs.Var(&f.DurableWindows, "durable_windows", "keep the sliding windows' panes in Beam state, so a lost worker's windows are rebuilt on Dataflow/Flink (default: true, except on Prism in this process, whose state dies with the process: there the panes only cost memory)")
	fs.StringVar(&f.Redis, "redis", "", "Redis address (default $REDIS_ADDR; an embedded server when both are empty; none: no Redis, lists only to --lists_out)")
	fs.StringVar(&f.RedisPrefix, "redis_prefix", "", "Redis key prefix (default topk)")
	fs.StringVar(&f.ListsOut, "lists_out", "", "also write every list version to DIR/{type}/{scope}/{window}/{as_of ms}.json")
	fs.StringVar(&f.DeadLetterDir, "dead_letter_dir", "", "write dead letters here as NDJSON (default LISTS_OUT/deadletter)")
	fs.StringVar(&f.PubsubEndpoint, "pubsub_endpoint", "", "Pub/Sub emulator host:port (default $PUBSUB_EMULATOR_HOST)")
	fs.BoolVar(&f.Long, "long", false, "also publish the 24h and all lists: the exact tables (Bigtable, BIGTABLE_EMULATOR_HOST or --bigtable_*) stitched with the open hours")
	fs.DurationVar(&f.LongIdle, "long_idle", 0, "with --long: how long after a list's last hour with data its open hours are still reported each minute (0: 26h; a bounded replay wants a few minutes)")
	fs.StringVar(&f.BTProject, "bigtable_project", "topk-local", "Bigtable project of the exact tables (--long) and the recovery log (--recovery_log)")
	fs.StringVar(&f.BTInstance, "bigtable_instance", "topk", "Bigtable instance of the exact tables (--long) and the recovery log (--recovery_log)")
	fs.IntVar(&f.MemoryLimitMB, "memory_limit_mb", 0, "Go heap soft limit in MiB (runtime/debug.SetMemoryLimit; GOMEMLIMIT overrides). 0: 75% of the container's memory limit (cgroup), else of the machine's memory; -1: none. A limit below the job's live heap costs more CPU than it saves memory (the collector runs back to back): see setMemoryLimit")
	fs.BoolVar(&f.Trending, "trending", d.Trending, "score the 5m lists into trending lists per (type, scope) (window \"trending\")")
	f.Trend = d.Trend
	fs.DurationVar(&f.Trend.Every, "trend_every", d.Trend.Every, "trending: score the 5m lists this often (a multiple of 10s, at most 5m)")
	fs.DurationVar(&f.Trend.Trend.HalfLife, "trend_half_life", d.Trend.Trend.HalfLife, "trending: half-life of an item's decayed peak score")
	fs.Uint64Var(&f.Trend.Trend.MinCount, "trend_min_count", d.Trend.Trend.MinCount, "trending: smallest 5-minute count that may score")
	fs.Uint64Var(&f.Trend.Trend.MinTrack, "trend_min_track", d.Trend.Trend.MinTrack, "trending: smallest 5-minute count an item needs to be tracked (given history), at most --trend_min_count; less is treated as absent. 0 or 1: every item")
	fs.Float64Var(&f.Trend.Trend.FloorPerHour, "trend_floor", d.Trend.Trend.FloorPerHour, "trending: smoothing floor, events an hour an item without history is assumed to have")
	fs.Float64Var(&f.Trend.Trend.Enter, "trend_enter", d.Trend.Trend.Enter, "trending: score to enter the list")
	fs.Float64Var(&f.Trend.Trend.Leave, "trend_leave", d.Trend.Trend.Leave, "trending: score below which a listed item leaves (hysteresis; <= --trend_enter)")
	fs.IntVar(&f.Trend.Trend.Size, "trend_size", d.Trend.Trend.Size, "trending: most items a trending list holds")
	fs.BoolVar(&f.Trend.Trend.Seasonal, "trend_seasonal", d.Trend.Trend.Seasonal, "trending: baseline from the same hour last week instead of the whole week's highest share")
	fs.DurationVar(&f.Trend.Trend.WarmUp, "trend_warm_up", d.Trend.Trend.WarmUp, "trending: history a list needs before it lists anything")
	fs.StringVar(&f.Trend.Trend.Counts, "trend_counts", d.Trend.Trend.Counts, "trending: what an item's share counts: users (distinct trusted users, HyperLogLog per warm item) or events")
	fs.IntVar(&f.UsersTop, "trend_users_top", d.Preagg.UsersTop, "trending by users: items per (list, partition, 10s bucket) whose distinct users are sketched")
	fs.BoolVar(&f.RecoveryLog, "recovery_log", true, "with a pubsub source (not on Dataflow): log every message to Bigtable (table fastlog in --bigtable_instance) before acknowledging it, and replay the log's last --recovery_horizon at start, so a crashed job restarts without losing or double-counting a message")
	fs.DurationVar(&f.RecoveryHorizon, "recovery_horizon", 0, "how much publish time before its start a run replays from the recovery log (0: the longest window plus the allowed lateness and a bucket)")
	fs.StringVar(&f.MetricsAddr, "metrics_addr", "", "serve Prometheus metrics (publish lag, list age, pointer moves, per-stage event and dead-letter counters, recovery log) on this address at /metrics")
	fs.StringVar(&f.CPUProfile, "cpuprofile", "", "write a CPU profile of the whole run (Prism runs in-process) to this file")
	fs.DurationVar(&f.CPUProfileFrom, "cpuprofile_from", 0, "with --cpuprofile: start profiling this long after the job starts (a steady-state profile, without start-up)")
	fs.DurationVar(&f.CPUProfileTo, "cpuprofile_to", 0, "with --cpuprofile: stop profiling this long after the job starts (0: at its end)")
	fs.DurationVar(&f.BundleTime, "bundle_time", time.Second, "how long a Pub/Sub or synthetic call (bundle) emits when its checkpoint may close a 10 s bucket; the other calls run until one can, so a bucket costs one to four pre-aggregation flushes, not one per bundle_time (each bundle ends in one flush: longer is less work per event and more latency)")
	fs.StringVar(&f.HeapProfile, "heapprofile", "", "write the heap profile at the run's largest in-use heap (checked every 10s; Prism's state is in it) to this file")
	rd := preagg.DefaultRules() // the exact command's rules, with smaller stream state
	f.Rules = rules.RegisterFlagsWith(fs, "", rd)
}

// Config validates the flags into a fastpath configuration (redisAddr is the
// resolved Redis address, "" for none).
func (f *Flags) Config(redisAddr string) (fastpath.Config, error) {
	cfg := fastpath.DefaultConfig()
	if f.Source == "" {
		return cfg, fmt.Errorf("--source is required (file:PATH, synthetic:..., pubsub:projects/P/subscriptions/S)")
	}
	if f.CPUProfileFrom < 0 || f.CPUProfileTo < 0 || (f.CPUProfileTo > 0 && f.CPUProfileTo <= f.CPUProfileFrom) {
		return cfg, fmt.Errorf("--cpuprofile_from %v, --cpuprofile_to %v: want 0 <= from < to (or to 0: the end)", f.CPUProfileFrom, f.CPUProfileTo)
	}
	spec, err := source.ParseSpec(f.Source)
	if err != nil {
		return cfg, err
	}
	if spec.Kind == source.KindFile {
		// Here, not on a worker: a missing file would fail every bundle.
		if _, err := os.Stat(spec.File.Path); err != nil {
			return cfg, fmt.Errorf("--source: %w", err)
		}
	}
	cfg.Source = spec
	cfg.SourceOpts = source.Options{Runner: *runners.Runner, PubsubEndpoint: f.PubsubEndpoint, BundleTime: f.BundleTime}
	cfg.Preagg.Partitions = f.Partitions
	cfg.Preagg.RegionPartitions = f.RegionParts
	cfg.Preagg.CountryPartitions = f.CountryParts
	cfg.Preagg.AllowedLateness = f.AllowedLateness
	cfg.Preagg.Summary.N = f.SummaryN
	cfg.MinuteN, cfg.AggN = f.MinuteN, f.AggN
	cfg.Preagg.Summary.SketchWidth = f.SketchWidth
	cfg.Preagg.Summary.SketchDepth = f.SketchDepth
	if f.SketchWidth == 0 {
		cfg.Preagg.Summary.SketchDepth = 0
	}
	cfg.Preagg.MaxDistinct = f.MaxDistinct
	cfg.Preagg.MaxPairs = f.MaxPairs
	cfg.Preagg.Scopes = f.Scopes
	cfg.Preagg.UsersTop = f.UsersTop
	if f.Rules != nil { // validated with the rest by cfg.Validate
		rc := *f.Rules
		cfg.Preagg.Rules = &rc
	}
	if f.Types != "" {
		cfg.Preagg.Types = strings.Split(f.Types, ",")
	}
	cfg.Lists.K, cfg.Lists.Margin = f.K, f.Margin
	cfg.Windows = nil
	for _, w := range strings.Split(f.Windows, ",") {
		cfg.Windows = append(cfg.Windows, schemas.Window(strings.TrimSpace(w)))
	}
	if cfg.MinCount, err = parseMinCount(f.MinCount); err != nil {
		return cfg, err
	}
	cfg.Shards = f.Shards
	// Panes in Beam state rebuild a lost worker's windows; on Prism in
	// this process nothing outlives the process to rebuild from, and the
	// panes held a sixth of the peak memory at 500k events/s (BENCHMARKS.md,
	// "Prism's state without the panes").
	cfg.Durable = f.DurableWindows.Or(!prismopt.InProcess())
	cfg.Trending, cfg.Trend = f.Trending, f.Trend
	cfg.Publish.RedisAddr, cfg.Publish.RedisPrefix, cfg.Publish.ListsOut = redisAddr, f.RedisPrefix, f.ListsOut
	cfg.DeadLetterDir = f.DeadLetterDir
	cfg.Long, cfg.LongIdle = f.Long, f.LongIdle
	cfg.Exact.Project, cfg.Exact.Instance = f.BTProject, f.BTInstance
	if f.RecoveryLog && spec.Kind == source.KindPubsub && !strings.EqualFold(*runners.Runner, source.RunnerDataflow) {
		h := f.RecoveryHorizon
		if h == 0 {
			h = cfg.RecoveryHorizon()
		}
		cfg.SourceOpts.RecoveryLog = source.RecoveryLog{
			Config:  recoverylog.Config{Project: f.BTProject, Instance: f.BTInstance, Retention: 2 * h},
			Horizon: h,
		}
	}
	if cfg.DeadLetterDir == "" && f.ListsOut != "" {
		cfg.DeadLetterDir = filepath.Join(f.ListsOut, "deadletter")
	}
	return cfg, cfg.Validate()
}

// formatMinCount writes minimum counts as --min_count takes them.
func formatMinCount(m map[schemas.Window]uint64) string {
	var parts []string
	for _, w := range []schemas.Window{schemas.Window1m, schemas.Window5m, schemas.Window1h} {
		if c, ok := m[w]; ok {
			parts = append(parts, fmt.Sprintf("%s=%d", w, c))
		}
	}
	return strings.Join(parts, ",")
}

// parseMinCount reads --min_count: WINDOW=N pairs, comma-separated.
func parseMinCount(s string) (map[schemas.Window]uint64, error) {
	out := map[schemas.Window]uint64{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		w, n, ok := strings.Cut(strings.TrimSpace(kv), "=")
		c, err := strconv.ParseUint(n, 10, 32)
		if !ok || err != nil || !schemas.Window(w).Valid() {
			return nil, fmt.Errorf("--min_count: %q is not WINDOW=N (e.g. 1m=3,5m=5,1h=10)", kv)
		}
		out[schemas.Window(w)] = c
	}
	return out, nil
}

func main() {
	var f Flags
	own := flag.NewFlagSet("streaming", flag.ExitOnError)
	f.Register(own)
	beamrun.Share(own)
	flag.Usage = beamrun.Usage("streaming: the fast path, a streaming Beam job that turns beacons (Pub/Sub, an NDJSON file or a synthetic load) into 1m, 5m and 1h top-K lists in Redis.",
		"streaming --source=SOURCE [flags]", own)
	beamrun.Main("streaming", func(ctx context.Context) error { return run(ctx, &f) })
}

// OptBool is a boolean flag that knows whether it was given, for a default
// that depends on other flags (--durable_windows on --runner).
type OptBool struct{ val, given bool }

// String implements flag.Value: "" when not given.
func (b *OptBool) String() string {
	if b == nil || !b.given {
		return ""
	}
	return strconv.FormatBool(b.val)
}

// Set implements flag.Value.
func (b *OptBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	b.val, b.given = v, true
	return nil
}

// IsBoolFlag lets the flag be given without a value (--durable_windows).
func (b *OptBool) IsBoolFlag() bool { return true }

// Or is the flag's value when it was given, else dflt.
func (b OptBool) Or(dflt bool) bool {
	if b.given {
		return b.val
	}
	return dflt
}

// NoRedis as --redis publishes to --lists_out only: a replay whose lists
// are read from files need not publish every version into an embedded
// server nobody reads, which runs a Lua script per version in this
// process and keeps its keys in this heap (a sparse replay without it:
// -21% CPU, -37% peak memory, the same files; BENCHMARKS.md, "Trending at
// the scale issue's load, in event time").
const NoRedis = "none"

func run(ctx context.Context, f *Flags) error {
	setMemoryLimit(f.MemoryLimitMB)
	dryRun := isDryRun()
	var conn *redisx.Conn
	redisAddr := ""
	if f.Redis == NoRedis && f.ListsOut == "" && !dryRun {
		return fmt.Errorf("--redis=%s publishes to files only: give --lists_out=DIR", NoRedis)
	}
	if !dryRun && f.Redis != NoRedis {
		var err error
		if conn, err = redisx.Connect(ctx, f.Redis); err != nil {
			return err
		}
		defer conn.Close()
		redisAddr = conn.Addr
	}
	cfg, err := f.Config(redisAddr)
	if err != nil {
		return err
	}
	var lag func() (float64, float64)
	if conn != nil && cfg.Source.Kind != source.KindFile {
		obs, err := fastpath.ObserveLag(ctx, liststore.New(conn.Client, liststore.Options{Prefix: f.RedisPrefix}))
		if err != nil {
			return err
		}
		lag = obs.Stop
	}
	if f.MetricsAddr != "" && !dryRun {
		var st *liststore.Store // no Redis: the stages' counters only
		if conn != nil {
			st = liststore.New(conn.Client, liststore.Options{Prefix: f.RedisPrefix})
		}
		stopMetrics, err := serveMetrics(ctx, f.MetricsAddr, st)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	stopProfile, err := beamrun.CPUProfileWindow(f.CPUProfile, f.CPUProfileFrom, f.CPUProfileTo)
	if err != nil {
		return err
	}
	defer stopProfile()
	stopHeap, err := beamrun.HeapProfile(f.HeapProfile, 10*time.Second)
	if err != nil {
		return err
	}
	defer stopHeap()
	rep, err := fastpath.Run(ctx, cfg, fastpath.BeamRunner, lag)
	if err != nil || dryRun {
		return err // a dry run counted nothing: no all-zero summary
	}
	return json.NewEncoder(os.Stdout).Encode(rep)
}

// setMemoryLimit sets the Go heap's soft limit: mb MiB when mb > 0, none
// when mb < 0, and when mb is 0, 75% of the memory the process may use
// (the cgroup's limit in a container, else the machine's memory; the
// automemlimit library reads both). GOMEMLIMIT, when set, wins.
//
// Why not a fixed limit: the soft limit is for headroom, not a budget. The
// heap this job keeps alive grows with its windows (the 1h window's panes
// and aggregators fill over an hour), and once the live heap passes the
// limit the collector runs back to back: at 100k events/s with every scope
// for 2 minutes, the live heap reached about 3 GB, and the former default
// of 2,560 MiB took 1.8x the CPU-s of no limit and fell behind
// (BENCHMARKS.md, "The memory limit").
func setMemoryLimit(mb int) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	switch {
	case mb > 0:
		debug.SetMemoryLimit(int64(mb) << 20)
	case mb == 0:
		limit, err := memlimit.SetGoMemLimitWithOpts(
			memlimit.WithRatio(0.75),
			memlimit.WithProvider(memlimit.ApplyFallback(memlimit.FromCgroup, memlimit.FromSystem)),
			memlimit.WithLogger(slog.New(slog.DiscardHandler)),
		)
		if err != nil {
			slog.Warn("no automatic memory limit", "err", err)
			return
		}
		slog.Info("memory limit", "mb", limit>>20)
	}
}

func isDryRun() bool {
	fl := flag.Lookup("dry_run")
	return fl != nil && fl.Value.String() == "true"
}
