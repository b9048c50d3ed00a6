package main

import (
	"context"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
	"github.com/parquet-go/parquet-go"

	"github.com/topk-dev/topk/pipelines/recount/recounttest"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/archive"
	"github.com/topk-dev/topk/transforms/exact/store"
)

func TestMain(m *testing.M) { ptest.Main(m) }

// TestLocalRun runs the all-in-one for a short while: every event the load
// published is counted by the pipeline (read from Pub/Sub, acked once), lists
// are published, the run ends cleanly on its own, and the closed archive
// hours from before the start are recounted exactly into the exact store,
// the empty hour between them too (so exact_until passes it).
func TestLocalRun(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	out, err := os.CreateTemp(t.TempDir(), "progress")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Addr: addr, Rate: 2000, Items: 100_000, Zipf: 1.1, Beacon: 100,
		Duration: 25 * time.Second, IdleStop: 3 * time.Second, Progress: 5 * time.Second,
		Project: "topk-local-test", Partitions: 4, ArchiveRoot: t.TempDir(), Recount: true, RecountEvery: time.Minute,
		// Its own instance: a Bigtable emulator at BIGTABLE_EMULATOR_HOST
		// keeps the tables of earlier runs.
		BigtableInstance: "local-test-" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	// Two closed hours from before the start (with duplicates and late
	// files), and an hour without any file between them.
	first := time.Now().UTC().Truncate(time.Hour).Add(-4 * time.Hour)
	seeded := []time.Time{first, first.Add(2 * time.Hour)}
	events := make([][]schemas.Event, len(seeded))
	for i, h := range seeded {
		events[i] = recounttest.GenEvents(uint64(i+1), h, 5000)
		recounttest.WriteArchive(t, cfg.ArchiveRoot, h, events[i])
	}
	st, err := Run(context.Background(), cfg, out)
	progress, _ := os.ReadFile(out.Name())
	t.Logf("progress:\n%s", progress)
	if err != nil {
		t.Fatal(err)
	}
	if st.Published == 0 || st.Report.Events != st.Published {
		t.Fatalf("published %d events, pipeline counted %d", st.Published, st.Report.Events)
	}
	if st.Report.Lists == 0 {
		t.Fatal("no lists published")
	}
	// The archiver kept every published event (at least once: duplicates
	// only after a failed ack, which this run does not have).
	var archived int64
	hours, _ := filepath.Glob(filepath.Join(cfg.ArchiveRoot, "events", "hour=*"))
	for _, h := range hours {
		hour, err := schemas.ParseHourDir(filepath.Base(h))
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(seeded, hour.Equal) {
			continue
		}
		rows, err := archive.ReadHour(cfg.ArchiveRoot, hour)
		if err != nil {
			t.Fatal(err)
		}
		archived += int64(len(rows))
	}
	if archived != st.Published {
		t.Fatalf("archived %d events, published %d", archived, st.Published)
	}
	// The recount loop's first pass recounted the seeded hours and the
	// empty one between them (and nothing else is closed): done in the
	// store, exact_until past them, and each exact table holds its seeded
	// events' exact counts.
	want := []time.Time{first, first.Add(time.Hour), first.Add(2 * time.Hour)}
	var got []string
	for _, r := range st.Recounted {
		got = append(got, r.Hour)
	}
	if len(got) != 3 || got[0] != store.HourKey(want[0]) || got[1] != store.HourKey(want[1]) || got[2] != store.HourKey(want[2]) || st.RecountFailures != 0 {
		t.Fatalf("recounted %v, %d failed passes; want %v", got, st.RecountFailures, want)
	}
	if !slices.EqualFunc(st.DoneHours, want, time.Time.Equal) || !st.ExactUntil.Equal(first.Add(3*time.Hour)) {
		t.Fatalf("store: done hours %v, exact_until %v; want %v, %v", st.DoneHours, st.ExactUntil, want, first.Add(3*time.Hour))
	}
	if n := st.Recounted[1].Metrics["exact_events_counted"]; n != 0 || st.Recounted[1].Rows != 0 {
		t.Fatalf("the empty hour counted %d events in %d rows", n, st.Recounted[1].Rows)
	}
	for i, h := range seeded {
		rep := st.Recounted[2*i]
		if n := rep.Metrics["exact_events_counted"]; n != int64(len(events[i])) {
			t.Fatalf("hour %s: recount counted %d events, seeded %d distinct", rep.Hour, n, len(events[i]))
		}
		rows, err := parquet.ReadFile[schemas.ExactCount](schemas.ExactHourPath(cfg.ArchiveRoot, h))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := recounttest.AsMap(rows), recounttest.Oracle(events[i]); !maps.Equal(got, want) {
			t.Fatalf("hour %s: exact table has %d keys, want %d (the seeded events' exact counts)", rep.Hour, len(got), len(want))
		}
	}
}
