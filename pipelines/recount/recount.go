// Package recount is topk's exact path as a library: a Beam batch job that
// recounts closed event hours from the archive and writes the exact tables.
// The command pipelines/exact and the local runner (runners/local) run it.
//
// For each hour, in order: read the hour's Parquet files and its late/
// folder, drop duplicate event_ids, apply the countable-event rules
// (Config.Rules: blocklist, bots, repeats, cap; the version is logged and
// reported with the hour), count per (type, scope, item) for every scope
// of the event, then
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
// to a local staging folder, and the writes above happen in Run, after the
// job has succeeded, from those files. That keeps every external write out
// of bundles a runner may retry, and each write is an overwrite or a ledger
// difference, so recounting an hour again (three times, or after a crash at
// any point) leaves the same tables.
//
// Bigtable outages are waited out, not returned: every store call above is
// retried with capped backoff (at most 10 s between attempts) while its
// error is transient (Unavailable, DeadlineExceeded, a refused connection),
// which is safe because each is an overwrite or a ledger difference. A
// recount started while Bigtable is down waits for it; one that loses it
// half way resumes where the call failed.
//
// The package registers its DoFns with Beam in init: a binary that imports
// it is also a worker for its pipelines.
package recount

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"google.golang.org/api/option"

	"github.com/topk-dev/topk/internal/retry"
	"github.com/topk-dev/topk/pipelines/internal/beamrun"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/archive"
	"github.com/topk-dev/topk/transforms/exact/store"
	"github.com/topk-dev/topk/transforms/grade"
	"github.com/topk-dev/topk/transforms/rules"
)

// Config is one recount run.
type Config struct {
	Archive string // archive root: a local folder or gs://bucket/prefix
	// Staging is the local folder the job's count files go to, in a new
	// temporary folder removed afterwards. Empty: next to the exact table
	// for a local archive, the system's temp folder for a gs:// one.
	Staging string
	Hours   []time.Time // hours to recount, in order
	K       int         // list depth; candidates keep 3K
	Shards  int         // event_id shards for the dedupe
	Parts   int         // item partitions for the sums
	// Readers and Waves as in HourJob (0: defaults).
	Readers, Waves int
	// RequireClosed refuses an hour without its _CLOSED marker.
	RequireClosed bool

	// ParquetOnly writes the Parquet exact table and nothing to Bigtable
	// (no store is opened; exact_until does not move; no grading).
	ParquetOnly bool
	// Store, when set, is used as is; otherwise Run opens Project/Instance
	// with StoreOptions.
	Store            *store.Store
	Project          string
	Instance         string
	StoreOptions     []option.ClientOption
	Runner           func(context.Context, *beam.Pipeline) (map[string]int64, error)
	KeepStagingFiles bool

	// ListsDir is the fast path's --lists_out folder. When set, every
	// recounted hour grades the 1h lists published at its end against the
	// exact counts (DESIGN.md section 2, exact path step 4).
	ListsDir string
	// ScopedMinCount is the minimum count of the fast path's non-global 1h
	// lists (its --min_count for 1h), for grading a list that does not
	// carry min_count itself: such a list leaves out items below it, and
	// is graded against the items that could be listed. The fast path's
	// merge step does not fill schemas.List.MinCount yet, so without this
	// every country and region list is graded against items it must not
	// show and alerts on recall. 0: grade such lists against every item.
	ScopedMinCount uint64
	// MetricsFile, when set, receives the grades as Prometheus text
	// (node_exporter textfile collector format), rewritten after each hour.
	MetricsFile string
	// Logger receives grades and each hour's rules version; nil:
	// slog.Default().
	Logger *slog.Logger

	// Rules is the countable-event rule set applied before counting, the
	// same definition the fast path and ingest use (transforms/rules); nil:
	// only the event_id dedupe, as --rules=none.
	Rules *rules.Config
}

// HourReport is what Run did for one hour.
type HourReport struct {
	Hour       string           `json:"hour"`
	Files      int              `json:"files"`
	Rows       int              `json:"rows"`
	Metrics    map[string]int64 `json:"metrics"`
	ExactUntil string           `json:"exact_until"`
	Seconds    float64          `json:"seconds"`
	Grades     []grade.Grade    `json:"grades,omitempty"`
	// Rules is the version of the rule set the hour was counted with
	// (rules.Rules.Version; "r1;none" without rules).
	Rules string `json:"rules"`
}

// BeamRunner runs p with beamx.RunWithMetrics (Beam's --runner flag; Prism
// when unset) and returns the "topk" counters.
func BeamRunner(ctx context.Context, p *beam.Pipeline) (map[string]int64, error) {
	return beamrun.Counters(ctx, p, "topk")
}

// ErrNoArchive: the archive root, or the hour's folder in it, is missing.
var ErrNoArchive = errors.New("the archive is missing")

// DefaultShards and DefaultParts are the command's default event_id shards
// and item partitions.
const DefaultShards, DefaultParts = 16, 16

// Run recounts cfg.Hours one after another.
func Run(ctx context.Context, cfg Config) ([]HourReport, error) {
	if err := archive.CheckRoot(cfg.Archive); err != nil {
		return nil, fmt.Errorf("exact: --archive: %w", err)
	}
	if !archive.IsGCS(cfg.Archive) {
		if fi, err := os.Stat(cfg.Archive); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("exact: --archive=%s: %w (no such folder: run the archiver, or point --archive at the folder it writes)", cfg.Archive, ErrNoArchive)
		}
	}
	if archive.IsGCS(cfg.Staging) || strings.Contains(cfg.Staging, "://") {
		return nil, fmt.Errorf("exact: --staging must be a local folder (got %q)", cfg.Staging)
	}
	if cfg.K <= 0 || cfg.Shards <= 0 || cfg.Parts <= 0 {
		return nil, fmt.Errorf("exact: k, shards and parts must be positive")
	}
	if cfg.Readers < 0 || cfg.Waves < 0 {
		return nil, fmt.Errorf("exact: readers and waves must not be negative")
	}
	if cfg.Runner == nil {
		cfg.Runner = BeamRunner
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// The rules are read here once, so that bad files fail the run before
	// any job, and for their version; each worker reads them again.
	rc := rules.None()
	if cfg.Rules != nil {
		rc = *cfg.Rules
	}
	rs, err := rules.New(rc)
	if err != nil {
		return nil, fmt.Errorf("exact: %w", err)
	}
	if cfg.ParquetOnly && cfg.ListsDir != "" {
		return nil, fmt.Errorf("exact: grading (--lists_dir) needs the Bigtable tables")
	}
	st := cfg.Store
	if st == nil && !cfg.ParquetOnly {
		var err error
		if st, err = store.Open(ctx, cfg.Project, cfg.Instance, cfg.StoreOptions...); err != nil {
			return nil, err
		}
		defer st.Close()
	}
	if st != nil {
		if err := waitOut(ctx, cfg, "ensure tables", st.EnsureTables); err != nil {
			return nil, err
		}
	}
	var reps []HourReport
	for _, h := range cfg.Hours {
		cfg.Logger.Info("exact: recounting", "hour", schemas.HourDir(h), "rules", rs.Version())
		rep, err := runHour(ctx, cfg, st, h.UTC())
		rep.Rules = rs.Version()
		if err != nil {
			return reps, fmt.Errorf("exact: %s: %w", schemas.HourDir(h), err)
		}
		reps = append(reps, rep)
	}
	return reps, nil
}

func runHour(ctx context.Context, cfg Config, st *store.Store, hour time.Time) (HourReport, error) {
	start := time.Now()
	rep := HourReport{Hour: store.HourKey(hour), Metrics: map[string]int64{}}
	if hour != hour.Truncate(time.Hour) {
		return rep, fmt.Errorf("not a whole hour")
	}
	files, closed, err := archive.ListHourContext(ctx, cfg.Archive, hour)
	if err != nil {
		return rep, err
	}
	if cfg.RequireClosed && !closed && len(files) == 0 {
		return rep, fmt.Errorf("%w: nothing archived for this hour under %s", ErrNoArchive, schemas.ArchiveHourPath(cfg.Archive, hour))
	}
	if cfg.RequireClosed && !closed {
		return rep, fmt.Errorf("hour is not closed (no %s marker)", schemas.ArchiveClosed)
	}
	rep.Files = len(files)
	exactPath := schemas.ExactHourPath(cfg.Archive, hour)
	stagingParent := cfg.Staging
	switch {
	case stagingParent == "" && archive.IsGCS(cfg.Archive):
		stagingParent = os.TempDir()
	case stagingParent == "":
		stagingParent = filepath.Dir(exactPath)
	}
	if err := os.MkdirAll(stagingParent, 0o755); err != nil {
		return rep, err
	}
	staging, err := os.MkdirTemp(stagingParent, ".staging-")
	if err != nil {
		return rep, err
	}
	if !cfg.KeepStagingFiles {
		defer os.RemoveAll(staging)
	}
	if len(files) > 0 {
		p, s := beam.NewPipelineWithRoot()
		Build(s, HourJob{Hour: hour, Files: files, Staging: staging, Shards: cfg.Shards, Parts: cfg.Parts,
			Readers: cfg.Readers, Waves: cfg.Waves, Rules: cfg.Rules})
		if rep.Metrics, err = cfg.Runner(ctx, p); err != nil {
			return rep, fmt.Errorf("pipeline: %w", err)
		}
	}
	counts, err := readCounts(staging)
	if err != nil {
		return rep, err
	}
	sortCounts(counts)
	rep.Rows = len(counts)
	if rep.Metrics == nil {
		rep.Metrics = map[string]int64{}
	}
	checkCounted(rep.Metrics, counts)
	if err := writeParquet(ctx, exactPath, counts); err != nil {
		return rep, err
	}
	if st == nil {
		rep.Seconds = time.Since(start).Seconds()
		return rep, nil
	}
	if err := waitOut(ctx, cfg, "write hour", func(ctx context.Context) error {
		return st.WriteHour(ctx, hour, counts, cfg.K)
	}); err != nil {
		return rep, err
	}
	// The store holds one 24-hour window. A new hour moves it to end at
	// hour+1h; a rerun of an older hour recomputes the window held if the
	// hour is inside it, and leaves it alone otherwise.
	end, held := hour.Add(time.Hour), time.Time{}
	if err := waitOut(ctx, cfg, "read end of 24h", func(ctx context.Context) (err error) {
		held, err = st.End24h(ctx)
		return err
	}); err != nil {
		return rep, err
	}
	switch {
	case !held.After(end):
		err = waitOut(ctx, cfg, "recompute 24h", func(ctx context.Context) error { return st.Recompute24h(ctx, end, cfg.K) })
	case !hour.Before(held.Add(-24 * time.Hour)):
		err = waitOut(ctx, cfg, "recompute 24h", func(ctx context.Context) error { return st.Recompute24h(ctx, held, cfg.K) })
	}
	if err != nil {
		return rep, err
	}
	if err := waitOut(ctx, cfg, "mark hour done", func(ctx context.Context) error { return st.MarkHourDone(ctx, hour) }); err != nil {
		return rep, err
	}
	var eu time.Time
	if err := waitOut(ctx, cfg, "advance exact_until", func(ctx context.Context) (err error) {
		eu, err = st.AdvanceExactUntil(ctx)
		return err
	}); err != nil {
		return rep, err
	}
	rep.ExactUntil = store.HourKey(eu)
	if cfg.ListsDir != "" {
		if rep.Grades, err = gradeHour(ctx, cfg, st, hour, counts); err != nil {
			return rep, err
		}
	}
	rep.Seconds = time.Since(start).Seconds()
	return rep, nil
}

// waitOut runs one idempotent Bigtable step, retrying it with capped
// backoff while Bigtable is unavailable (see the package doc).
func waitOut(ctx context.Context, cfg Config, what string, op func(context.Context) error) error {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	_, err := retry.Policy{Max: 10 * time.Second, Log: log, What: "exact: bigtable " + what}.Do(ctx, op)
	return err
}

// checkCounted sets the report's exact_events_counted from the counts
// themselves (every event counts once in its type's global scope) and
// exact_duplicates_dropped from read - invalid - outside - dropped by the
// rules - counted. The blocklist and bot rules apply at read, to every copy
// of an event: their counters include the copies of the events they drop,
// which the dedupe then never sees. On Prism
// the dedupe stage's counters have come back short by whole shards at 20M
// events (the counts were right): the report must not depend on them.
func checkCounted(m map[string]int64, counts []schemas.ExactCount) {
	var counted int64
	for _, c := range counts {
		if c.Scope == schemas.ScopeGlobal {
			counted += c.Count
		}
	}
	if got := m["exact_events_counted"]; got != counted {
		slog.Warn("exact: the runner's counters disagree with the counts; reporting the counts", "counter_events_counted", got, "events_counted", counted)
	}
	m["exact_events_counted"] = counted
	var ruled int64
	for _, k := range []string{"exact_rules_blocked", "exact_rules_bot", "exact_rules_repeat", "exact_rules_capped"} {
		ruled += m[k]
	}
	m["exact_duplicates_dropped"] = m["exact_events_read"] - m["exact_events_invalid"] - m["exact_events_outside_hour"] - ruled - counted
}
