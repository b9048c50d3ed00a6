package publishobs

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/topk-dev/topk/internal/svctest"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/publish/liststore"
)

// Property: every publish is counted by window, its lag is arrival - as_of
// on the observer's clock, and each list's age follows the clock; a
// trending list is observed like a top list, with no read error.
func TestObserver(t *testing.T) {
	addr := os.Getenv("REDIS_ADDR")
	svctest.Report(t, "redis", addr != "", "REDIS_ADDR is not set: miniredis")
	if addr == "" {
		addr = miniredis.RunT(t).Addr()
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	prefix := fmt.Sprintf("topktest:publishobs:%d", time.Now().UnixNano())
	defer func() {
		ctx := context.Background()
		iter := c.Scan(ctx, 0, prefix+"*", 100).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	}()
	st := liststore.New(c, liststore.Options{Prefix: prefix})
	asOf := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	clock := asOf.Add(7 * time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o, err := Start(ctx, st, func() time.Time { return clock })
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(o)
	k := schemas.ListKey{Type: "video", Scope: "global", Window: schemas.Window1m}
	for v := int64(1); v <= 3; v++ {
		l := &schemas.List{Type: k.Type, Scope: k.Scope, Window: k.Window, AsOf: asOf, Version: v,
			Items: []schemas.Entry{{Rank: 1, Item: "a", Count: 1, Lower: 1}}, CertifiedK: 1}
		if _, err := st.Publish(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	// A trending list is observed like a top list (it used to be read as
	// a top list, refused and counted as a read error).
	tk := schemas.ListKey{Type: "hashtag", Scope: "IN-MH", Window: schemas.WindowTrending}
	tb, err := schemas.MarshalTrending(&schemas.Trending{Type: tk.Type, Scope: tk.Scope, Window: tk.Window,
		AsOf: asOf.Add(-3 * time.Second), Counts: schemas.CountsUsers, Version: 1,
		Items: []schemas.TrendEntry{{Rank: 1, Item: "#a", Score: 1, Count5m: 30, PeakScore: 1, PeakAt: asOf}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PublishRaw(ctx, tk, 1, tb); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for m := gather(t, reg); m["topk_publish_moves_total{window=1m}"] < 3 || m["topk_publish_moves_total{window=trending}"] < 1; m = gather(t, reg) {
		if time.Now().After(deadline) {
			t.Fatalf("moves seen: %v, want 3 of the 1m list and 1 of the trending list", gather(t, reg))
		}
		time.Sleep(10 * time.Millisecond)
	}
	clock = asOf.Add(400 * time.Second)
	got := gather(t, reg)
	for name, want := range map[string]float64{
		"topk_publish_list_age_seconds{list=video:global:1m}":        400,
		"topk_publish_lag_seconds_count{window=1m}":                  3,
		"topk_publish_lag_seconds_sum{window=1m}":                    21,
		"topk_publish_last_move_timestamp_seconds":                   float64(asOf.Add(7 * time.Second).Unix()),
		"topk_publish_read_errors_total":                             0,
		"topk_publish_list_age_seconds{list=hashtag:IN-MH:trending}": 403,
		"topk_publish_lag_seconds_sum{window=trending}":              10,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
}

// gather flattens the registry to "name{label=value}" -> value (histograms
// as _count and _sum).
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			suffix := ""
			if len(labels) > 0 {
				suffix = "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.Counter != nil:
				out[f.GetName()+suffix] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[f.GetName()+suffix] = m.Gauge.GetValue()
			case m.Histogram != nil:
				out[f.GetName()+"_count"+suffix] = float64(m.Histogram.GetSampleCount())
				out[f.GetName()+"_sum"+suffix] = m.Histogram.GetSampleSum()
			}
		}
	}
	return out
}
