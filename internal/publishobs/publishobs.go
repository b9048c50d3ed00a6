// Package publishobs measures the fast path's publishing from outside the
// job, as a reader of Redis sees it: every pointer move announced by
// liststore, the wall time it arrived minus the list's as_of (the publish
// lag), and how long ago each list last moved. It is a
// prometheus.Collector, so the streaming command serves it on
// --metrics_addr and the local run can register it on the serving binary's
// registry (one /metrics). Lag only means something when event time is wall
// time (Pub/Sub and synthetic sources); a file replay shows its age.
//
// Metrics (names as ops/alerts.yml uses them):
//
//	topk_publish_moves_total{window}              pointer moves seen
//	topk_publish_lag_seconds{window}              histogram: arrival - as_of
//	topk_publish_list_age_seconds{list}           now - as_of of the last version seen
//	topk_publish_last_move_timestamp_seconds      when any list last moved (Unix s)
//	topk_publish_read_errors_total                moves whose list header could not be read
//
// Top lists and trending lists alike ({window} "trending"): each move costs
// one read of the list's header (liststore.CurrentHeader, the first KB of
// the blob), not the whole list.
package publishobs

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/publish/liststore"
)

// Observer follows pointer moves until its context ends. Safe for concurrent
// use; register it on a prometheus.Registerer.
type Observer struct {
	now func() time.Time

	moves   *prometheus.CounterVec
	lag     *prometheus.HistogramVec
	errs    prometheus.Counter
	mu      sync.Mutex
	asOf    map[string]time.Time
	lastAt  time.Time
	done    chan struct{}
	descAge *prometheus.Desc
	descAt  *prometheus.Desc
}

// Start subscribes to st's pointer moves and observes them until ctx is
// done. now is the clock (nil: time.Now).
func Start(ctx context.Context, st *liststore.Store, now func() time.Time) (*Observer, error) {
	if now == nil {
		now = time.Now
	}
	ch, err := st.Subscribe(ctx)
	if err != nil {
		return nil, fmt.Errorf("publish observer: %w", err)
	}
	o := &Observer{
		now: now,
		moves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "topk_publish_moves_total", Help: "List pointer moves seen in Redis, by window.",
		}, []string{"window"}),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "topk_publish_lag_seconds", Help: "Wall time a pointer move was seen minus the list's as_of, by window.",
			Buckets: []float64{1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 300, 600},
		}, []string{"window"}),
		errs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "topk_publish_read_errors_total", Help: "Pointer moves whose list could not be read back.",
		}),
		asOf:    map[string]time.Time{},
		done:    make(chan struct{}),
		descAge: prometheus.NewDesc("topk_publish_list_age_seconds", "Now minus the as_of of the list's last version seen.", []string{"list"}, nil),
		descAt:  prometheus.NewDesc("topk_publish_last_move_timestamp_seconds", "When any list pointer last moved (Unix seconds; 0: never).", nil, nil),
	}
	go func() {
		defer close(o.done)
		for k := range ch {
			// The header only: a top list's entries are not needed, and
			// a trending list is not a top list (CurrentList refused
			// every one, counted as a read error).
			_, asOf, err := st.CurrentHeader(ctx, k)
			if err != nil {
				o.errs.Inc()
				continue
			}
			o.observe(k, asOf)
		}
	}()
	return o, nil
}

func (o *Observer) observe(k schemas.ListKey, asOf time.Time) {
	at := o.now()
	w := string(k.Window)
	o.moves.WithLabelValues(w).Inc()
	o.lag.WithLabelValues(w).Observe(at.Sub(asOf).Seconds())
	o.mu.Lock()
	o.asOf[k.String()] = asOf
	o.lastAt = at
	o.mu.Unlock()
}

// Done is closed once the subscription has ended.
func (o *Observer) Done() <-chan struct{} { return o.done }

// Describe implements prometheus.Collector.
func (o *Observer) Describe(ch chan<- *prometheus.Desc) {
	o.moves.Describe(ch)
	o.lag.Describe(ch)
	o.errs.Describe(ch)
	ch <- o.descAge
	ch <- o.descAt
}

// Collect implements prometheus.Collector.
func (o *Observer) Collect(ch chan<- prometheus.Metric) {
	o.moves.Collect(ch)
	o.lag.Collect(ch)
	o.errs.Collect(ch)
	now := o.now()
	o.mu.Lock()
	defer o.mu.Unlock()
	for name, asOf := range o.asOf {
		ch <- prometheus.MustNewConstMetric(o.descAge, prometheus.GaugeValue, now.Sub(asOf).Seconds(), name)
	}
	at := 0.0
	if !o.lastAt.IsZero() {
		at = float64(o.lastAt.Unix())
	}
	ch <- prometheus.MustNewConstMetric(o.descAt, prometheus.GaugeValue, at)
}
