// Command serving is topk's API: reads of the published lists (GET /v1/top),
// ingest (POST /v1/events), takedowns (/v1/admin/removals), operations
// endpoints and the trending page at /. The code lives in serving/api (see
// its package doc); this file only reads flags.
//
//	go run ./serving --addr=:8080
//
// Redis: --redis, else REDIS_ADDR, else an embedded in-process Redis.
// Pub/Sub: PUBSUB_EMULATOR_HOST when set; otherwise with --local (the
// default) an embedded in-process fake that accepts beacons and keeps them
// in memory, so the API can be tried alone; --local=false publishes to
// Google Cloud Pub/Sub (--pubsub_project) with default credentials.
// The admin token comes from --admin_token or TOPK_ADMIN_TOKEN.
// --fastly_service_id (with --fastly_token or FASTLY_API_TOKEN) purges the
// Fastly cache by surrogate key on takedowns and rollbacks; --catalogue
// loads titles from an NDJSON file at startup.
// --exact serves GET /v1/charts/daily from the Bigtable exact tables
// (--bigtable_project, --bigtable_instance): the official emulator when
// BIGTABLE_EMULATOR_HOST is set (the table is created there if missing),
// else Google Cloud with default credentials.
// --geo_db is a MaxMind-format City database: ingest sets each event's
// country and region from the client IP (--client_ip_header behind a
// proxy); without it events get none, and a client's own are never
// trusted. The rules flags (--bots, --rules=none, ...: transforms/rules)
// drop beacons from known bots' user agents at ingest; the other rules are
// the counting paths'.
// --removals_bigtable keeps the deny set of takedowns durably in the same
// Bigtable table (Redis is its cache, refilled when it comes back empty);
// "auto" (the default) turns it on when BIGTABLE_EMULATOR_HOST is set or
// --local=false, and leaves takedowns in Redis only in plain local mode.
//
// It never imports Beam: `go list -deps ./serving | grep beam` prints nothing.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/topk-dev/topk/serving/api"
	"github.com/topk-dev/topk/serving/cdn"
	"github.com/topk-dev/topk/serving/geo"
	"github.com/topk-dev/topk/transforms/exact/store"
	"github.com/topk-dev/topk/transforms/rules"
)

// redisLogger sends go-redis' internal log lines to slog at debug level.
type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	r.l.DebugContext(ctx, "redis: "+fmt.Sprintf(format, v...))
}

func main() {
	cfg, ex, err := parseAllFlags(flag.CommandLine, os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	// The read path's only garbage is net/http's per-request allocations
	// over a small heap (the lists and their rendered bytes): collecting
	// less often costs a few MB and saves ~15% CPU per read (BENCHMARKS.md).
	// GOGC, when set, wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	// go-redis logs every failed dial while Redis is down; keep that at
	// debug level, the server logs the outage once.
	redis.SetLogger(redisLogger{cfg.Logger})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if ex.on || ex.removals {
		st, err := openExact(ctx, ex)
		if err != nil {
			cfg.Logger.Error("serving failed", "err", err)
			os.Exit(1)
		}
		defer st.Close()
		if ex.on {
			cfg.Exact = st
		}
		if ex.removals {
			cfg.Removals = st
		}
	}
	if ex.geoDB != "" {
		db, err := geo.Open(ex.geoDB)
		if err != nil {
			cfg.Logger.Error("serving failed", "err", err)
			os.Exit(1)
		}
		defer db.Close()
		cfg.Geo = db
	} else {
		cfg.Logger.Warn("no --geo_db: events keep no country or region (the client's are never trusted)")
	}
	rs, err := rules.New(*ex.rules)
	if err != nil {
		cfg.Logger.Error("serving failed", "err", err)
		os.Exit(1)
	}
	cfg.Rules = rs
	go rs.Watch(ctx, func(err error) { cfg.Logger.Error("rules: reload failed; the old rules stay", "err", err) })
	cfg.Logger.Info("rules", "version", rs.Version())
	if err := run(ctx, cfg, ex.catalogue); err != nil {
		cfg.Logger.Error("serving failed", "err", err)
		os.Exit(1)
	}
}

// run is api.Run that first loads the catalogue file, if any.
func run(ctx context.Context, cfg api.Config, catalogueFile string) error {
	srv, err := api.New(cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	if catalogueFile != "" {
		f, err := os.Open(catalogueFile)
		if err != nil {
			return fmt.Errorf("--catalogue: %w", err)
		}
		n, err := srv.Catalogue().Load(ctx, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("--catalogue %s: %w", catalogueFile, err)
		}
		cfg.Logger.Info("catalogue loaded", "file", catalogueFile, "records", n)
	}
	return srv.Run(ctx)
}

// exactFlags say whether and where to read the exact tables, which files
// ingest opens (the geo database and the rules' files) and the catalogue.
type exactFlags struct {
	on                bool
	removals          bool // the durable deny set in Bigtable
	project, instance string
	geoDB             string
	rules             *rules.Config
	catalogue         string // NDJSON file loaded at startup
}

// openExact opens the exact store; on an emulator it also creates the table
// (a fresh emulator has none; in Google Cloud the recount provisions it).
func openExact(ctx context.Context, ex exactFlags) (*store.Store, error) {
	st, err := store.Open(ctx, ex.project, ex.instance)
	if err != nil {
		return nil, fmt.Errorf("exact tables: %w", err)
	}
	if os.Getenv("BIGTABLE_EMULATOR_HOST") != "" {
		if err := st.EnsureTables(ctx); err != nil {
			st.Close()
			return nil, fmt.Errorf("exact tables: %w", err)
		}
	}
	return st, nil
}

// parseFlags turns the command line (and TOPK_ADMIN_TOKEN) into a Config.
func parseFlags(fs *flag.FlagSet, args []string) (api.Config, error) {
	cfg, _, err := parseAllFlags(fs, args)
	return cfg, err
}

// parseAllFlags is parseFlags plus the exact-table flags, which main acts on
// (opening a Bigtable client is not parsing).
func parseAllFlags(fs *flag.FlagSet, args []string) (api.Config, exactFlags, error) {
	var cfg api.Config
	var ex exactFlags
	var types, logLevel, removals string
	var fastly cdn.Fastly
	fs.StringVar(&cfg.Addr, "addr", ":8080", "listen address")
	fs.StringVar(&cfg.RedisAddr, "redis", "", "Redis address (default REDIS_ADDR, else an embedded Redis)")
	fs.StringVar(&cfg.PubSubProject, "pubsub_project", "topk-local", "Pub/Sub project")
	fs.StringVar(&cfg.Topic, "topic", "views", "Pub/Sub topic receiving accepted beacons")
	fs.BoolVar(&cfg.Local, "local", true, "without PUBSUB_EMULATOR_HOST, publish to an embedded in-process Pub/Sub fake (false: Google Cloud)")
	fs.StringVar(&cfg.AdminToken, "admin_token", os.Getenv("TOPK_ADMIN_TOKEN"), "bearer token of /v1/admin/* (default TOPK_ADMIN_TOKEN; empty disables the admin API)")
	fs.DurationVar(&cfg.StaleAfter, "stale_after", 0, "mark a list stale when it has not moved for this long (default 2m)")
	fs.DurationVar(&cfg.PollInterval, "poll_interval", 0, "poll Redis pointers this often besides pub/sub (default 5s)")
	fs.StringVar(&cfg.KeyPrefix, "key_prefix", "topk", "Redis key prefix of the lists")
	fs.DurationVar(&cfg.PublishTimeout, "publish_timeout", api.DefaultPublishTimeout, "ingest: answer 503 when Pub/Sub has not acknowledged a beacon within this (at most write_timeout - 3s)")
	fs.DurationVar(&cfg.WriteTimeout, "write_timeout", api.DefaultWriteTimeout, "HTTP write timeout")
	fs.StringVar(&types, "types", "", "comma-separated item types accepted before their first list is published")
	fs.StringVar(&logLevel, "log_level", "info", "debug, info, warn or error")
	fs.BoolVar(&ex.on, "exact", false, "serve /v1/charts/daily from the Bigtable exact tables (BIGTABLE_EMULATOR_HOST selects the emulator)")
	fs.StringVar(&removals, "removals_bigtable", "auto", "keep takedowns durably in Bigtable (true, false, or auto: when BIGTABLE_EMULATOR_HOST is set or --local=false)")
	fs.StringVar(&ex.project, "bigtable_project", "topk-local", "Bigtable project of the exact tables")
	fs.StringVar(&ex.instance, "bigtable_instance", "topk", "Bigtable instance of the exact tables")
	fs.StringVar(&ex.geoDB, "geo_db", "", "MaxMind-format City database (GeoIP2/GeoLite2 City .mmdb): events get country and region from the client IP; without it they get none")
	fs.StringVar(&cfg.ClientIPHeader, "client_ip_header", "", "header holding the client IP as set by a trusted proxy in front (e.g. X-Real-IP); default: the connection's address")
	ex.rules = rules.RegisterFlags(fs, "")
	fs.StringVar(&fastly.ServiceID, "fastly_service_id", "", "purge this Fastly service's cache by surrogate key on takedowns and rollbacks (empty: no purge)")
	fs.StringVar(&fastly.Token, "fastly_token", os.Getenv("FASTLY_API_TOKEN"), "Fastly API token (default FASTLY_API_TOKEN)")
	fs.StringVar(&fastly.Endpoint, "fastly_endpoint", cdn.DefaultFastlyEndpoint, "Fastly API base URL")
	fs.BoolVar(&fastly.Soft, "fastly_soft_purge", false, "soft purge: mark stale instead of evicting")
	fs.StringVar(&ex.catalogue, "catalogue", "", "load this NDJSON file of {type,item,title,thumbnail} into the catalogue at startup")
	if err := fs.Parse(args); err != nil {
		return cfg, ex, err
	}
	if fs.NArg() > 0 {
		return cfg, ex, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	switch removals {
	case "auto":
		ex.removals = os.Getenv("BIGTABLE_EMULATOR_HOST") != "" || !cfg.Local
	case "true", "false":
		ex.removals = removals == "true"
	default:
		return cfg, ex, fmt.Errorf("--removals_bigtable=%q: want true, false or auto", removals)
	}
	for _, t := range strings.Split(types, ",") {
		if t = strings.TrimSpace(t); t != "" {
			cfg.Types = append(cfg.Types, t)
		}
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(logLevel)); err != nil {
		return cfg, ex, fmt.Errorf("--log_level: %w", err)
	}
	cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if cfg.StaleAfter == 0 {
		cfg.StaleAfter = api.DefaultStaleAfter
	}
	if err := ex.rules.Validate(); err != nil {
		return cfg, ex, err
	}
	if fastly.ServiceID != "" {
		if err := fastly.Validate(); err != nil {
			return cfg, ex, fmt.Errorf("--fastly_*: %w", err)
		}
		cfg.Purger = &fastly
	}
	return cfg, ex, cfg.Validate()
}
