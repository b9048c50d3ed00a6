package main

import (
	"context"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/topk-dev/topk/internal/gcstest"
	"github.com/topk-dev/topk/internal/pubsubx"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/archive"
)

// TestFlagsDefaults checks the documented defaults and that the flags reach
// the archiver's configuration.
func TestFlagsDefaults(t *testing.T) {
	t.Setenv(pubsubx.EnvEmulator, "127.0.0.1:1")
	f, err := ParseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if f.Root != "./archive" || f.Subscription != "projects/topk-local/subscriptions/archive" ||
		f.Grace != 10*time.Minute || f.Endpoint != "127.0.0.1:1" || f.Topic != "views" {
		t.Fatalf("defaults %+v", f)
	}
	c := f.Config()
	if !c.ReturnImmediately || c.Root != f.Root || c.Grace != f.Grace {
		t.Fatalf("config %+v from %+v", c, f)
	}
	if _, err := ParseFlags([]string{"--grace=3m", "extra"}, io.Discard); err == nil {
		t.Fatal("a stray argument was accepted")
	}
	f, _ = ParseFlags([]string{"--root=s3://b/a"}, io.Discard)
	if err := Run(context.Background(), f); err == nil || !strings.Contains(err.Error(), "gs://") {
		t.Fatalf("Run with an s3:// root = %v, want a clear error", err)
	}
	if f, _ = ParseFlags([]string{"--root=gs://b/a"}, io.Discard); f.Config().Validate() != nil {
		t.Fatalf("a gs:// root is refused: %v", f.Config().Validate())
	}
}

// TestRunArchivesToRoot checks the command end to end on pstest, with a
// local and a gs:// root (the in-process fake Cloud Storage): it creates
// its subscription on the fake, archives a published beacon under --root in
// its event hour, and exits on --idle_stop.
func TestRunArchivesToRoot(t *testing.T) {
	t.Run("local", func(t *testing.T) { testRunArchivesToRoot(t, t.TempDir()) })
	t.Run("gcs", func(t *testing.T) { testRunArchivesToRoot(t, gcstest.Root(t)) })
}

func testRunArchivesToRoot(t *testing.T, root string) {
	emb := pubsubx.StartEmbedded()
	defer emb.Close()
	f, err := ParseFlags([]string{"--root=" + root, "--pubsub_endpoint=" + emb.Addr,
		"--subscription=projects/p/subscriptions/archive", "--idle_stop=1s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := pubsubx.NewClient(ctx, "p", emb.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := pubsubx.EnsureTopic(ctx, c, "views"); err != nil {
		t.Fatal(err)
	}
	if err := pubsubx.EnsureSubscription(ctx, c, "archive", "views", 60); err != nil {
		t.Fatal(err)
	}
	ts := time.Now().UTC().Truncate(time.Millisecond)
	data, err := schemas.MarshalBeacon(&schemas.Beacon{BeaconID: "b", Events: []schemas.Event{
		{EventID: "e1", Type: "video", Item: "v_1", TS: ts}}})
	if err != nil {
		t.Fatal(err)
	}
	pub := c.Publisher("views")
	if _, err := pub.Publish(ctx, &pubsub.Message{Data: data,
		Attributes: map[string]string{"ts": strconv.FormatInt(ts.UnixMilli(), 10)}}).Get(ctx); err != nil {
		t.Fatal(err)
	}
	pub.Stop()
	// An hour past the 30-day retention: the command's retention deletes it.
	old := ts.Truncate(time.Hour).Add(-31 * 24 * time.Hour)
	if err := archive.WriteFile(ctx, schemas.ArchiveHourPath(root, old)+"/part-x-1.parquet", func(w io.Writer) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := Run(ctx, f); err != nil {
		t.Fatal(err)
	}
	if files, _, err := archive.ListHour(root, old); err != nil || len(files) != 0 {
		t.Fatalf("hour past retention: files %v, %v; want deleted", files, err)
	}
	rows, err := archive.ReadHour(root, ts.Truncate(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].EventID != "e1" || !rows[0].TS.Equal(ts) {
		t.Fatalf("archived rows %+v, want e1 at %v", rows, ts)
	}
}

// TestOpsMetrics checks that the archiver's progress and retention reach
// the metric names ops/alerts.yml uses.
func TestOpsMetrics(t *testing.T) {
	m := archive.NewMetrics()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	m.Progress(archive.Stats{Messages: 5, Events: 40, DeadLetters: 2, Files: 3})
	m.Pruned(archive.PruneReport{Deleted: []time.Time{time.Unix(0, 0)}, Kept: 3, Oldest: time.Unix(7200, 0)}, nil)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, mt := range f.GetMetric() {
			switch {
			case mt.Counter != nil:
				got[f.GetName()] = mt.Counter.GetValue()
			case mt.Gauge != nil:
				got[f.GetName()] = mt.Gauge.GetValue()
			}
		}
	}
	for name, want := range map[string]float64{
		"topk_archive_messages_total": 5, "topk_archive_events_total": 40, "topk_archive_dead_letters_total": 2,
		"topk_archive_files_total": 3, "topk_archive_retention_deleted_hours_total": 1,
		"topk_archive_oldest_hour_timestamp_seconds": 7200,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
	if got["topk_archive_last_flush_timestamp_seconds"] <= 0 {
		t.Errorf("last flush timestamp not set")
	}
}
