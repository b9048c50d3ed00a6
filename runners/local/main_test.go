package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/archive"
)

func TestMain(m *testing.M) { ptest.Main(m) }

// TestLocalRun runs the all-in-one for a short while: every event the load
// published is counted by the pipeline (read from Pub/Sub, acked once), lists
// are published, and the run ends cleanly on its own.
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
		Project: "topk-local-test", Partitions: 4, ArchiveRoot: t.TempDir()}
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
		rows, err := archive.ReadHour(cfg.ArchiveRoot, hour)
		if err != nil {
			t.Fatal(err)
		}
		archived += int64(len(rows))
	}
	if archived != st.Published {
		t.Fatalf("archived %d events, published %d", archived, st.Published)
	}
}
