package main

import (
	"context"
	"flag"
	"maps"
	"net"
	"net/http"
	"slices"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"

	"github.com/topk-dev/topk/internal/prismopt/prismtest"
	"github.com/topk-dev/topk/internal/stagemetrics"
	"github.com/topk-dev/topk/pipelines/fastpath"
	"github.com/topk-dev/topk/transforms/publish/liststore"
)

func TestMain(m *testing.M) { prismtest.Main(m) }

// TestStageMetrics: a streaming run of a small synthetic source in this
// process (Prism), then a scrape of --metrics_addr's /metrics: the stage
// counters moved by exactly the events the source produced (all decoded,
// all counted, none late or dead-lettered), and the dead-letter series are
// there at zero.
func TestStageMetrics(t *testing.T) {
	const events = 12_000
	mr := miniredis.RunT(t)
	var f Flags
	fs := flag.NewFlagSet("streaming", flag.ContinueOnError)
	f.Register(fs)
	if err := fs.Parse([]string{"--source=synthetic:rate=0,events=12000,items=5000,beacon=100,seed=7",
		"--rules=none", "--windows=1m", "--scopes=false", "--partitions=2", "--shards=1"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := f.Config(mr.Addr())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	rc := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rc.Close()
	stop, err := serveMetrics(context.Background(), addr, liststore.New(rc, liststore.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	// The counters are process-global: measure the run's increase.
	before := scrape(t, addr)
	rep, err := fastpath.Run(context.Background(), cfg, fastpath.BeamRunner, nil)
	if err != nil {
		t.Fatal(err)
	}
	after := scrape(t, addr)
	d := func(series string) float64 { return after[series] - before[series] }
	t.Logf("report %+v", rep)
	if rep.Events != events {
		t.Fatalf("the job counted %d events (Beam counter), the source produced %d", rep.Events, events)
	}
	for series, want := range map[string]float64{
		"topk_stream_events_total/decoded":          events,
		"topk_stream_events_total/counted":          events,
		"topk_stream_late_events_total":             0,
		"topk_stream_dead_letters_total/bad_beacon": 0,
		"topk_stream_dead_letters_total/bad_event":  0,
	} {
		if _, ok := after[series]; !ok {
			t.Errorf("/metrics has no %s", series)
		}
		if got := d(series); got != want {
			t.Errorf("%s rose by %v, want %v", series, got, want)
		}
	}
	// At least one bundle; each of the 2 partitions' window state first
	// used in this process (a new job's keys) is a miss.
	for series, least := range map[string]float64{
		"topk_stream_preagg_bundles_total":             1,
		"topk_stream_state_cache_misses_total/windows": 2,
	} {
		if got := d(series); got < least {
			t.Errorf("%s rose by %v, want at least %v", series, got, least)
		}
	}
}

// scrape reads /metrics into stagemetrics.Values' form.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return stagemetrics.Values(slices.Collect(maps.Values(fams)))
}
