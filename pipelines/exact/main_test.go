package main

import (
	"context"
	"errors"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"google.golang.org/api/option"

	"github.com/topk-dev/topk/internal/prismopt/prismtest"
	"github.com/topk-dev/topk/pipelines/recount"
	"github.com/topk-dev/topk/pipelines/recount/recounttest"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/exact/store"
)

func TestMain(m *testing.M) { prismtest.Main(m) }

var hour0 = recounttest.Hour0

// Property: an hour without its _CLOSED marker is refused, and --from/--to
// is half-open.
func TestFlagsAndClosed(t *testing.T) {
	f := Flags{From: "2026-11-30T22", To: "2026-12-01T01", K: 1, Shards: 1, Parts: 1, Archive: "x"}
	cfg, err := f.Config()
	must(t, err)
	if len(cfg.Hours) != 3 || !cfg.Hours[2].Equal(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("hours %v", cfg.Hours)
	}
	if _, err := (&Flags{Hour: "2026-11-30T22", From: "2026-11-30T22"}).Config(); err == nil {
		t.Error("--hour with --from accepted")
	}
	root := t.TempDir()
	must(t, os.MkdirAll(schemas.ArchiveHourPath(root, hour0), 0o755))
	_, err = recount.Run(context.Background(), recount.Config{Archive: root, Hours: []time.Time{hour0}, K: 1, Shards: 1, Parts: 1,
		RequireClosed: true, Store: recounttest.NewStore(t)})
	if err == nil {
		t.Error("an open hour was recounted")
	}
}

// Property: the errors name the cause once: a missing archive says so
// (not that the hour is open), an hour with files but no marker says it is
// not closed, and neither doubles "hour hour=".
func TestMissingArchiveMessages(t *testing.T) {
	run := func(root string) error {
		_, err := recount.Run(context.Background(), recount.Config{Archive: root, Hours: []time.Time{hour0}, K: 1, Shards: 1, Parts: 1,
			RequireClosed: true, Store: recounttest.NewStore(t)})
		return err
	}
	err := run("/nonexistent/archive")
	if !errors.Is(err, recount.ErrNoArchive) || !strings.Contains(err.Error(), "--archive=/nonexistent/archive: the archive is missing") {
		t.Fatalf("missing root: %v", err)
	}
	root := t.TempDir()
	err = run(root)
	if !errors.Is(err, recount.ErrNoArchive) || !strings.Contains(err.Error(), "nothing archived for this hour") {
		t.Fatalf("missing hour: %v", err)
	}
	recounttest.WriteArchive(t, root, hour0, recounttest.GenEvents(1, hour0, 10))
	must(t, os.Remove(schemas.ArchiveHourPath(root, hour0)+"/"+schemas.ArchiveClosed))
	err = run(root)
	if err == nil || !strings.Contains(err.Error(), "exact: hour=2026") || !strings.Contains(err.Error(), "not closed") {
		t.Fatalf("open hour: %v", err)
	}
	if strings.Contains(err.Error(), "hour hour=") {
		t.Fatalf("doubled hour: %v", err)
	}
}

// Property: --bigtable=false writes the same Parquet exact table without
// opening any store, and refuses grading (which needs the store).
func TestParquetOnly(t *testing.T) {
	root := t.TempDir()
	evs := recounttest.GenEvents(5, hour0, 2000)
	recounttest.WriteArchive(t, root, hour0, evs)
	cfg, err := (&Flags{Hour: store.HourKey(hour0), Archive: root, K: 10, Shards: 2, Parts: 2, RequireClosed: true}).Config()
	must(t, err)
	if !cfg.ParquetOnly {
		t.Fatal("Flags.Bigtable false did not select ParquetOnly")
	}
	cfg.StoreOptions = []option.ClientOption{option.WithEndpoint("127.0.0.1:1")} // would fail if used
	reps, err := recount.Run(context.Background(), cfg)
	must(t, err)
	rows, err := parquet.ReadFile[schemas.ExactCount](schemas.ExactHourPath(root, hour0))
	must(t, err)
	if g, want := recounttest.AsMap(rows), recounttest.Oracle(evs); !maps.Equal(g, want) || reps[0].ExactUntil != "" {
		t.Fatalf("Parquet-only recount: %d keys (want %d), exact_until %q", len(g), len(want), reps[0].ExactUntil)
	}
	cfg.ListsDir = t.TempDir()
	if _, err := recount.Run(context.Background(), cfg); err == nil {
		t.Error("grading without Bigtable accepted")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
