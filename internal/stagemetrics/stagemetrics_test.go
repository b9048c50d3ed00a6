package stagemetrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A bundle's counts land in their series: decoded is counted + late +
// invalid + rules-dropped; a bad beacon is a dead letter, not an event.
func TestPreaggAndRules(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(Collector())
	Preagg(100, 2, 3, 4)
	RulesDropped("duplicate", 5)
	RulesUnverified(6, 8, 9)
	SourceMessages("pubsub", 7)
	TrendTallies(2, 300)
	StateCacheMiss(StageTrending)
	StateCacheMiss(StageTrending)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := Values(fams)
	for k, want := range map[string]float64{
		"topk_stream_events_total/decoded":                    112,
		"topk_stream_events_total/counted":                    100,
		"topk_stream_late_events_total":                       4,
		"topk_stream_dead_letters_total/bad_beacon":           2,
		"topk_stream_dead_letters_total/bad_event":            3,
		"topk_stream_rules_dropped_total/duplicate":           5,
		"topk_stream_source_messages_total/pubsub":            7,
		"topk_stream_rules_unverified_total/unchecked_events": 6,
		"topk_stream_rules_unverified_total/untracked_events": 8,
		"topk_stream_rules_unverified_total/forgotten_keys":   9,
		"topk_stream_trend_tallies_total":                     2,
		"topk_stream_trend_tally_bytes_total":                 300,
		"topk_stream_preagg_bundles_total":                    1,
		"topk_stream_state_cache_misses_total/trending":       2,
		"topk_stream_state_cache_misses_total/windows":        0,
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], want, got)
		}
	}
}

// The recovery log's counters by op, and its last write stamped by a
// write only (the checkpoint age an operator alerts on); publish failures.
func TestRecoveryLog(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(Collector())
	RecoveryLog("replayed", 4)
	PublishFailures(2)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if got := Values(fams); got["topk_stream_recovery_log_last_write_timestamp_seconds"] != 0 || got["topk_stream_recovery_log_messages_total/replayed"] != 4 ||
		got["topk_stream_publish_failures_total"] != 2 {
		t.Fatalf("after a replay: %v; want 4 replayed and no write yet", got)
	}
	before := float64(time.Now().Unix())
	RecoveryLog("logged", 3)
	fams, err = reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := Values(fams)
	if got["topk_stream_recovery_log_messages_total/logged"] != 3 || got["topk_stream_recovery_log_last_write_timestamp_seconds"] < before {
		t.Fatalf("after a write: %v; want 3 logged and the write stamped", got)
	}
}
