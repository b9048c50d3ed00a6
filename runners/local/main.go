// Command local runs the whole of topk on one machine with embedded
// defaults: an in-process Pub/Sub (or the emulator at PUBSUB_EMULATOR_HOST),
// an embedded Redis (or REDIS_ADDR), a synthetic Zipf load published as
// beacons to the "views" topic, the streaming fast path on Prism reading its
// own subscription, and the API and trending page on :8080.
//
//	go run ./runners/local                      # until Ctrl-C
//	go run ./runners/local --rate=50000 --duration=3m
//
// It prints a line per component as it comes up, then a progress line
// every few seconds (events/s published, lists published, 1m-list lag as a
// reader sees it). Ctrl-C stops the load; the archiver drains what was
// published (its Pub/Sub pull ends after --idle_stop without messages) and
// the fast path is waited for up to --drain_timeout (its windows live in
// Prism's memory, and draining the long windows' minute timers takes
// minutes), so the process ends within 10 s with a line saying what was
// drained. A --duration run (and the test) drains everything.
//
// Everything is on the API's one /metrics: serving, the archiver and its
// retention (--retention), the publish lag and list ages as a reader of
// Redis sees them (internal/publishobs), Go and process. The catalogue is
// filled with titles and thumbnails for the --catalogue_items most frequent
// synthetic items of each type, the exact store serves /v1/charts/daily and
// keeps takedowns.
//
// The archiver writes every event as Parquet by event hour under
// --archive_root. The exact path runs too: at the start and then every
// --recount_every, each closed archive hour (its _CLOSED marker appears 10
// minutes after the hour ends) that the exact store has not marked done is
// recounted (pipelines/recount, a second Beam job on Prism in this process)
// into the exact store, the emulator at BIGTABLE_EMULATOR_HOST or an
// embedded bttest; the fast path runs with its long windows on and
// publishes the 24h and all lists stitched from those tables once
// exact_until is set. A failed recount is logged and tried again at the
// next tick; --recount=false turns the recount off. The archive closes an
// hour --archive_grace (3 minutes) after it ends.
//
// The recount grades the fast path: its 1h lists at each hour's end are
// copied from Redis as they are published (hourEnds, into
// ARCHIVE_ROOT/lists, deleted once graded), and each hour recounted is
// graded against them (pipelines/recount, transforms/grade): the grades go
// to the exact store, to one output line per hour and to /metrics
// (topk_grade_*). The first grade comes about 4 minutes after the first
// hour end the run was up for. The fast path's stage counters
// (internal/stagemetrics, topk_stream_*) are on /metrics too.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/topk-dev/topk/internal/prismopt"
	"github.com/topk-dev/topk/internal/publishobs"
	"github.com/topk-dev/topk/internal/pubsubx"
	"github.com/topk-dev/topk/internal/recoverylog"
	"github.com/topk-dev/topk/internal/redisx"
	"github.com/topk-dev/topk/internal/stagemetrics"
	"github.com/topk-dev/topk/pipelines/fastpath"
	"github.com/topk-dev/topk/pipelines/recount"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/serving/api"
	"github.com/topk-dev/topk/transforms/archive"
	"github.com/topk-dev/topk/transforms/exact/store"
	"github.com/topk-dev/topk/transforms/preagg"
	"github.com/topk-dev/topk/transforms/publish/liststore"
	"github.com/topk-dev/topk/transforms/rules"
	"github.com/topk-dev/topk/transforms/source"
	"github.com/topk-dev/topk/transforms/stitch"
)

// Config is the local run.
type Config struct {
	Addr   string   // API listen address
	Rate   int      // synthetic events per second
	Items  uint64   // Zipf universe
	Zipf   float64  // Zipf exponent
	Beacon int      // events per beacon
	Types  []string // synthetic item types
	// Rules are the countable-event rules the fast path and the recount
	// apply (transforms/rules; nil: none, not even the event_id dedupe).
	Rules      *rules.Config
	Countries  int           // synthetic countries (each with four ISO 3166-2 regions)
	Duration   time.Duration // 0: until the context ends
	IdleStop   time.Duration // source ends after this long without messages
	Progress   time.Duration
	Project    string
	Partitions int
	AdminToken string
	// ArchiveRoot receives every event as Parquet by event hour (the exact
	// path's input); "" disables the archiver.
	ArchiveRoot string
	// Recount recounts every closed hour of ArchiveRoot that the exact store
	// does not have, at the start and then every RecountEvery (0: a minute).
	Recount      bool
	RecountEvery time.Duration
	// BigtableInstance is the exact store's instance ("" : "topk"), in
	// project "topk-local" of the emulator at BIGTABLE_EMULATOR_HOST or of
	// an embedded bttest.
	BigtableInstance string
	// CatalogueItems is how many of each type's most frequent synthetic
	// items get a title and a thumbnail in the catalogue (0: none).
	CatalogueItems int
	// ArchiveGrace is how long after its end an archive hour closes (0:
	// archive.DefaultGrace, 10 minutes). The local load stamps events with
	// the wall clock, so a few minutes suffice and the first grade comes
	// sooner.
	ArchiveGrace time.Duration
	// Retention is how long the archive keeps an event hour after it ends
	// (0: archive.DefaultRetention, 30 days; negative: forever).
	Retention time.Duration
	// LongIdle is how long after the end of a list's last hour with data
	// its long windows are still reported every minute
	// (fastpath.Config.LongIdle). Zero: an hour. The end of the run fires
	// those minute timers at once, so a short one drains faster.
	LongIdle time.Duration
	// DrainTimeout bounds the wait after the load stops: the archiver is
	// always waited for (about IdleStop), the fast path and the recount
	// only until DrainTimeout has passed, after which Run returns without
	// their report (the process is expected to exit). Zero: wait until
	// they end (up to IdleStop + 10 minutes), as the tests do.
	DrainTimeout time.Duration
	// Registry receives every component's metrics, served on the API's
	// /metrics. Zero: a new registry. The Go and process collectors are
	// added to it.
	Registry *prometheus.Registry
}

func main() {
	var cfg Config
	flag.StringVar(&cfg.Addr, "addr", ":8080", "API listen address")
	cfg.Rules = rules.RegisterFlagsWith(flag.CommandLine, "", preagg.DefaultRules()) // --rules=none, --cap, ...
	flag.IntVar(&cfg.Rate, "rate", 5000, "synthetic events per second")
	flag.Uint64Var(&cfg.Items, "items", 1_000_000, "synthetic item universe")
	flag.Float64Var(&cfg.Zipf, "zipf", 1.1, "Zipf exponent of the synthetic load")
	flag.IntVar(&cfg.Beacon, "beacon", 100, "events per beacon")
	types := flag.String("types", "video,hashtag,search", "synthetic item types (comma-separated)")
	flag.IntVar(&cfg.Countries, "countries", 20, "synthetic countries, largest first, each with four real ISO 3166-2 regions (0: global lists only)")
	flag.DurationVar(&cfg.Duration, "duration", 0, "stop after this long (0: at Ctrl-C)")
	flag.DurationVar(&cfg.IdleStop, "idle_stop", 5*time.Second, "the Pub/Sub source ends after this long without messages")
	flag.DurationVar(&cfg.Progress, "progress", 5*time.Second, "progress line period")
	flag.StringVar(&cfg.Project, "pubsub_project", "topk-local", "Pub/Sub project")
	flag.IntVar(&cfg.Partitions, "partitions", 4, "counter partitions (4 suits the modest local load; the streaming command defaults to 16)")
	flag.StringVar(&cfg.ArchiveRoot, "archive_root", "./archive", "archive root: every event as Parquet by event hour, the exact recount's input (empty: no archive)")
	flag.BoolVar(&cfg.Recount, "recount", true, "recount every closed archive hour not yet recounted, at the start and then every --recount_every, into the embedded exact store the 24h and all lists are stitched from")
	flag.StringVar(&cfg.BigtableInstance, "bigtable_instance", "topk", "exact store instance (project topk-local) on the emulator at BIGTABLE_EMULATOR_HOST, or on an embedded bttest")
	flag.DurationVar(&cfg.ArchiveGrace, "archive_grace", 3*time.Minute, "an archive hour closes (and is recounted and graded) this long after it ends")
	flag.DurationVar(&cfg.RecountEvery, "recount_every", time.Minute, "how often to look for closed hours to recount")
	flag.IntVar(&cfg.CatalogueItems, "catalogue_items", 10_000, "titles and thumbnails for this many of each type's most frequent synthetic items (0: none)")
	flag.DurationVar(&cfg.Retention, "retention", archive.DefaultRetention, "delete archive hours this long after they end (negative: never)")
	flag.DurationVar(&cfg.DrainTimeout, "drain_timeout", 6*time.Second, "after Ctrl-C, wait this long at most for the fast path and the recount (the archiver is always waited for); 0: until they end, which takes minutes")
	flag.StringVar(&cfg.AdminToken, "admin_token", os.Getenv("TOPK_ADMIN_TOKEN"), "bearer token for /v1/admin (default $TOPK_ADMIN_TOKEN)")
	flag.Parse()
	cfg.Types = strings.Split(*types, ",")
	beam.Init()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := Run(ctx, cfg, os.Stdout); err != nil {
		slog.Error("local", "err", err)
		os.Exit(1)
	}
}

// Stats is what a local run did.
type Stats struct {
	Published int64 // events published
	Report    fastpath.Report
	// Recounted is every hour the recount loop recounted, in order;
	// RecountFailures the passes that failed. DoneHours and ExactUntil are
	// the exact store's at the end of the run.
	Recounted       []recount.HourReport
	RecountFailures int
	DoneHours       []time.Time
	ExactUntil      time.Time
	// Lists are the keys of every list in Redis at the end of the run.
	Lists []schemas.ListKey
}

// Run runs everything until ctx ends (or Duration passes), then stops the
// load, waits for the pipeline to drain and returns.
func Run(ctx context.Context, cfg Config, out io.Writer) (Stats, error) {
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	bg := context.Background() // outlives ctx: the drain needs it
	start := time.Now()
	say := func(format string, args ...any) {
		fmt.Fprintf(out, "%5.1fs "+format+"\n", append([]any{time.Since(start).Seconds()}, args...)...)
	}
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	psAddr, psKind := pubsubx.EmulatorAddr(), "emulator at PUBSUB_EMULATOR_HOST"
	if psAddr == "" {
		emb := pubsubx.StartEmbedded()
		defer emb.Close()
		psAddr, psKind = emb.Addr, "embedded"
	}
	ps, err := pubsubx.NewClient(bg, cfg.Project, psAddr)
	if err != nil {
		return Stats{}, err
	}
	defer ps.Close()
	if err := pubsubx.EnsureTopic(bg, ps, "views"); err != nil {
		return Stats{}, err
	}
	if err := pubsubx.EnsureSubscription(bg, ps, "fastpath", "views", 60); err != nil {
		return Stats{}, err
	}
	say("Pub/Sub: %s on %s, topic views, subscription fastpath", psKind, psAddr)

	rconn, err := redisx.Connect(bg, "")
	if err != nil {
		return Stats{}, err
	}
	// A fast path not waited for at the end still publishes until the
	// process exits: Redis stays open for it then (closing it made each of
	// its last publishes log a failure; cancelling the job makes Prism log
	// its bundles as failed).
	abandoned := false
	defer func() {
		if !abandoned {
			rconn.Close()
		}
	}()
	lists := liststore.New(rconn.Client, liststore.Options{})
	redisKind := "REDIS_ADDR"
	if rconn.Embedded != nil {
		redisKind = "embedded miniredis"
	}
	say("Redis: %s on %s (lists, catalogue, takedown cache)", redisKind, rconn.Addr)

	// The exact store that the recount writes, the fast path's 24h and all
	// lists are stitched from, /v1/charts/daily reads, and that keeps the
	// takedowns: the emulator at BIGTABLE_EMULATOR_HOST (the Bigtable
	// client connects there whenever it is set, whatever endpoint it is
	// given), else an embedded bttest whose tables live as long as the
	// run, so that each run recounts the closed hours again.
	btAddr, btKind := os.Getenv("BIGTABLE_EMULATOR_HOST"), "emulator at BIGTABLE_EMULATOR_HOST"
	if btAddr == "" {
		addr, stopBT, err := store.Embedded()
		if err != nil {
			return Stats{}, err
		}
		defer stopBT()
		btAddr, btKind = addr, "embedded bttest"
	}
	instance := cfg.BigtableInstance
	if instance == "" {
		instance = "topk"
	}
	exact := stitch.StoreConfig{Project: "topk-local", Instance: instance, EmulatorAddr: btAddr}
	xst, err := exact.Open(bg)
	if err != nil {
		return Stats{}, err
	}
	defer xst.Close()
	if err := xst.EnsureTables(bg); err != nil {
		return Stats{}, err
	}
	say("exact store: Bigtable %s on %s, instance %s (exact tables, daily charts, durable takedowns)", btKind, btAddr, instance)

	// Grading: the fast path's 1h lists at each hour's end are copied from
	// Redis as they are published, and the recount grades each hour it
	// recounts against them (see hourEnds). An hour that already has
	// archived events (an earlier run's) is not graded: this run's fast
	// path did not see them.
	grades := recount.NewGradeMetrics()
	reg.MustRegister(grades)
	var ends *hourEnds
	if cfg.Recount && cfg.ArchiveRoot != "" {
		now := time.Now().UTC()
		var skip time.Time
		if files, _, err := archive.ListHourContext(bg, cfg.ArchiveRoot, now); err == nil && len(files) > 0 {
			skip = now.Truncate(time.Hour).Add(time.Hour)
		}
		ends = newHourEnds(lists, filepath.Join(cfg.ArchiveRoot, "lists"), now, skip)
	}

	archDone := make(chan error, 1)
	var archStats atomic.Pointer[archive.Stats]
	archStats.Store(&archive.Stats{})
	if cfg.ArchiveRoot != "" {
		if err := pubsubx.EnsureSubscription(bg, ps, "archive", "views", 60); err != nil {
			return Stats{}, err
		}
		am := archive.NewMetrics()
		reg.MustRegister(am)
		ret := archive.RetentionConfig{Root: cfg.ArchiveRoot, Keep: cfg.Retention, Report: am.Pruned}
		if err := ret.Validate(); err != nil {
			return Stats{}, err
		}
		progress := func(s archive.Stats) { am.Progress(s); archStats.Store(&s) }
		// bg and IdleStop, not ctx: the archiver drains what was published.
		go func() {
			archDone <- archive.Run(bg, ps, archive.Config{Root: cfg.ArchiveRoot, Progress: progress, Grace: cfg.ArchiveGrace,
				Subscription: pubsubx.SubscriptionName(cfg.Project, "archive"), ReturnImmediately: true, IdleStop: cfg.IdleStop})
		}()
		// ctx: retention stops with the run (a prune in progress is cut short
		// and done again at the next start).
		go func() { _ = archive.RunRetention(ctx, ret) }()
		keep := "forever"
		if ret.Keep > 0 {
			keep = ret.Keep.String()
		}
		say("archiver: every event as Parquet by event hour under %s, subscription archive, hours kept %s", cfg.ArchiveRoot, keep)
	} else {
		archDone <- nil
	}

	srv, err := api.New(api.Config{Addr: cfg.Addr, Redis: rconn.Client, PubSub: ps, AdminToken: cfg.AdminToken, Types: cfg.loadTypes(),
		Exact: xst, Removals: xst, Registry: reg})
	if err != nil {
		return Stats{}, err
	}
	defer srv.Close()
	if err := fillCatalogue(bg, srv.Catalogue(), cfg.loadTypes(), cfg.CatalogueItems); err != nil {
		return Stats{}, err
	}
	apiDone := make(chan error, 1)
	go func() { apiDone <- srv.Run(ctx) }()
	say("API and trending page: http://%s/ (metrics at /metrics, daily charts at /v1/charts/daily); catalogue: %d titles per type", pageAddr(cfg.Addr), cfg.CatalogueItems)

	// The publish observer outlives ctx: the drain publishes the last lists.
	obsCtx, stopObs := context.WithCancel(bg)
	defer stopObs()
	obs, err := publishobs.Start(obsCtx, lists, nil)
	if err != nil {
		return Stats{}, err
	}
	reg.MustRegister(obs, stagemetrics.Collector())

	pcfg := fastpath.DefaultConfig()
	if cfg.Rules != nil {
		rc := *cfg.Rules
		pcfg.Preagg.Rules = &rc
	}
	// LongIdle: a list's open hours are reported each minute until an hour
	// after the end of its last hour with data, not stitch's 26 h. The
	// local archive closes an hour 10 minutes after its end and the
	// recount takes it within the minute, so the exact side covers the
	// hour well before; and the end of the run (the source ends, the
	// watermark jumps) fires 2 h of minute timers instead of 26 h of them,
	// which took minutes.
	pcfg.Long, pcfg.Exact, pcfg.LongIdle = true, exact, time.Hour
	if cfg.LongIdle > 0 {
		pcfg.LongIdle = cfg.LongIdle
	}
	spec, err := source.ParseSpec("pubsub:" + pubsubx.SubscriptionName(cfg.Project, "fastpath") + "?idle_stop=" + cfg.IdleStop.String())
	if err != nil {
		return Stats{}, err
	}
	pcfg.Source = spec
	pcfg.SourceOpts = source.Options{PubsubEndpoint: psAddr}
	// The recovery log outlives a crash only where Pub/Sub and Bigtable
	// do: with both emulators outside this process.
	if psKind != "embedded" && btKind != "embedded bttest" {
		h := pcfg.RecoveryHorizon()
		pcfg.SourceOpts.RecoveryLog = source.RecoveryLog{
			Config:  recoverylog.Config{Project: exact.Project, Instance: exact.Instance, EmulatorAddr: btAddr, Retention: 2 * h},
			Horizon: h,
		}
		say("recovery log: on (table %s in Bigtable %s): a run started after a crash replays the last %s", recoverylog.DefaultTable, btAddr, h)
	} else {
		say("recovery log: off (embedded Pub/Sub or Bigtable die with this process; with PUBSUB_EMULATOR_HOST and BIGTABLE_EMULATOR_HOST set, a restarted run replays what it lost)")
	}
	pcfg.Preagg.Partitions = cfg.Partitions
	pcfg.Publish.RedisAddr = rconn.Addr
	// Prism runs in this process: its Beam state dies with it, so panes
	// kept there could never rebuild a window (the recovery log does).
	// The streaming command's rule, so the two cannot drift apart.
	pcfg.Durable = !prismopt.InProcess()

	lag, err := fastpath.ObserveLag(bg, lists)
	if err != nil {
		return Stats{}, err
	}
	type result struct {
		rep fastpath.Report
		err error
	}
	pipeDone := make(chan result, 1)
	go func() {
		rep, err := fastpath.Run(bg, pcfg, fastpath.BeamRunner, nil)
		pipeDone <- result{rep, err}
	}()
	say("fast path: Beam job on Prism (in this process) reading subscription fastpath, %d partitions; 1m lists each minute, the first within about a minute", cfg.Partitions)

	rc := &recounter{root: cfg.ArchiveRoot, st: xst, k: pcfg.Lists.K, out: out, every: cfg.RecountEvery, rules: cfg.Rules,
		ends: ends, grades: grades, gradeWait: 10 * time.Minute, minCount1h: pcfg.MinCount[schemas.Window1h]}
	if rc.every <= 0 {
		rc.every = time.Minute
	}
	recountDone := make(chan struct{})
	if cfg.Recount && cfg.ArchiveRoot != "" {
		go func() { defer close(recountDone); rc.loop(ctx) }()
		go ends.loop(obsCtx, 20*time.Second, rc.gradeWait)
		say("recount: every %v, each closed archive hour not yet in the exact store (a second Beam job); grades the fast path's 1h lists at each hour's end (copied to %s) against it, the first about %v after the first hour end (%s)",
			rc.every, ends.dir, archGrace(cfg.ArchiveGrace)+rc.every, ends.first().Format("15:04 UTC"))
	} else {
		close(recountDone)
	}

	var published atomic.Int64
	loadDone := make(chan error, 1)
	go func() { loadDone <- publishLoad(ctx, ps.Publisher("views"), cfg, &published) }()
	say("load: %d events/s to topic views (Zipf %.1f over %d items; types %s; countries %d, each with four regions); Ctrl-C stops",
		cfg.Rate, cfg.Zipf, cfg.Items, strings.Join(cfg.loadTypes(), ","), cfg.Countries)
	tick := time.NewTicker(cfg.Progress)
	defer tick.Stop()
	last, lastAt := int64(0), time.Now()
	var loadErr error
loop:
	for {
		select {
		case <-tick.C:
			n, now := published.Load(), time.Now()
			p50, p99 := lag.Snapshot()
			fmt.Fprintf(out, "events/s %8.0f  published %10d  1m lists %6d  lag p50 %5.1fs p99 %5.1fs\n",
				float64(n-last)/now.Sub(lastAt).Seconds(), n, lag.Count(), p50/1000, p99/1000)
			last, lastAt = n, now
		case loadErr = <-loadDone:
			break loop
		case r := <-pipeDone:
			<-recountDone
			return Stats{Published: published.Load(), Report: r.rep}, fmt.Errorf("pipeline ended early: %w", r.err)
		}
	}
	stopAt := time.Now()
	fmt.Fprintf(out, "stopping: load stopped after %d events; the archiver and the fast path drain (their source ends after %v without messages)\n",
		published.Load(), cfg.IdleStop)
	// The archiver is always waited for: its files are the exact path's
	// input and outlive the run. The fast path and the recount keep their
	// state in memory (Prism), so past DrainTimeout they are abandoned.
	archErr := <-archDone
	as := archStats.Load()
	wait := cfg.IdleStop + 10*time.Minute
	if cfg.DrainTimeout > 0 {
		wait = max(0, cfg.DrainTimeout-time.Since(stopAt))
	}
	var r result
	select {
	case r = <-pipeDone:
	case <-time.After(wait):
		if cfg.DrainTimeout <= 0 {
			return Stats{}, errors.New("pipeline did not drain within 10 minutes of the idle stop")
		}
		fmt.Fprintf(out, "stopped %.1fs after the load: the archiver drained all it was sent (%d events archived in %d files this run, %d of them late); the fast path was not waited for (%d 1m list versions published; its windows live in memory and end with the process)\n",
			time.Since(stopAt).Seconds(), as.Events, as.Files, as.LateEvents, lag.Count())
		abandoned = true
		return Stats{Published: published.Load()}, archErr
	}
	if archErr != nil {
		return Stats{}, fmt.Errorf("archive: %w", archErr)
	}
	p50, p99 := lag.Stop()
	r.rep.LagP50Ms, r.rep.LagP99Ms = p50, p99
	<-apiDone
	<-recountDone
	st := Stats{Published: published.Load(), Report: r.rep, Recounted: rc.hours, RecountFailures: rc.failed}
	if st.DoneHours, err = xst.DoneHours(bg); err != nil {
		return st, err
	}
	if st.ExactUntil, err = xst.ExactUntil(bg); err != nil {
		return st, err
	}
	if st.Lists, err = lists.Keys(bg); err != nil {
		return st, err
	}
	drained := fmt.Sprintf("drained %d of %d published events into the fast path", r.rep.Events, st.Published)
	if pcfg.SourceOpts.RecoveryLog.Enabled() {
		drained = fmt.Sprintf("drained %d events into the fast path (the %d this run published, and what the recovery log replayed of earlier runs' last hour)", r.rep.Events, st.Published)
	}
	fmt.Fprintf(out, "stopped %.1fs after the load: %s (%d list versions published, 1m lag p50 %.1fs p99 %.1fs); archived %d events in %d files; %d hours recounted\n",
		time.Since(stopAt).Seconds(), drained, r.rep.Lists, p50/1000, p99/1000, as.Events, as.Files, len(rc.hours))
	if r.err != nil {
		return st, r.err
	}
	if loadErr != nil && !errors.Is(loadErr, context.Canceled) && !errors.Is(loadErr, context.DeadlineExceeded) {
		return st, loadErr
	}
	return st, nil
}

// archGrace is the archive's grace in effect.
func archGrace(g time.Duration) time.Duration {
	if g <= 0 {
		return archive.DefaultGrace
	}
	return g
}

// pageAddr is a listen address as a browser reaches it (":8080" is
// "localhost:8080").
func pageAddr(addr string) string {
	if strings.HasPrefix(addr, ":") {
		return "localhost" + addr
	}
	return addr
}

// loadTypes are the synthetic load's types (video when none are set).
func (c Config) loadTypes() []string {
	if len(c.Types) == 0 {
		return []string{"video"}
	}
	return c.Types
}

// loadMessage is beacon k of g as a Pub/Sub message with the attributes
// ingest sets: "ts" (its event time, Unix ms) and "beacon_id", the
// beacon's own id. That id is unique per run (the generator's seed): the
// recovery log deduplicates by it, and an id an earlier run used (the
// load once numbered its beacons local-0, local-1, ... in every run) was
// taken for that run's beacon, so a run started within the log's horizon
// of another lost its first beacons.
func loadMessage(g *source.Generator, k int64, now time.Time) (*pubsub.Message, int, error) {
	b, events, err := g.Beacon(k, now)
	if err != nil {
		return nil, 0, err
	}
	return &pubsub.Message{Data: slices.Clone(b), Attributes: map[string]string{
		source.TSAttribute:     strconv.FormatInt(now.UnixMilli(), 10),
		source.BeaconAttribute: g.BeaconID(k),
	}}, events, nil
}

// publishLoad publishes synthetic beacons (source.Generator: Zipf items of
// every type, named per type, from Countries countries and their regions)
// at cfg.Rate events/s, event time = now, until ctx ends, and waits for
// every publish to be acknowledged.
func publishLoad(ctx context.Context, pub *pubsub.Publisher, cfg Config, n *atomic.Int64) error {
	defer pub.Stop()
	g, err := source.NewGenerator(source.SyntheticSpec{
		Items: cfg.Items, Zipf: cfg.Zipf, Beacon: cfg.Beacon, Types: cfg.loadTypes(), Countries: cfg.Countries,
		// A seed per run: event ids differ from an earlier run's in the
		// same archive hour, which the recount's dedupe would drop.
		Seed: uint64(time.Now().UnixNano()) | 1,
	})
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	beacons := max(1, cfg.Rate/cfg.Beacon)
	period := time.Second / time.Duration(beacons)
	next := time.Now()
	var results []*pubsub.PublishResult
	for k := int64(0); ctx.Err() == nil; {
		now := time.Now()
		if now.Before(next) {
			select {
			case <-ctx.Done():
			case <-time.After(next.Sub(now)):
			}
			continue
		}
		next = next.Add(period)
		msg, events, err := loadMessage(g, k, now)
		if err != nil {
			return err
		}
		results = append(results, pub.Publish(ctx, msg))
		k++
		n.Add(int64(events))
		if len(results) >= 256 {
			for _, r := range results {
				if _, err := r.Get(context.Background()); err != nil {
					return fmt.Errorf("publish: %w", err)
				}
			}
			results = results[:0]
		}
	}
	for _, r := range results {
		if _, err := r.Get(context.Background()); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
	}
	return ctx.Err()
}
