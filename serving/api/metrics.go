package api

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the server's Prometheus metrics, on its own registry (so that
// several servers can live in one process, as in tests).
type metrics struct {
	reg          *prometheus.Registry
	requests     *prometheus.CounterVec
	latency      *prometheus.HistogramVec
	redisErrors  *prometheus.CounterVec
	renders      *prometheus.CounterVec
	badBlobs     prometheus.Counter
	removals     prometheus.Gauge
	refills      *prometheus.CounterVec
	ingestEvents *prometheus.CounterVec
	beacons      *prometheus.CounterVec
	publishTime  prometheus.Histogram
	geo          *geoMetrics
	rollbacks    prometheus.Counter
	purges       *prometheus.CounterVec
}

func newMetrics(reg *prometheus.Registry, s *Server) *metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	m := &metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "topk_serving_requests_total", Help: "HTTP requests by route and status code.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "topk_serving_request_duration_seconds", Help: "Time to answer an HTTP request, by route.",
			Buckets: []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5},
		}, []string{"route"}),
		redisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "topk_serving_redis_errors_total", Help: "Failed Redis operations, by operation.",
		}, []string{"op"}),
		renders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "topk_serving_renders_total", Help: "Responses rendered (once per list version, k, removals and staleness), by whether the render cache kept them.",
		}, []string{"cache"}),
		badBlobs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "topk_serving_bad_list_blobs_total", Help: "List blobs read from Redis that failed to decode or check (the last good version is kept).",
		}),
		removals: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "topk_serving_removals", Help: "Items in the deny set.",
		}),
		refills: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "topk_serving_removals_refills_total", Help: "Refills of Redis' deny set from the durable one (at start, and when Redis came back without it), by result.",
		}, []string{"result"}),
		ingestEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "topk_serving_ingest_events_total", Help: "Events received by POST /v1/events, by result (accepted, rejected, bot).",
		}, []string{"result"}),
		beacons: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "topk_serving_ingest_beacons_total", Help: "Beacons received, by result (published, duplicate, in_flight, invalid, failed, bot, abandoned: the client went away before the beacon was claimed, nothing published).",
		}, []string{"result"}),
		publishTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "topk_serving_pubsub_publish_seconds", Help: "Time from publish to Pub/Sub's acknowledgement.",
			Buckets: prometheus.ExponentialBuckets(0.5e-3, 2, 14),
		}),
	}
	m.geo = newGeoMetrics(reg)
	m.rollbacks = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "topk_serving_rollbacks_total", Help: "Lists rolled back to an earlier version through /v1/admin/rollback.",
	})
	m.purges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "topk_serving_cdn_purges_total", Help: "CDN purge requests, by reason (takedown, rollback) and result (ok, failed).",
	}, []string{"why", "result"})
	reg.MustRegister(m.rollbacks, m.purges)
	reg.MustRegister(m.requests, m.latency, m.redisErrors, m.renders, m.badBlobs, m.removals, m.refills, m.ingestEvents, m.beacons, m.publishTime, listCollector{s})
	return m
}

// routeMetrics caches one route's counters by status code, so that a request
// costs no label lookup.
type routeMetrics struct {
	name    string
	m       *metrics
	latency prometheus.Observer
	codes   [600]atomic.Pointer[counterRef]
}

type counterRef struct{ prometheus.Counter }

func (m *metrics) route(name string) *routeMetrics {
	return &routeMetrics{name: name, m: m, latency: m.latency.WithLabelValues(name)}
}

func (rm *routeMetrics) observe(code int, d time.Duration) {
	rm.latency.Observe(d.Seconds())
	if code < 100 || code >= len(rm.codes) {
		rm.m.requests.WithLabelValues(rm.name, strconv.Itoa(code)).Inc()
		return
	}
	c := rm.codes[code].Load()
	if c == nil {
		c = &counterRef{rm.m.requests.WithLabelValues(rm.name, strconv.Itoa(code))}
		rm.codes[code].Store(c)
	}
	c.Inc()
}

// listCollector reports per-list gauges at scrape time.
type listCollector struct{ s *Server }

var (
	descAge = prometheus.NewDesc("topk_serving_list_age_seconds",
		"Wall time minus the list's as_of (how far behind event time the served list is).", []string{"list"}, nil)
	descUnchanged = prometheus.NewDesc("topk_serving_list_unchanged_seconds",
		"Time since this server saw the list's pointer move.", []string{"list"}, nil)
	descVersion = prometheus.NewDesc("topk_serving_list_version",
		"Version of the list held in memory.", []string{"list"}, nil)
	descStale = prometheus.NewDesc("topk_serving_list_stale",
		"1 when the list is served with stale=true.", []string{"list"}, nil)
)

func (c listCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descAge
	ch <- descUnchanged
	ch <- descVersion
	ch <- descStale
}

func (c listCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	cat := s.state.cat.Load()
	if cat == nil {
		return
	}
	now := s.cfg.Now()
	for _, k := range cat.keys {
		v := cat.lists[k].cur.Load()
		if v == nil {
			continue
		}
		name := k.String()
		unchanged := now.Sub(v.seenAt)
		stale := 0.0
		if v.list.Stale || unchanged > s.cfg.StaleAfter {
			stale = 1
		}
		ch <- prometheus.MustNewConstMetric(descAge, prometheus.GaugeValue, now.Sub(v.list.AsOf).Seconds(), name)
		ch <- prometheus.MustNewConstMetric(descUnchanged, prometheus.GaugeValue, unchanged.Seconds(), name)
		ch <- prometheus.MustNewConstMetric(descVersion, prometheus.GaugeValue, float64(v.list.Version), name)
		ch <- prometheus.MustNewConstMetric(descStale, prometheus.GaugeValue, stale, name)
	}
}

func (s *Server) metricsHandler() func(http.ResponseWriter, *http.Request) error {
	h := promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})
	return func(w http.ResponseWriter, r *http.Request) error {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			return methodNotAllowed(r, "GET, HEAD")
		}
		h.ServeHTTP(w, r)
		return nil
	}
}
