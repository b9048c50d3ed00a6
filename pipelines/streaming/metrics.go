package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/topk-dev/topk/internal/publishobs"
	"github.com/topk-dev/topk/internal/stagemetrics"
	"github.com/topk-dev/topk/transforms/publish/liststore"
)

// serveMetrics serves Prometheus metrics on addr at /metrics until the
// returned stop is called: the process's Go and process collectors, the
// publish observer (internal/publishobs: pointer moves, publish lag and
// list age as Redis readers see them; none when st is nil, --redis=none)
// and the stages' counters as the job runs (internal/stagemetrics:
// messages, events decoded and counted, late events, dead letters by
// reason, rule drops; zero when the workers are other processes, as on
// Dataflow, where the runner's Beam metrics are the source). The job's
// Beam counters are also reported in the run's summary line.
func serveMetrics(ctx context.Context, addr string, st *liststore.Store) (stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), stagemetrics.Collector())
	var obs *publishobs.Observer
	if st != nil {
		var err error
		if obs, err = publishobs.Start(ctx, st, nil); err != nil {
			cancel()
			return nil, err
		}
		reg.MustRegister(obs)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("--metrics_addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("streaming: metrics server", "err", err)
		}
	}()
	slog.Info("streaming: metrics", "addr", ln.Addr().String())
	return func() {
		srv.Close()
		cancel()
		if obs != nil {
			<-obs.Done()
		}
	}, nil
}
