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

// startOps serves /metrics on f.MetricsAddr (when set), starts retention on
// f.Root (unless f.Retention < 0) and hooks the archiver's progress into the
// metrics. The returned function stops both and waits for them.
func startOps(ctx context.Context, f Flags, cfg *archive.Config) (stop func(), err error) {
	m := archive.NewMetrics()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), m)
	prev := cfg.Progress
	cfg.Progress = func(s archive.Stats) {
		m.Progress(s)
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
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
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
	rc := archive.RetentionConfig{Root: f.Root, Keep: f.Retention, Report: m.Pruned}
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
