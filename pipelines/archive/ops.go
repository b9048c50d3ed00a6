package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/topk-dev/topk/transforms/archive"
)

// opsMetrics are the archiver's Prometheus metrics (names as in
// ops/alerts.yml): its running totals (archive.Stats) and its retention.
type opsMetrics struct {
	reg *prometheus.Registry

	mu        sync.Mutex
	stats     archive.Stats
	lastFlush time.Time
	prune     archive.PruneReport
	pruneAt   time.Time
	pruneErrs int64
	deleted   int64
}

func newOpsMetrics() *opsMetrics {
	m := &opsMetrics{reg: prometheus.NewRegistry()}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	counter := func(name, help string, v func(*opsMetrics) float64) {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 {
			m.mu.Lock()
			defer m.mu.Unlock()
			return v(m)
		}))
	}
	gauge := func(name, help string, v func(*opsMetrics) float64) {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			m.mu.Lock()
			defer m.mu.Unlock()
			return v(m)
		}))
	}
	counter("topk_archive_messages_total", "Pub/Sub messages pulled.", func(m *opsMetrics) float64 { return float64(m.stats.Messages) })
	counter("topk_archive_events_total", "Events archived (rows written).", func(m *opsMetrics) float64 { return float64(m.stats.Events) })
	counter("topk_archive_late_events_total", "Events archived into a closed hour's late/ folder.", func(m *opsMetrics) float64 { return float64(m.stats.LateEvents) })
	counter("topk_archive_dead_letters_total", "Dead letters written (beacons and events that failed to decode or validate).", func(m *opsMetrics) float64 { return float64(m.stats.DeadLetters) })
	counter("topk_archive_files_total", "Parquet files written.", func(m *opsMetrics) float64 { return float64(m.stats.Files) })
	counter("topk_archive_ack_errors_total", "Messages whose ack failed (they will be redelivered).", func(m *opsMetrics) float64 { return float64(m.stats.AckErrors) })
	counter("topk_archive_hours_closed_total", "Event hours this process closed.", func(m *opsMetrics) float64 { return float64(m.stats.Closed) })
	gauge("topk_archive_last_flush_timestamp_seconds", "When the archiver last flushed (Unix seconds; 0 before the first flush).", func(m *opsMetrics) float64 { return unix(m.lastFlush) })
	counter("topk_archive_retention_deleted_hours_total", "Event hours deleted by retention.", func(m *opsMetrics) float64 { return float64(m.deleted) })
	counter("topk_archive_retention_errors_total", "Retention prunes that failed.", func(m *opsMetrics) float64 { return float64(m.pruneErrs) })
	gauge("topk_archive_retention_last_run_timestamp_seconds", "When retention last pruned (Unix seconds).", func(m *opsMetrics) float64 { return unix(m.pruneAt) })
	gauge("topk_archive_oldest_hour_timestamp_seconds", "Start of the oldest event hour kept (Unix seconds; 0: none).", func(m *opsMetrics) float64 { return unix(m.prune.Oldest) })
	return m
}

func unix(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.Unix())
}

func (m *opsMetrics) progress(s archive.Stats) {
	m.mu.Lock()
	m.stats, m.lastFlush = s, time.Now()
	m.mu.Unlock()
}

func (m *opsMetrics) pruned(r archive.PruneReport, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pruneAt = time.Now()
	if err != nil {
		m.pruneErrs++
		return
	}
	m.prune = r
	m.deleted += int64(len(r.Deleted))
}

// startOps serves /metrics on f.MetricsAddr (when set), starts retention on
// f.Root (unless f.Retention < 0) and hooks the archiver's progress into the
// metrics. The returned function stops both and waits for them.
func startOps(ctx context.Context, f Flags, cfg *archive.Config) (stop func(), err error) {
	m := newOpsMetrics()
	prev := cfg.Progress
	cfg.Progress = func(s archive.Stats) {
		m.progress(s)
		if prev != nil {
			prev(s)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var srv *http.Server
	if f.MetricsAddr != "" {
		ln, err := net.Listen("tcp", f.MetricsAddr)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("--metrics_addr: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
		srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				slog.Error("archive: metrics server", "err", err)
			}
		}()
		slog.Info("archive: metrics", "addr", ln.Addr().String())
	}
	rc := archive.RetentionConfig{Root: f.Root, Keep: f.Retention, Report: m.pruned}
	if err := rc.Validate(); err != nil {
		cancel()
		if srv != nil {
			srv.Close()
		}
		return nil, fmt.Errorf("--retention: %w", err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		archive.RunRetention(ctx, rc)
	}()
	return func() {
		cancel()
		if srv != nil {
			srv.Close()
		}
		wg.Wait()
	}, nil
}
