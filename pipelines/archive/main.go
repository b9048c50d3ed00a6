// Command archive runs the exact path's archiver (transforms/archive): it
// reads beacons from its own Pub/Sub subscription on the "views" topic and
// writes every event, by event hour, as Parquet under --root, closing each
// hour --grace after it ends. --root is a local folder or gs://bucket/prefix
// (Cloud Storage: Application Default Credentials, or STORAGE_EMULATOR_HOST's
// emulator).
//
//	go run ./pipelines/archive --root=./archive
//	go run ./pipelines/archive --root=gs://my-bucket/archive --subscription=projects/P/subscriptions/archive
//	PUBSUB_EMULATOR_HOST=127.0.0.1:8085 go run ./pipelines/archive --subscription=projects/topk-local/subscriptions/archive
//
// With an emulator or fake (--pubsub_endpoint, default $PUBSUB_EMULATOR_HOST)
// it first creates --topic and the subscription if they are missing (a new
// subscription only receives what is published after it exists); on Google
// Cloud (no endpoint) both must exist. Pub/Sub outages are waited out (an
// emulator that restarted gets its topic and subscription back). Ctrl-C
// flushes, acknowledges and exits. Event hours older than --retention (30
// days) are deleted every hour (transforms/archive/retention.go);
// --metrics_addr serves Prometheus metrics (pipelines/archive/ops.go).
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
	"syscall"
	"time"

	"github.com/topk-dev/topk/internal/pubsubx"
	"github.com/topk-dev/topk/internal/retry"
	"github.com/topk-dev/topk/transforms/archive"
)

// Flags is the command line.
type Flags struct {
	Root         string
	Subscription string
	Topic        string
	Grace        time.Duration
	FlushEvery   time.Duration
	MaxRows      int
	IdleStop     time.Duration
	Endpoint     string
	Retention    time.Duration
	MetricsAddr  string
}

// ParseFlags parses args (without the program name).
func ParseFlags(args []string, stderr io.Writer) (Flags, error) {
	var f Flags
	fs := flag.NewFlagSet("archive", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.Root, "root", "./archive", "archive root: a local folder, or gs://bucket/prefix")
	fs.StringVar(&f.Subscription, "subscription", "projects/topk-local/subscriptions/archive", "Pub/Sub subscription, projects/P/subscriptions/S")
	fs.StringVar(&f.Topic, "topic", "views", "topic the subscription reads; created with it on an emulator when missing")
	fs.DurationVar(&f.Grace, "grace", archive.DefaultGrace, "an event hour closes this long after it ends")
	fs.DurationVar(&f.FlushEvery, "flush_every", archive.DefaultFlushEvery, "longest a message waits for its files and ack")
	fs.IntVar(&f.MaxRows, "max_rows", archive.DefaultMaxRows, "flush early at this many buffered rows")
	fs.DurationVar(&f.IdleStop, "idle_stop", 0, "exit after this long without messages (0: run until Ctrl-C)")
	fs.StringVar(&f.Endpoint, "pubsub_endpoint", pubsubx.EmulatorAddr(), "Pub/Sub emulator or fake host:port (default $"+pubsubx.EnvEmulator+"); empty: Google Cloud")
	fs.DurationVar(&f.Retention, "retention", archive.DefaultRetention, "delete event hours this long after they end (exact tables are kept forever; negative: never delete)")
	fs.StringVar(&f.MetricsAddr, "metrics_addr", "", "serve Prometheus metrics on this address at /metrics (e.g. :9102)")
	if err := fs.Parse(args); err != nil {
		return Flags{}, err
	}
	if fs.NArg() > 0 {
		return Flags{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return f, nil
}

// Config is the archiver configuration the flags describe.
func (f Flags) Config() archive.Config {
	return archive.Config{
		Root:              f.Root,
		Subscription:      f.Subscription,
		Grace:             f.Grace,
		FlushEvery:        f.FlushEvery,
		MaxRows:           f.MaxRows,
		IdleStop:          f.IdleStop,
		ReturnImmediately: f.Endpoint != "",
	}
}

// Run connects to Pub/Sub and archives until ctx ends.
func Run(ctx context.Context, f Flags) error {
	cfg := f.Config()
	if err := cfg.Validate(); err != nil {
		return err
	}
	project, sub, err := pubsubx.ParseSubscription(f.Subscription)
	if err != nil {
		return err
	}
	client, err := pubsubx.NewClient(ctx, project, f.Endpoint)
	if err != nil {
		return err
	}
	defer client.Close()
	if f.Endpoint != "" {
		// On an emulator the archiver creates what it reads, at start and
		// again when a restarted emulator has lost it; an emulator that is
		// not up yet is waited for.
		ensure := func(ctx context.Context) error {
			if err := pubsubx.EnsureTopic(ctx, client, f.Topic); err != nil {
				return err
			}
			return pubsubx.EnsureSubscription(ctx, client, sub, f.Topic, 60)
		}
		if _, err := (retry.Policy{Max: 5 * time.Second, Log: slog.Default(), What: "archive: create topic and subscription"}).Do(ctx, ensure); err != nil {
			return err
		}
		cfg.Recreate = ensure
	}
	stopOps, err := startOps(ctx, f, &cfg)
	if err != nil {
		return err
	}
	defer stopOps()
	return archive.Run(ctx, client, cfg)
}

func main() {
	f, err := ParseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		slog.Error("archive", "err", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, f); err != nil {
		slog.Error("archive", "err", err)
		os.Exit(1)
	}
}
