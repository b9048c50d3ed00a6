package recount

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/topk-dev/topk/transforms/grade"
)

// GradeMetrics holds the last grade of every (type, scope) as Prometheus
// metrics: the exact command writes them to --metrics_file (node_exporter's
// textfile collector), the local run serves them on its one /metrics. The
// names are the ones ops/alerts.yml's TopkGradingBreach uses:
//
//	topk_grade_recall{type,scope,at="100"|"1000"}    recall of the hour-end 1h list
//	topk_grade_overcount_over_bound{type,scope}      largest over-count minus max_overcount (> 0: a breach)
//	topk_grade_under_counts{type,scope}              entries counted below their exact count (> 0: a breach)
//	topk_grade_max_displacement{type,scope}          largest |rank - exact rank| in the top 100
//	topk_grade_alert{type,scope}                     1 when the grade breached (grade.Grade.Alert)
//	topk_grade_hour_timestamp_seconds{type,scope}    start of the graded hour (Unix seconds)
//	topk_grade_lists_total{result="ok"|"alert"}      lists graded
//
// Safe for concurrent use; register it on a prometheus.Registerer.
type GradeMetrics struct {
	mu     sync.Mutex
	recall *prometheus.GaugeVec
	over   *prometheus.GaugeVec
	under  *prometheus.GaugeVec
	disp   *prometheus.GaugeVec
	alert  *prometheus.GaugeVec
	hour   *prometheus.GaugeVec
	lists  *prometheus.CounterVec
}

// NewGradeMetrics returns empty grade metrics.
func NewGradeMetrics() *GradeMetrics {
	ts := []string{"type", "scope"}
	g := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	}
	m := &GradeMetrics{
		recall: g("topk_grade_recall", "Recall of the hour-end 1h list against the exact hour, at 100 and 1,000.", "type", "scope", "at"),
		over:   g("topk_grade_overcount_over_bound", "Largest over-count minus the list's max_overcount (> 0 breaks the contract).", ts...),
		under:  g("topk_grade_under_counts", "Entries of the hour-end 1h list counted below their exact count (> 0 breaks the contract).", ts...),
		disp:   g("topk_grade_max_displacement", "Largest |published rank - exact rank| in the list's top 100.", ts...),
		alert:  g("topk_grade_alert", "1 when the last graded hour breached recall@100 >= 0.99 or a bound.", ts...),
		hour:   g("topk_grade_hour_timestamp_seconds", "Start of the last graded hour (Unix seconds).", ts...),
		lists: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "topk_grade_lists_total",
			Help: "Hour-end 1h lists graded, by result (ok, alert)."}, []string{"result"}),
	}
	m.lists.WithLabelValues("ok")
	m.lists.WithLabelValues("alert")
	return m
}

// Observe records grades; a later grade of a (type, scope) replaces its
// gauges.
func (m *GradeMetrics) Observe(gs []grade.Grade) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, g := range gs {
		m.recall.WithLabelValues(g.Type, g.Scope, "100").Set(g.Recall100)
		m.recall.WithLabelValues(g.Type, g.Scope, "1000").Set(g.Recall1000)
		m.over.WithLabelValues(g.Type, g.Scope).Set(float64(int64(g.MaxOvercount) - int64(g.Bound)))
		m.under.WithLabelValues(g.Type, g.Scope).Set(float64(g.UnderCounts))
		m.disp.WithLabelValues(g.Type, g.Scope).Set(float64(g.MaxDisplacement))
		a, result := 0.0, "ok"
		if g.Alert {
			a, result = 1, "alert"
		}
		m.alert.WithLabelValues(g.Type, g.Scope).Set(a)
		m.hour.WithLabelValues(g.Type, g.Scope).Set(float64(g.Hour.Unix()))
		m.lists.WithLabelValues(result).Inc()
	}
}

func (m *GradeMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.recall, m.over, m.under, m.disp, m.alert, m.hour, m.lists}
}

// Describe implements prometheus.Collector.
func (m *GradeMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *GradeMetrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// writeMetrics writes grades as Prometheus text to path, via a temporary
// file and a rename (the textfile collector's rule).
func writeMetrics(path string, gs []grade.Grade) error {
	m := NewGradeMetrics()
	m.Observe(gs)
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(m); err != nil {
		return err
	}
	return prometheus.WriteToTextfile(path, reg)
}
