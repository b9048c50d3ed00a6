package main

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/topk-dev/topk/pipelines/recount"
	"github.com/topk-dev/topk/transforms/exact/store"
)

// writeRunMetrics writes what one run of the command did as Prometheus text
// at path (for node_exporter's textfile collector; written to a temporary
// file and renamed), with names that ops/alerts.yml uses:
//
//	topk_recount_run_timestamp_seconds     when the run ended
//	topk_recount_run_success               1 when every hour asked for was recounted
//	topk_recount_hours{result}             hours recounted ("done") and failed ("failed")
//	topk_recount_duration_seconds          seconds spent on the run's hours
//	topk_recount_last_hour_timestamp_seconds  start of the last hour recounted
//	topk_recount_exact_until_timestamp_seconds  exact_until after the run
//
// Hours behind is time() - topk_recount_exact_until_timestamp_seconds.
func writeRunMetrics(path string, asked int, reps []recount.HourReport, runErr error, now time.Time) error {
	reg := prometheus.NewRegistry()
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
		reg.MustRegister(g)
		return g
	}
	gauge("topk_recount_run_timestamp_seconds", "When the last recount run ended (Unix seconds).").Set(float64(now.Unix()))
	ok := 0.0
	if runErr == nil && len(reps) == asked {
		ok = 1
	}
	gauge("topk_recount_run_success", "1 when the last run recounted every hour it was asked to.").Set(ok)
	hours := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "topk_recount_hours", Help: "Hours the last run recounted (done) and failed to (failed)."}, []string{"result"})
	reg.MustRegister(hours)
	hours.WithLabelValues("done").Set(float64(len(reps)))
	hours.WithLabelValues("failed").Set(float64(asked - len(reps)))
	secs := 0.0
	for _, r := range reps {
		secs += r.Seconds
	}
	gauge("topk_recount_duration_seconds", "Seconds the last run spent recounting its hours.").Set(secs)
	if len(reps) > 0 {
		last := reps[len(reps)-1]
		if h, err := time.Parse(store.HourFormat, last.Hour); err == nil {
			gauge("topk_recount_last_hour_timestamp_seconds", "Start of the last hour recounted (Unix seconds).").Set(float64(h.Unix()))
		}
		if eu, err := time.Parse(store.HourFormat, last.ExactUntil); err == nil {
			gauge("topk_recount_exact_until_timestamp_seconds", "exact_until after the last run: counts are exact before it (Unix seconds).").Set(float64(eu.Unix()))
		}
	}
	if err := prometheus.WriteToTextfile(path, reg); err != nil {
		return fmt.Errorf("--run_metrics_file: %w", err)
	}
	return nil
}
