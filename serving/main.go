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
)

// redisLogger sends go-redis' internal log lines to slog at debug level.
type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	r.l.DebugContext(ctx, "redis: "+fmt.Sprintf(format, v...))
}

func main() {
	cfg, err := parseFlags(flag.CommandLine, os.Args[1:])
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
	if err := api.Run(ctx, cfg); err != nil {
		cfg.Logger.Error("serving failed", "err", err)
		os.Exit(1)
	}
}

// parseFlags turns the command line (and TOPK_ADMIN_TOKEN) into a Config.
func parseFlags(fs *flag.FlagSet, args []string) (api.Config, error) {
	var cfg api.Config
	var types, logLevel string
	fs.StringVar(&cfg.Addr, "addr", ":8080", "listen address")
	fs.StringVar(&cfg.RedisAddr, "redis", "", "Redis address (default REDIS_ADDR, else an embedded Redis)")
	fs.StringVar(&cfg.PubSubProject, "pubsub_project", "topk-local", "Pub/Sub project")
	fs.StringVar(&cfg.Topic, "topic", "views", "Pub/Sub topic receiving accepted beacons")
	fs.BoolVar(&cfg.Local, "local", true, "without PUBSUB_EMULATOR_HOST, publish to an embedded in-process Pub/Sub fake (false: Google Cloud)")
	fs.StringVar(&cfg.AdminToken, "admin_token", os.Getenv("TOPK_ADMIN_TOKEN"), "bearer token of /v1/admin/* (default TOPK_ADMIN_TOKEN; empty disables the admin API)")
	fs.DurationVar(&cfg.StaleAfter, "stale_after", 0, "mark a list stale when it has not moved for this long (default 2m)")
	fs.DurationVar(&cfg.PollInterval, "poll_interval", 0, "poll Redis pointers this often besides pub/sub (default 5s)")
	fs.StringVar(&cfg.KeyPrefix, "key_prefix", "topk", "Redis key prefix of the lists")
	fs.StringVar(&types, "types", "", "comma-separated item types accepted before their first list is published")
	fs.StringVar(&logLevel, "log_level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	for _, t := range strings.Split(types, ",") {
		if t = strings.TrimSpace(t); t != "" {
			cfg.Types = append(cfg.Types, t)
		}
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(logLevel)); err != nil {
		return cfg, fmt.Errorf("--log_level: %w", err)
	}
	cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if cfg.StaleAfter == 0 {
		cfg.StaleAfter = api.DefaultStaleAfter
	}
	return cfg, cfg.Validate()
}
