package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners"

	"github.com/topk-dev/topk/pipelines/fastpath"
	"github.com/topk-dev/topk/pipelines/internal/beamrun"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/preagg"
)

// A --source file that does not exist is refused by Config, before any job
// is built, with one line naming the file.
func TestConfigMissingFile(t *testing.T) {
	var f Flags
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	f.Register(fs)
	f.Source = "file:/nonexistent/events.ndjson"
	_, err := f.Config("")
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/events.ndjson") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Config = %v; want one line naming the missing file", err)
	}
}

// A profile window that ends before it starts, or negative, is refused by
// Config, before any connection or job; a valid one is taken.
func TestConfigProfileWindow(t *testing.T) {
	for _, c := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--cpuprofile_from=30s", "--cpuprofile_to=120s"}, true},
		{[]string{"--cpuprofile_from=30s"}, true},
		{[]string{"--cpuprofile_from=30s", "--cpuprofile_to=30s"}, false},
		{[]string{"--cpuprofile_from=-1s"}, false},
	} {
		var f Flags
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		f.Register(fs)
		if err := fs.Parse(append([]string{"--source=pubsub:projects/p/subscriptions/s"}, c.args...)); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Config(""); (err == nil) != c.ok {
			t.Errorf("%v: Config error %v, want ok %v", c.args, err, c.ok)
		}
	}
}

// --help starts with the summary, lists this command's flags before Beam's,
// and every flag once.
func TestUsageOrder(t *testing.T) {
	var f Flags
	own := flag.NewFlagSet("streaming", flag.ContinueOnError)
	f.Register(own)
	var buf bytes.Buffer
	flag.CommandLine.SetOutput(&buf)
	defer flag.CommandLine.SetOutput(nil)
	beamrun.Share(own)
	beamrun.Usage("streaming: summary.", "streaming --source=SOURCE [flags]", own)()
	out := buf.String()
	if !strings.HasPrefix(out, "streaming: summary.\n") {
		t.Fatalf("usage does not start with the summary:\n%.200s", out)
	}
	src, runner := strings.Index(out, "\n  -source "), strings.Index(out, "\n  -runner ")
	if src < 0 || runner < 0 || src > runner {
		t.Fatalf("-source at %d, -runner at %d: the command's flags must come first", src, runner)
	}
	if n := strings.Count(out, "\n  -source "); n != 1 {
		t.Fatalf("-source listed %d times", n)
	}
}

// The trending and recovery flags reach the fast path's configuration, and
// a trending configuration that cannot work (leave above enter) is refused
// before any job is built.
func TestTrendAndRecoveryFlags(t *testing.T) {
	parse := func(args ...string) (fastpath.Config, error) { return parseFlags(t, args...) }
	cfg, err := parse("--trend_min_count=7", "--trend_half_life=30m", "--trend_seasonal", "--recovery_horizon=90m")
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Trend.Trend; c.MinCount != 7 || c.HalfLife != 30*time.Minute || !c.Seasonal || !cfg.Trending {
		t.Errorf("trend config %+v (trending %v): want min count 7, half-life 30m, seasonal", c, cfg.Trending)
	}
	if rl := cfg.SourceOpts.RecoveryLog; !rl.Enabled() || rl.Horizon != 90*time.Minute || rl.Retention != 3*time.Hour || rl.Instance != "topk" {
		t.Errorf("recovery log %+v: want on, horizon 90m, retention 3h, instance topk", rl)
	}
	cfg, err = parse("--recovery_log=false", "--trending=false")
	if err != nil || cfg.SourceOpts.RecoveryLog.Enabled() || cfg.Trending {
		t.Errorf("--recovery_log=false --trending=false: %v, log %v, trending %v", err, cfg.SourceOpts.RecoveryLog.Enabled(), cfg.Trending)
	}
	if cfg, err = parse(); err != nil || cfg.SourceOpts.RecoveryLog.Horizon != time.Hour+2*time.Minute+10*time.Second {
		t.Errorf("default recovery horizon %v (%v), want 1h2m10s", cfg.SourceOpts.RecoveryLog.Horizon, err)
	}
	if c := cfg.Trend.Trend; c.Counts != "users" || cfg.Preagg.UsersTop != 64 {
		t.Errorf("default trending counts %q, users top %d: want users, 64", c.Counts, cfg.Preagg.UsersTop)
	}
	if cfg, err = parse("--trend_counts=events", "--trend_users_top=0"); err != nil || cfg.Trend.Trend.Counts != "events" {
		t.Errorf("--trend_counts=events: %v, counts %q", err, cfg.Trend.Trend.Counts)
	}
	if _, err := parse("--trend_users_top=0"); err == nil || !strings.Contains(err.Error(), "users") {
		t.Errorf("trending by users without tallies: %v; want an error", err)
	}
	if _, err := parse("--trend_counts=views"); err == nil {
		t.Error("--trend_counts=views: no error")
	}
	if _, err := parse("--trend_enter=0.001", "--trend_leave=0.002"); err == nil || !strings.Contains(err.Error(), "trending") {
		t.Errorf("leave above enter: %v; want a trending configuration error", err)
	}
}

// --memory_limit_mb: a positive value is the limit in MiB, -1 none, and 0
// (the default) 75% of the memory the process may use (here: a limit is
// set, and it is at least 512 MiB). GOMEMLIMIT, when set, wins.
func TestMemoryLimit(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "") // set to empty: setMemoryLimit must not treat it as set
	os.Unsetenv("GOMEMLIMIT")
	prev := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(prev)
	current := func() int64 { return debug.SetMemoryLimit(-1) }

	setMemoryLimit(300)
	if got := current(); got != 300<<20 {
		t.Errorf("300 MiB: limit %d", got)
	}
	debug.SetMemoryLimit(math.MaxInt64)
	setMemoryLimit(-1)
	if got := current(); got != math.MaxInt64 {
		t.Errorf("-1: limit %d, want none", got)
	}
	setMemoryLimit(0)
	got := current()
	if got == math.MaxInt64 || got < 512<<20 {
		t.Errorf("automatic: limit %d MiB, want 75%% of this machine's or container's memory", got>>20)
	}
	t.Logf("automatic limit here: %d MiB", got>>20)

	debug.SetMemoryLimit(math.MaxInt64)
	t.Setenv("GOMEMLIMIT", "1GiB")
	setMemoryLimit(300)
	if got := current(); got != math.MaxInt64 {
		t.Errorf("GOMEMLIMIT set: limit changed to %d", got)
	}
}

// --region_partitions and --country_partitions reach the pre-aggregation
// (default 4 and all) and a negative value is refused before anything
// runs.
func TestRegionPartitionsFlag(t *testing.T) {
	parse := func(args ...string) (fastpath.Config, error) { return parseFlags(t, args...) }
	if cfg, err := parse(); err != nil || cfg.Preagg.RegionPartitions != 4 || cfg.Preagg.Partitions != 16 {
		t.Errorf("default: %d region partitions of %d (%v), want 4 of 16", cfg.Preagg.RegionPartitions, cfg.Preagg.Partitions, err)
	}
	if cfg, err := parse("--region_partitions=16"); err != nil || cfg.Preagg.RegionPartitions != 16 {
		t.Errorf("--region_partitions=16: %d (%v)", cfg.Preagg.RegionPartitions, err)
	}
	if _, err := parse("--region_partitions=-1"); err == nil || !strings.Contains(err.Error(), "region partitions") {
		t.Errorf("--region_partitions=-1: %v; want a region partitions error", err)
	}
	// --country_partitions likewise; by default countries use all P.
	if cfg, err := parse(); err != nil || cfg.Preagg.CountryPartitions != 0 {
		t.Errorf("default: %d country partitions (%v), want 0 (all)", cfg.Preagg.CountryPartitions, err)
	}
	if cfg, err := parse("--country_partitions=4"); err != nil || cfg.Preagg.CountryPartitions != 4 {
		t.Errorf("--country_partitions=4: %d (%v)", cfg.Preagg.CountryPartitions, err)
	}
	if _, err := parse("--country_partitions=-1"); err == nil || !strings.Contains(err.Error(), "country partitions") {
		t.Errorf("--country_partitions=-1: %v; want a country partitions error", err)
	}
}

// --max_distinct and --max_pairs reach the pre-aggregation, by default
// its own bounds (2^20 keys, 2^22 pairs), and a negative value is refused
// before anything runs.
func TestEarlyFlushFlags(t *testing.T) {
	parse := func(args ...string) (fastpath.Config, error) { return parseFlags(t, args...) }
	if cfg, err := parse(); err != nil || cfg.Preagg.MaxDistinct != 1<<20 || cfg.Preagg.MaxPairs != preagg.DefaultMaxPairs {
		t.Errorf("default: max distinct %d, max pairs %d (%v), want %d and %d", cfg.Preagg.MaxDistinct, cfg.Preagg.MaxPairs, err, 1<<20, preagg.DefaultMaxPairs)
	}
	if cfg, err := parse("--max_distinct=4096", "--max_pairs=8192"); err != nil || cfg.Preagg.MaxDistinct != 4096 || cfg.Preagg.MaxPairs != 8192 {
		t.Errorf("--max_distinct=4096 --max_pairs=8192: %d, %d (%v)", cfg.Preagg.MaxDistinct, cfg.Preagg.MaxPairs, err)
	}
	if _, err := parse("--max_pairs=-1"); err == nil || !strings.Contains(err.Error(), "max pairs") {
		t.Errorf("--max_pairs=-1: %v; want a max pairs error", err)
	}
}

// --durable_windows: by default on for Dataflow and a job server
// (universal), whose state outlives a worker, and off on Prism in this
// process, whose state dies with it; given, it wins either way.
func TestDurableWindowsFlag(t *testing.T) {
	old := *runners.Runner
	defer func() { *runners.Runner = old }()
	for _, c := range []struct {
		runner string
		args   []string
		want   bool
	}{
		{"", nil, false},
		{"prism", nil, false},
		{"", []string{"--durable_windows"}, true},
		{"", []string{"--durable_windows=true"}, true},
		{"dataflow", nil, true},
		{"universal", nil, true},
		{"dataflow", []string{"--durable_windows=false"}, false},
	} {
		*runners.Runner = c.runner
		cfg, err := parseFlags(t, c.args...)
		if err != nil || cfg.Durable != c.want {
			t.Errorf("runner %q, %v: durable %v (%v), want %v", c.runner, c.args, cfg.Durable, err, c.want)
		}
	}
	var f Flags
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.Register(fs)
	if err := fs.Parse([]string{"--durable_windows=maybe"}); err == nil {
		t.Error("--durable_windows=maybe accepted")
	}
}

// parseFlags is the streaming command's configuration from args, after a
// Pub/Sub source.
func parseFlags(t *testing.T, args ...string) (fastpath.Config, error) {
	t.Helper()
	var f Flags
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	f.Register(fs)
	if err := fs.Parse(append([]string{"--source=pubsub:projects/p/subscriptions/s"}, args...)); err != nil {
		t.Fatal(err)
	}
	return f.Config("")
}

// --redis=none: a file replay publishes to --lists_out only (and serves
// its stage metrics), and never dials Redis (REDIS_ADDR points at a closed
// port here, so any connection would fail the run); without --lists_out
// it is refused, since the lists would go nowhere.
func TestNoRedis(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	t.Setenv("REDIS_ADDR", closed)
	parse := func(args ...string) *Flags {
		var f Flags
		fs := flag.NewFlagSet("streaming", flag.ContinueOnError)
		f.Register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return &f
	}
	const src = "--source=file:../../internal/streams/testdata/kosarak10k.ndjson.gz"
	if err := run(context.Background(), parse(src, "--redis=none", "--memory_limit_mb=-1")); err == nil || !strings.Contains(err.Error(), "--lists_out") {
		t.Fatalf("--redis=none without --lists_out: %v; want an error naming --lists_out", err)
	}
	dir := t.TempDir()
	// --metrics_addr too: without Redis it serves the stages' counters
	// only (no publish observer to read lists back).
	if err := run(context.Background(), parse(src, "--redis=none", "--lists_out="+dir, "--memory_limit_mb=-1", "--metrics_addr=127.0.0.1:0",
		"--windows=1m", "--scopes=false", "--trending=false", "--partitions=2", "--shards=1")); err != nil {
		t.Fatalf("--redis=none --lists_out: %v", err)
	}
	lists, err := filepath.Glob(filepath.Join(dir, "*", "global", "1m", "*.json"))
	if err != nil || len(lists) == 0 {
		t.Fatalf("no 1m list files under %s (%v)", dir, err)
	}
	blob, err := os.ReadFile(lists[len(lists)-1])
	if err != nil {
		t.Fatal(err)
	}
	l, err := schemas.UnmarshalList(blob)
	if err != nil || len(l.Items) == 0 {
		t.Fatalf("%s: %v, %d items; want a list with items", lists[len(lists)-1], err, len(l.Items))
	}
}
