package archive

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are an archiver's Prometheus metrics (names as in
// ops/alerts.yml): its running totals (Stats, fed by Config.Progress) and
// its retention (fed by RetentionConfig.Report). Register them on a
// registry; the archive command serves them on --metrics_addr, and an
// embedding program (the local run) can add them to its own /metrics.
type Metrics struct {
	collectors []prometheus.Collector

	mu        sync.Mutex
	stats     Stats
	lastFlush time.Time
	prune     PruneReport
	pruneAt   time.Time
	pruneErrs int64
	deleted   int64
}

// NewMetrics returns the metrics, all zero.
func NewMetrics() *Metrics {
	m := &Metrics{}
	counter := func(name, help string, v func(*Metrics) float64) {
		m.collectors = append(m.collectors, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 {
			m.mu.Lock()
			defer m.mu.Unlock()
			return v(m)
		}))
	}
	gauge := func(name, help string, v func(*Metrics) float64) {
		m.collectors = append(m.collectors, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			m.mu.Lock()
			defer m.mu.Unlock()
			return v(m)
		}))
	}
	counter("topk_archive_messages_total", "Pub/Sub messages pulled.", func(m *Metrics) float64 { return float64(m.stats.Messages) })
	counter("topk_archive_events_total", "Events archived (rows written).", func(m *Metrics) float64 { return float64(m.stats.Events) })
	counter("topk_archive_late_events_total", "Events archived into a closed hour's late/ folder.", func(m *Metrics) float64 { return float64(m.stats.LateEvents) })
	counter("topk_archive_dead_letters_total", "Dead letters written (beacons and events that failed to decode or validate).", func(m *Metrics) float64 { return float64(m.stats.DeadLetters) })
	counter("topk_archive_files_total", "Parquet files written.", func(m *Metrics) float64 { return float64(m.stats.Files) })
	counter("topk_archive_ack_errors_total", "Messages whose ack failed (they will be redelivered).", func(m *Metrics) float64 { return float64(m.stats.AckErrors) })
	counter("topk_archive_hours_closed_total", "Event hours this process closed.", func(m *Metrics) float64 { return float64(m.stats.Closed) })
	gauge("topk_archive_last_flush_timestamp_seconds", "When the archiver last flushed (Unix seconds; 0 before the first flush).", func(m *Metrics) float64 { return unix(m.lastFlush) })
	counter("topk_archive_retention_deleted_hours_total", "Event hours deleted by retention.", func(m *Metrics) float64 { return float64(m.deleted) })
	counter("topk_archive_retention_errors_total", "Retention prunes that failed.", func(m *Metrics) float64 { return float64(m.pruneErrs) })
	gauge("topk_archive_retention_last_run_timestamp_seconds", "When retention last pruned (Unix seconds).", func(m *Metrics) float64 { return unix(m.pruneAt) })
	gauge("topk_archive_oldest_hour_timestamp_seconds", "Start of the oldest event hour kept (Unix seconds; 0: none).", func(m *Metrics) float64 { return unix(m.prune.Oldest) })
	return m
}

func unix(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.Unix())
}

// Progress records the archiver's totals: use it as Config.Progress.
func (m *Metrics) Progress(s Stats) {
	m.mu.Lock()
	m.stats, m.lastFlush = s, time.Now()
	m.mu.Unlock()
}

// Pruned records a prune: use it as RetentionConfig.Report.
func (m *Metrics) Pruned(r PruneReport, err error) {
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

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors {
		c.Collect(ch)
	}
}
