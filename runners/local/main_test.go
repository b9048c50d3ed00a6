package main

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/parquet-go/parquet-go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/topk-dev/topk/internal/prismopt/prismtest"
	"github.com/topk-dev/topk/internal/redisx"
	"github.com/topk-dev/topk/internal/stagemetrics"
	"github.com/topk-dev/topk/pipelines/recount/recounttest"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/serving/api"
	"github.com/topk-dev/topk/transforms/archive"
	"github.com/topk-dev/topk/transforms/exact/store"
)

func TestMain(m *testing.M) { prismtest.Main(m) }

// TestLocalRun runs the all-in-one for a short while: every event the load
// published is counted by the pipeline (read from Pub/Sub, acked once), lists
// are published, the run ends cleanly on its own, and the closed archive
// hours from before the start are recounted exactly into the exact store,
// the empty hour between them too (so exact_until passes it). The load has
// three types and countries: lists of every type, and of global, country
// and region scopes, are in Redis at the end; the catalogue names the
// load's items (a list read through the API has titles); and the one
// /metrics serves the serving, archiver, process and publish metrics.
func TestLocalRun(t *testing.T) {
	// A Redis that outlives Run (REDIS_ADDR, or a miniredis named by it),
	// so that what was published can be read after the run.
	if os.Getenv(redisx.EnvAddr) == "" {
		t.Setenv(redisx.EnvAddr, miniredis.RunT(t).Addr())
	}
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
		BigtableInstance: "local-test-" + strconv.FormatInt(time.Now().UnixNano(), 36),
		Types:            []string{"video", "hashtag", "search"}, Countries: 1, CatalogueItems: 2000,
		// The end of the run fires the long windows' minute timers up to
		// LongIdle past the current hour: a minute keeps the drain short.
		LongIdle: time.Minute,
		Registry: prometheus.NewRegistry()}
	// Two closed hours from before the start (with duplicates and late
	// files), and an hour without any file between them.
	first := time.Now().UTC().Truncate(time.Hour).Add(-4 * time.Hour)
	seeded := []time.Time{first, first.Add(2 * time.Hour)}
	events := make([][]schemas.Event, len(seeded))
	for i, h := range seeded {
		events[i] = recounttest.GenEvents(uint64(i+1), h, 5000)
		recounttest.WriteArchive(t, cfg.ArchiveRoot, h, events[i])
	}
	// /metrics while the run serves it: one registry for every component.
	metrics := make(chan string, 1)
	go func() {
		defer close(metrics)
		for end := time.Now().Add(cfg.Duration); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
			resp, err := http.Get("http://" + addr + "/metrics")
			if err != nil {
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				metrics <- string(b)
				return
			}
		}
	}()
	stageReg := prometheus.NewRegistry()
	stageReg.MustRegister(stagemetrics.Collector())
	fams, err := stageReg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	stageBefore := stagemetrics.Values(fams)
	st, err := Run(context.Background(), cfg, out)
	progress, _ := os.ReadFile(out.Name())
	t.Logf("progress:\n%s", progress)
	if err != nil {
		t.Fatal(err)
	}
	// A line per component as it came up, and one saying what was drained.
	for _, w := range []string{"Pub/Sub:", "Redis:", "exact store:", "archiver:", "API and trending page:", "fast path:", "recount:", "load:", "stopping:", "stopped "} {
		if !strings.Contains(string(progress), w) {
			t.Errorf("progress has no %q line", w)
		}
	}
	page := <-metrics
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total", "topk_serving_removals", "topk_archive_events_total", "topk_archive_retention_last_run_timestamp_seconds",
		"topk_stream_events_total", "topk_stream_dead_letters_total", "topk_grade_lists_total"} {
		if !strings.Contains(page, "\n"+name) {
			t.Errorf("/metrics during the run has no %s", name)
		}
	}
	// The publish observer saw the pipeline's pointer moves (the registry
	// /metrics serves; read after the run, when every list has moved).
	fams, err = cfg.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	moves := map[string]float64{}
	for _, f := range fams {
		if f.GetName() == "topk_publish_moves_total" {
			for _, m := range f.GetMetric() {
				moves[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	if moves["1m"] == 0 || moves["5m"] == 0 {
		t.Errorf("topk_publish_moves_total by window = %v, want 1m and 5m moves", moves)
	}
	// The stages' counters (the fast path runs in this process, on Prism):
	// every event published was counted, from the Pub/Sub messages pulled.
	// They are process-global: other tests' runs are in them too.
	stage := stagemetrics.Values(fams)
	msgs := stage["topk_stream_source_messages_total/pubsub"] - stageBefore["topk_stream_source_messages_total/pubsub"]
	counted := stage["topk_stream_events_total/counted"] - stageBefore["topk_stream_events_total/counted"]
	if msgs == 0 || counted != float64(st.Published) {
		t.Errorf("stage counters rose by %v messages and %v events counted; want messages pulled and %d events counted", msgs, counted, st.Published)
	}
	// Lists of every type and of every kind of scope.
	types, scopes := map[string]bool{}, map[string]bool{}
	for _, k := range st.Lists {
		types[k.Type] = true
		switch {
		case k.Scope == "global":
			scopes["global"] = true
		case strings.Contains(k.Scope, "-"):
			scopes["region"] = true
		default:
			scopes["country"] = true
		}
	}
	if len(types) != 3 || len(scopes) != 3 {
		t.Fatalf("lists of types %v and scopes %v; want video, hashtag, search and global, country, region", types, scopes)
	}
	// Titles: a server on the same Redis hydrates every type's global list.
	rc := redis.NewClient(&redis.Options{Addr: os.Getenv(redisx.EnvAddr)})
	defer rc.Close()
	srv, err := api.New(api.Config{Redis: rc, Local: true, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	for _, typ := range cfg.Types {
		resp, err := http.Get(hs.URL + "/v1/top?type=" + typ + "&scope=global&window=1m&k=3")
		if err != nil {
			t.Fatal(err)
		}
		var top struct {
			Items []struct{ Item, Title string }
		}
		err = json.NewDecoder(resp.Body).Decode(&top)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || len(top.Items) == 0 || top.Items[0].Title == "" {
			t.Fatalf("GET /v1/top %s: status %d, %+v, %v; want items with titles", typ, resp.StatusCode, top, err)
		}
		t.Logf("%s: %q is %q", typ, top.Items[0].Item, top.Items[0].Title)
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
