// Command local runs the whole of topk on one machine with embedded
// defaults: an in-process Pub/Sub (or the emulator at PUBSUB_EMULATOR_HOST),
// an embedded Redis (or REDIS_ADDR), a synthetic Zipf load published as
// beacons to the "views" topic, the streaming fast path on Prism reading its
// own subscription, and the API and trending page on :8080.
//
//	go run ./runners/local                      # until Ctrl-C
//	go run ./runners/local --rate=50000 --duration=3m
//
// It prints a progress line every few seconds (events/s published, lists
// published, 1m-list lag as a reader sees it). Ctrl-C stops the load; the
// Pub/Sub source then ends after it has been idle for --idle_stop, so
// windows and timers flush and Prism exits cleanly (cancelling Prism's
// context would panic the process).
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
// next tick; --recount=false turns the recount off.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"

	"github.com/topk-dev/topk/internal/pubsubx"
	"github.com/topk-dev/topk/internal/redisx"
	"github.com/topk-dev/topk/pipelines/fastpath"
	"github.com/topk-dev/topk/pipelines/recount"
	"github.com/topk-dev/topk/serving/api"
	"github.com/topk-dev/topk/transforms/archive"
	"github.com/topk-dev/topk/transforms/exact/store"
	"github.com/topk-dev/topk/transforms/publish/liststore"
	"github.com/topk-dev/topk/transforms/source"
	"github.com/topk-dev/topk/transforms/stitch"
)

// Config is the local run.
type Config struct {
	Addr       string        // API listen address
	Rate       int           // synthetic events per second
	Items      uint64        // Zipf universe
	Zipf       float64       // Zipf exponent
	Beacon     int           // events per beacon
	Types      []string      // synthetic item types
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
}

func main() {
	var cfg Config
	flag.StringVar(&cfg.Addr, "addr", ":8080", "API listen address")
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
	flag.DurationVar(&cfg.RecountEvery, "recount_every", time.Minute, "how often to look for closed hours to recount")
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
}

// Run runs everything until ctx ends (or Duration passes), then stops the
// load, waits for the pipeline to drain and returns.
func Run(ctx context.Context, cfg Config, out *os.File) (Stats, error) {
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	bg := context.Background() // outlives ctx: the drain needs it

	psAddr := pubsubx.EmulatorAddr()
	if psAddr == "" {
		emb := pubsubx.StartEmbedded()
		defer emb.Close()
		psAddr = emb.Addr
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

	archDone := make(chan error, 1)
	if cfg.ArchiveRoot != "" {
		if err := pubsubx.EnsureSubscription(bg, ps, "archive", "views", 60); err != nil {
			return Stats{}, err
		}
		// bg and IdleStop, not ctx: the archiver drains what was published.
		go func() {
			archDone <- archive.Run(bg, ps, archive.Config{Root: cfg.ArchiveRoot,
				Subscription: pubsubx.SubscriptionName(cfg.Project, "archive"), ReturnImmediately: true, IdleStop: cfg.IdleStop})
		}()
	} else {
		archDone <- nil
	}

	rconn, err := redisx.Connect(bg, "")
	if err != nil {
		return Stats{}, err
	}
	defer rconn.Close()
	lists := liststore.New(rconn.Client, liststore.Options{})

	srv, err := api.New(api.Config{Addr: cfg.Addr, Redis: rconn.Client, PubSub: ps, AdminToken: cfg.AdminToken, Types: cfg.loadTypes()})
	if err != nil {
		return Stats{}, err
	}
	defer srv.Close()
	apiDone := make(chan error, 1)
	go func() { apiDone <- srv.Run(ctx) }()

	// The exact store that the recount writes and the fast path's 24h and
	// all lists are stitched from: the emulator at BIGTABLE_EMULATOR_HOST
	// (the Bigtable client connects there whenever it is set, whatever
	// endpoint it is given), else an embedded bttest whose tables live as
	// long as the run, so that each run recounts the closed hours again.
	btAddr := os.Getenv("BIGTABLE_EMULATOR_HOST")
	if btAddr == "" {
		addr, stopBT, err := store.Embedded()
		if err != nil {
			return Stats{}, err
		}
		defer stopBT()
		btAddr = addr
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

	pcfg := fastpath.DefaultConfig()
	// LongIdle: a list's open hours are reported each minute until an hour
	// after the end of its last hour with data, not stitch's 26 h. The
	// local archive closes an hour 10 minutes after its end and the
	// recount takes it within the minute, so the exact side covers the
	// hour well before; and the end of the run (the source ends, the
	// watermark jumps) fires 2 h of minute timers instead of 26 h of them,
	// which took minutes.
	pcfg.Long, pcfg.Exact, pcfg.LongIdle = true, exact, time.Hour
	spec, err := source.ParseSpec("pubsub:" + pubsubx.SubscriptionName(cfg.Project, "fastpath") + "?idle_stop=" + cfg.IdleStop.String())
	if err != nil {
		return Stats{}, err
	}
	pcfg.Source = spec
	pcfg.SourceOpts = source.Options{PubsubEndpoint: psAddr}
	pcfg.Preagg.Partitions = cfg.Partitions
	pcfg.Publish.RedisAddr = rconn.Addr

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

	rc := &recounter{root: cfg.ArchiveRoot, st: xst, k: pcfg.Lists.K, out: out, every: cfg.RecountEvery}
	if rc.every <= 0 {
		rc.every = time.Minute
	}
	recountDone := make(chan struct{})
	if cfg.Recount && cfg.ArchiveRoot != "" {
		go func() { defer close(recountDone); rc.loop(ctx) }()
	} else {
		close(recountDone)
	}

	var published atomic.Int64
	loadDone := make(chan error, 1)
	go func() { loadDone <- publishLoad(ctx, ps.Publisher("views"), cfg, &published) }()

	fmt.Fprintf(out, "topk local: API on %s, Pub/Sub %s, Redis %s, Bigtable %s, load %d events/s (Zipf %.1f over %d items; types %s; %d countries with their regions)\n",
		cfg.Addr, psAddr, rconn.Addr, btAddr, cfg.Rate, cfg.Zipf, cfg.Items, strings.Join(cfg.loadTypes(), ","), cfg.Countries)
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
	fmt.Fprintf(out, "stopping: load stopped, waiting for the pipeline to drain (idle %v)\n", cfg.IdleStop)
	var r result
	select {
	case r = <-pipeDone:
	case <-time.After(cfg.IdleStop + 10*time.Minute):
		return Stats{}, errors.New("pipeline did not drain within 10 minutes of the idle stop")
	}
	if err := <-archDone; err != nil {
		return Stats{}, fmt.Errorf("archive: %w", err)
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
	fmt.Fprintf(out, "done: published %d events; pipeline counted %d, %d lists, 1m lag p50 %.1fs p99 %.1fs\n",
		st.Published, r.rep.Events, r.rep.Lists, p50/1000, p99/1000)
	if r.err != nil {
		return st, r.err
	}
	if loadErr != nil && !errors.Is(loadErr, context.Canceled) && !errors.Is(loadErr, context.DeadlineExceeded) {
		return st, loadErr
	}
	return st, nil
}

// loadTypes are the synthetic load's types (video when none are set).
func (c Config) loadTypes() []string {
	if len(c.Types) == 0 {
		return []string{"video"}
	}
	return c.Types
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
		b, events, err := g.Beacon(k, now)
		if err != nil {
			return err
		}
		results = append(results, pub.Publish(ctx, &pubsub.Message{Data: slices.Clone(b),
			Attributes: map[string]string{"ts": strconv.FormatInt(now.UnixMilli(), 10), "beacon_id": "local-" + strconv.FormatInt(k, 10)}}))
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
