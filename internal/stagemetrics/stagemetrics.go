// Package stagemetrics counts what the fast path's stages do as
// process-global Prometheus counters, so that a running streaming job can
// serve them on its --metrics_addr (and the local run on its one /metrics)
// instead of only reporting Beam counters when the job ends. The DoFns add
// to them next to their Beam counters, once per bundle where they can.
//
//	topk_stream_source_messages_total{source="pubsub"}  messages pulled from Pub/Sub (topk.source/pubsub_messages)
//	topk_stream_events_total{stage="decoded"}           events read from beacons by the pre-aggregation: counted + late + rules-dropped + invalid
//	topk_stream_events_total{stage="counted"}           events counted into the lists (topk/events)
//	topk_stream_late_events_total                       events later than the allowed lateness, left to the exact path (topk/late_dropped)
//	topk_stream_dead_letters_total{reason}              dead letters: reason "bad_beacon" (a beacon that does not decode; topk/bad_beacons) or "bad_event" (an event that fails validation; topk/bad_events)
//	topk_stream_rules_dropped_total{reason}             events the countable-event rules drop: duplicate, blocked, bot, repeat, capped (topk/rules_dropped_*)
//	topk_stream_preagg_bundles_total                    bundles the pre-aggregation ended, each in a flush of every list it touched: the source's calls (transforms/source, calls.go: about one per 10 s bucket and reader at low rates) (topk/preagg_flushes)
//	topk_stream_preagg_summary_sets_total               summary sets the pre-aggregation sent to the bucket merge (one per partition, bucket and flush) (topk/preagg_sets)
//	topk_stream_preagg_summary_bytes_total              their encoded bytes (topk/preagg_set_bytes): the fast path's shuffle volume, which the runner copies in and out of its group-by-key and the bucket merge decodes
//	topk_stream_state_cache_misses_total{stage}         a stateful stage read a key's Beam state back because its in-memory copy was missing or stale (stage "windows": topk/slide_rebuilds; "trending": topk/trend_cache_misses): each key's first use in a process, then restarts, keys moved between workers, bundles the runner discarded
//	topk_stream_trend_tallies_total                     distinct-users tallies the pre-aggregation sent to the trend scorer (topk/trend_tallies)
//	topk_stream_trend_tally_bytes_total                 their encoded bytes (topk/trend_tally_bytes): trending's volume, which most of its cost follows
//	topk_stream_publish_failures_total                  failed attempts to publish a list to Redis (each retried with backoff; the job keeps running)
//	topk_stream_recovery_log_messages_total{op}         recovery log (internal/recoverylog): "logged" (written before the ack), "replayed" (by a restarted run), "already_logged" (a redelivery or a second copy of a beacon: acknowledged, not counted)
//	topk_stream_recovery_log_last_write_timestamp_seconds  when the recovery log was last written: the checkpoint age is time() minus this
//
// These are what the worker running in this process counted. On Prism (the
// local run, the streaming command's default runner) and on a portable job
// server with --environment_type=LOOPBACK the SDK harness runs in the
// launching process, so they are the job's. On Dataflow or Flink workers
// that are other processes they read zero in the launcher: there the
// runner's own Beam metrics (Cloud Monitoring, Flink's reporters) are the
// source. They count per bundle attempt, so a bundle a runner retries is
// counted again here (Beam's committed counters are not); the difference is
// the retried bundles.
package stagemetrics

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Stages with an in-memory copy of their state (StateCacheMiss).
const (
	StageWindows  = "windows"
	StageTrending = "trending"
)

// StateCacheMiss adds one read of a key's Beam state by stage because its
// in-memory copy was missing or stale.
func StateCacheMiss(stage string) { stateCacheMisses.WithLabelValues(stage).Inc() }

// Dead-letter reasons.
const (
	BadBeacon = "bad_beacon"
	BadEvent  = "bad_event"
)

var (
	messages = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "topk_stream_source_messages_total", Help: "Messages the fast path's source read, by source.",
	}, []string{"source"})
	events = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "topk_stream_events_total", Help: "Events through the fast path's stages: decoded (read from beacons) and counted (into the lists).",
	}, []string{"stage"})
	late = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "topk_stream_late_events_total", Help: "Events later than the allowed lateness, not counted by the fast path (the exact path counts them).",
	})
	deadLetters = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "topk_stream_dead_letters_total", Help: "Dead letters of the fast path, by reason (bad_beacon, bad_event).",
	}, []string{"reason"})
	rulesDropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "topk_stream_rules_dropped_total", Help: "Events the countable-event rules dropped in the fast path, by rule.",
	}, []string{"reason"})
	rulesUnverified = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "topk_stream_rules_unverified_total", Help: "What the fast path's bounded rule state could not judge, counted rather than dropped (the over-count the exact path corrects): unchecked_events (event_id not remembered), untracked_events and forgotten_keys ((user, item) state not kept).",
	}, []string{"kind"})
	preaggBundles = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "topk_stream_preagg_bundles_total", Help: "Bundles the pre-aggregation ended, each in a flush of every list it touched: the source's calls, about one per 10 s bucket and reader at low rates.",
	})
	preaggSets = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "topk_stream_preagg_summary_sets_total", Help: "Summary sets the pre-aggregation sent to the bucket merge: one per partition, bucket and flush.",
	})
	preaggSetBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "topk_stream_preagg_summary_bytes_total", Help: "Encoded bytes of the summary sets the pre-aggregation sent to the bucket merge: the fast path's shuffle volume.",
	})
	stateCacheMisses = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "topk_stream_state_cache_misses_total", Help: "Times a stateful stage (windows, trending) read a key's Beam state back because its in-memory copy was missing or stale: first use in this process, a restart, a key moved between workers, a discarded bundle.",
	}, []string{"stage"})
	trendTallies = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "topk_stream_trend_tallies_total", Help: "Distinct-users tallies the pre-aggregation sent to the trend scorer (one per list, bucket and bundle).",
	})
	trendTallyBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "topk_stream_trend_tally_bytes_total", Help: "Encoded bytes of the distinct-users tallies sent to the trend scorer: trending's volume, which most of its cost follows.",
	})

	publishFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "topk_stream_publish_failures_total", Help: "Failed attempts to publish a list to Redis (retried with backoff).",
	})
	recoveryLog = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "topk_stream_recovery_log_messages_total", Help: "Pub/Sub messages through the recovery log: logged, replayed, already_logged.",
	}, []string{"op"})
	recoveryLogWrite = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "topk_stream_recovery_log_last_write_timestamp_seconds", Help: "Unix time of the recovery log's last write (0: never in this process).",
	})

	decoded = events.WithLabelValues("decoded")
	counted = events.WithLabelValues("counted")
)

func init() {
	// Every series exists from the start: a rate over a counter that
	// appears late misses its first increase.
	deadLetters.WithLabelValues(BadBeacon)
	deadLetters.WithLabelValues(BadEvent)
	messages.WithLabelValues("pubsub")
	stateCacheMisses.WithLabelValues(StageWindows)
	stateCacheMisses.WithLabelValues(StageTrending)
}

// Collector serves every stage counter; register it once per registry.
func Collector() prometheus.Collector { return collector{} }

type collector struct{}

func (collector) all() []prometheus.Collector {
	return []prometheus.Collector{messages, events, late, deadLetters, rulesDropped, rulesUnverified, preaggBundles, preaggSets, preaggSetBytes, stateCacheMisses, trendTallies, trendTallyBytes, publishFailures, recoveryLog, recoveryLogWrite}
}

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, x := range c.all() {
		x.Describe(ch)
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for _, x := range c.all() {
		x.Collect(ch)
	}
}

// Preagg adds one bundle of the pre-aggregation: the bundle, events
// counted, beacons and events dead-lettered, events dropped as late.
func Preagg(countedEvents, badBeacons, badEvents, lateEvents int64) {
	preaggBundles.Inc()
	counted.Add(float64(countedEvents))
	decoded.Add(float64(countedEvents + badEvents + lateEvents))
	deadLetters.WithLabelValues(BadBeacon).Add(float64(badBeacons))
	deadLetters.WithLabelValues(BadEvent).Add(float64(badEvents))
	late.Add(float64(lateEvents))
}

// RulesDropped adds n events the rule named reason dropped (they were
// decoded, and not counted).
func RulesDropped(reason string, n int64) {
	rulesDropped.WithLabelValues(reason).Add(float64(n))
	decoded.Add(float64(n))
}

// RulesUnverified adds what a rule filter could not judge (rules.Stats):
// unchecked and untracked events, forgotten keys.
func RulesUnverified(unchecked, untracked, forgotten uint64) {
	rulesUnverified.WithLabelValues("unchecked_events").Add(float64(unchecked))
	rulesUnverified.WithLabelValues("untracked_events").Add(float64(untracked))
	rulesUnverified.WithLabelValues("forgotten_keys").Add(float64(forgotten))
}

// TrendTallies adds n distinct-users tallies of the given total bytes
// sent to the trend scorer.
func TrendTallies(n, bytes int64) {
	trendTallies.Add(float64(n))
	trendTallyBytes.Add(float64(bytes))
}

// PreaggSets adds n summary sets of the given total bytes sent to the
// bucket merge.
func PreaggSets(n, bytes int64) {
	preaggSets.Add(float64(n))
	preaggSetBytes.Add(float64(bytes))
}

// SourceMessages adds n messages read by source ("pubsub").
func SourceMessages(source string, n int) {
	messages.WithLabelValues(source).Add(float64(n))
}

// PublishFailures adds n failed attempts to publish a list.
func PublishFailures(n int) { publishFailures.Add(float64(n)) }

// RecoveryLog adds n messages to the recovery log's op ("logged",
// "replayed", "already_logged"); "logged" also stamps the last write.
func RecoveryLog(op string, n int) {
	recoveryLog.WithLabelValues(op).Add(float64(n))
	if op == "logged" && n > 0 {
		recoveryLogWrite.SetToCurrentTime()
	}
}

// Values flattens gathered counters and gauges to "name/labelvalue/..."
// (label values in the family's label order) -> value: what tests and
// tools compare against.
func Values(fams []*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			k := f.GetName()
			for _, l := range m.GetLabel() {
				k += "/" + l.GetValue()
			}
			switch {
			case m.GetCounter() != nil:
				out[k] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[k] = m.GetGauge().GetValue()
			case m.GetUntyped() != nil:
				out[k] = m.GetUntyped().GetValue()
			}
		}
	}
	return out
}
