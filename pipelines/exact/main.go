// Command exact is topk's exact path: a Beam batch job that recounts closed
// event hours from the archive and writes the exact tables.
//
//	go run ./pipelines/exact --archive=/data/archive --hour=2026-11-30T10
//	go run ./pipelines/exact --archive=/data/archive --from=2026-11-30T00 --to=2026-12-01T00
//	go run ./pipelines/exact --archive=gs://my-bucket/archive --hour=2026-11-30T10
//
// --archive is a local folder or gs://bucket/prefix (Cloud Storage:
// Application Default Credentials, or STORAGE_EMULATOR_HOST's emulator); the
// job reads the hour's objects by range requests and uploads the exact
// table to the same root.
//
// The recount itself is package pipelines/recount (this command imports it,
// so it is also the Beam worker for its pipelines). For each hour, in order:
// read the hour's Parquet files and its late/
// folder, drop duplicate event_ids, apply the countable-event rules (the
// flags of transforms/rules: --rules=none keeps only the dedupe, --bots,
// --blocklist, --repeat_gap, --cap, --rules_window; the rules version is
// logged and reported with each hour), count per (type, scope, item) for
// every scope of the event, then
//
//  1. write the exact hourly table as Parquet at
//     ARCHIVE/exact/hour=.../counts.parquet (temp + rename, or one upload:
//     overwrite);
//  2. overwrite the hour's counts in Bigtable and apply them to the all-time
//     totals by the difference from what the hour's last run wrote, then
//     update the all-time candidates (store.WriteHour);
//  3. recompute the 24-hour candidates from the 24 hourly partitions of the
//     window (store.Recompute24h);
//  4. mark the hour done and move exact_until over the done hours that
//     follow it without a gap.
//
// The Beam job only counts: it writes one Parquet file per item partition
// to a staging folder (a local path: --staging, by default next to the exact
// table under a local archive and the system's temp folder under a gs://
// one), and the writes above happen here, after the job has
// succeeded, from those files. That keeps every external write out of
// bundles a runner may retry, and each write is an overwrite or a ledger
// difference, so rerunning the command for an hour (three times, or after a
// crash at any point) leaves the same tables.
//
// The runner is Beam's --runner flag: Prism in-process by default,
// --runner=universal --endpoint=HOST:PORT --environment_type=LOOPBACK for a
// portable job server, --runner=dataflow for Dataflow (the archive and the
// staging folder must then be reachable by the workers: a gs:// archive is,
// but the staging folder is a local path, so a runner whose workers are
// other machines needs --staging on a folder they all share and this
// command can read, such as an NFS mount). Bigtable: BIGTABLE_EMULATOR_HOST selects an
// emulator; with neither it nor a real --bigtable_project, an in-process
// bttest is started and its tables vanish at exit (the Parquet table stays).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/topk-dev/topk/pipelines/internal/beamrun"
	"github.com/topk-dev/topk/pipelines/recount"
	"github.com/topk-dev/topk/transforms/exact/store"
	"github.com/topk-dev/topk/transforms/rules"
)

// Flags is the command line.
type Flags struct {
	Archive, Hour, From, To string
	Staging                 string
	Project, Instance       string
	K, Shards, Parts        int
	Readers, Waves          int
	RequireClosed           bool
	ListsDir, MetricsFile   string
	RunMetricsFile          string
	Bigtable                bool
	CPUProfile              string
	// Rules are the countable-event rules' flags (--rules, --bots, ...).
	Rules *rules.Config
}

// Register defines the flags on fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Archive, "archive", "archive", "archive root: a local folder, or gs://bucket/prefix")
	fs.StringVar(&f.Staging, "staging", "", "local folder for the job's count files (default: next to the exact table for a local archive, the temp folder for gs://); with a gs:// archive and workers on other machines, a folder they all share")
	fs.StringVar(&f.Hour, "hour", "", "one event hour to recount, e.g. 2026-11-30T10")
	fs.StringVar(&f.From, "from", "", "first hour of a range to recount")
	fs.StringVar(&f.To, "to", "", "end of the range, exclusive (the first hour not recounted)")
	fs.StringVar(&f.Project, "bigtable_project", "topk-local", "Bigtable project")
	fs.StringVar(&f.Instance, "bigtable_instance", "topk", "Bigtable instance")
	fs.IntVar(&f.K, "k", 1000, "list depth K; the exact candidates keep 3K")
	fs.IntVar(&f.Shards, "shards", recount.DefaultShards, "event_id shards for the dedupe")
	fs.IntVar(&f.Parts, "parts", recount.DefaultParts, "item partitions for the sums")
	fs.IntVar(&f.Readers, "readers", 0, "read branches the files are dealt to (0: one per CPU)")
	fs.IntVar(&f.Waves, "waves", 0, "groups the dedupe runs in, one after the other, so an in-memory runner (Prism) holds a fraction of the events at once (0: 4); use 1 on Dataflow or Flink")
	fs.BoolVar(&f.RequireClosed, "require_closed", true, "refuse hours without the _CLOSED marker")
	fs.StringVar(&f.ListsDir, "lists_dir", "", "the fast path's --lists_out folder: grade the 1h lists published at each hour's end")
	fs.StringVar(&f.CPUProfile, "cpuprofile", "", "write a CPU profile of the whole run (Prism and, when embedded, bttest run in-process) to this file")
	fs.BoolVar(&f.Bigtable, "bigtable", true, "write the Bigtable exact tables; false: only the Parquet exact table (a backfill of the analysts' table, or to time the count alone)")
	fs.StringVar(&f.MetricsFile, "metrics_file", "", "write the grades as Prometheus text here (textfile collector)")
	f.Rules = rules.RegisterFlags(fs, "")
	fs.StringVar(&f.RunMetricsFile, "run_metrics_file", "", "write what the run did (hours, duration, exact_until) as Prometheus text here (textfile collector)")
}

// Config turns the flags into a Config (without a store connection).
func (f *Flags) Config() (recount.Config, error) {
	cfg := recount.Config{Archive: f.Archive, Staging: f.Staging, K: f.K, Shards: f.Shards, Parts: f.Parts, Readers: f.Readers, Waves: f.Waves, RequireClosed: f.RequireClosed,
		Project: f.Project, Instance: f.Instance, ListsDir: f.ListsDir, MetricsFile: f.MetricsFile, ParquetOnly: !f.Bigtable}
	if f.Rules != nil {
		if err := f.Rules.Validate(); err != nil {
			return cfg, err
		}
		rc := *f.Rules
		cfg.Rules = &rc
	}
	parse := func(name, v string) (time.Time, error) {
		t, err := time.Parse(store.HourFormat, v)
		if err != nil {
			return t, fmt.Errorf("--%s=%q: want YYYY-MM-DDTHH: %w", name, v, err)
		}
		return t, nil
	}
	switch {
	case f.Hour != "" && f.From == "" && f.To == "":
		h, err := parse("hour", f.Hour)
		if err != nil {
			return cfg, err
		}
		cfg.Hours = []time.Time{h}
	case f.Hour == "" && f.From != "" && f.To != "":
		from, err := parse("from", f.From)
		if err != nil {
			return cfg, err
		}
		to, err := parse("to", f.To)
		if err != nil {
			return cfg, err
		}
		for h := from; h.Before(to); h = h.Add(time.Hour) {
			cfg.Hours = append(cfg.Hours, h)
		}
		if len(cfg.Hours) == 0 {
			return cfg, fmt.Errorf("--from=%s --to=%s is an empty range", f.From, f.To)
		}
	default:
		return cfg, fmt.Errorf("give --hour, or --from and --to")
	}
	return cfg, nil
}

func main() {
	var f Flags
	f.Register(flag.CommandLine)
	beamrun.Main("exact", func(ctx context.Context) error { return run(ctx, &f) })
}

func run(ctx context.Context, f *Flags) error {
	cfg, err := f.Config()
	if err != nil {
		return err
	}
	stopProfile, err := beamrun.CPUProfile(f.CPUProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	if os.Getenv("BIGTABLE_EMULATOR_HOST") == "" && cfg.Project == "topk-local" && !cfg.ParquetOnly {
		addr, stopBT, err := store.Embedded()
		if err != nil {
			return err
		}
		defer stopBT()
		slog.Warn("exact: no BIGTABLE_EMULATOR_HOST; using an in-process bttest whose tables vanish at exit", "addr", addr)
		cfg.StoreOptions = store.EmulatorOptions(addr)
	}
	reps, err := recount.Run(ctx, cfg)
	if f.RunMetricsFile != "" {
		if merr := writeRunMetrics(f.RunMetricsFile, len(cfg.Hours), reps, err, time.Now()); merr != nil && err == nil {
			err = merr
		}
	}
	enc := json.NewEncoder(os.Stdout)
	for _, r := range reps {
		if e := enc.Encode(r); e != nil {
			return e
		}
	}
	return err
}
