package main

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/topk-dev/topk/pipelines/recount"
)

// Property: the run's textfile carries the names ops/alerts.yml reads, with
// success only when every hour asked for was recounted.
func TestRunMetricsFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "recount.prom")
	now := time.Date(2026, 12, 1, 12, 5, 0, 0, time.UTC)
	reps := []recount.HourReport{{Hour: "2026-12-01T09", Seconds: 3, ExactUntil: "2026-12-01T10"}, {Hour: "2026-12-01T10", Seconds: 4.5, ExactUntil: "2026-12-01T11"}}
	must(t, writeRunMetrics(path, 2, reps, nil, now))
	b, err := os.ReadFile(path)
	must(t, err)
	for _, want := range []string{
		"topk_recount_run_success 1",
		`topk_recount_hours{result="done"} 2`,
		`topk_recount_hours{result="failed"} 0`,
		"topk_recount_duration_seconds 7.5",
		"topk_recount_exact_until_timestamp_seconds " + strconv.FormatFloat(float64(time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC).Unix()), 'g', -1, 64),
		"topk_recount_run_timestamp_seconds " + strconv.FormatFloat(float64(now.Unix()), 'g', -1, 64),
	} {
		if !strings.Contains(string(b), want+"\n") {
			t.Errorf("missing %q in\n%s", want, b)
		}
	}
	must(t, writeRunMetrics(path, 3, reps[:1], errors.New("boom"), now))
	b, _ = os.ReadFile(path)
	if !strings.Contains(string(b), "topk_recount_run_success 0\n") || !strings.Contains(string(b), `topk_recount_hours{result="failed"} 2`) {
		t.Errorf("failed run:\n%s", b)
	}
}
