package recount

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/topk-dev/topk/pipelines/fastpath"
	"github.com/topk-dev/topk/pipelines/recount/recounttest"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/source"
)

// TestGradeAgainstFastPath: the fast path replays an hour, the exact path
// recounts the same hour from the archive and grades the 1h list published
// at the hour's end: perfect recall and no alert; a tampered list that
// under-counts raises the alert, in the stored grade and the metrics file.
func TestGradeAgainstFastPath(t *testing.T) {
	hour := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	events := recounttest.GenEvents(11, hour, 20_000)
	root, lists := t.TempDir(), t.TempDir()
	recounttest.WriteArchive(t, root, hour, events)

	// The fast path over the same events in time order.
	fcfg := fastpath.DefaultConfig()
	var err error
	fcfg.Source, err = source.ParseSpec("file:" + recounttest.WriteReplay(t, events))
	must(t, err)
	fcfg.Windows = []schemas.Window{schemas.Window1h}
	// Global lists: this test grades one list per type (scoped lists are
	// graded against their minimum count, pipelines/recount/grade.go).
	fcfg.Preagg.Scopes = false
	fcfg.Publish.ListsOut = lists
	if _, err := fastpath.Run(context.Background(), fcfg, fastpath.BeamRunner, nil); err != nil {
		t.Fatal(err)
	}

	st := recounttest.NewStore(t)
	metrics := filepath.Join(t.TempDir(), "grades.prom")
	run := func() HourReport {
		reps, err := Run(context.Background(), Config{Archive: root, Hours: []time.Time{hour}, K: 10, Shards: 4, Parts: 3,
			RequireClosed: true, Store: st, ListsDir: lists, MetricsFile: metrics})
		must(t, err)
		return reps[0]
	}
	rep := run()
	if len(rep.Grades) != 2 { // video and hashtag, scope global
		t.Fatalf("grades %+v, want one per type", rep.Grades)
	}
	for _, g := range rep.Grades {
		if g.Alert || g.Recall100 != 1 || g.UnderCounts != 0 || g.MaxOvercount > g.Bound {
			t.Fatalf("grade of a correct list: %+v", g)
		}
	}

	// Tamper: the video list's first entry now under-counts by one.
	lp := filepath.Join(lists, "video", "global", "1h", strconv.FormatInt(hour.Add(time.Hour).UnixMilli(), 10)+".json")
	raw, err := os.ReadFile(lp)
	must(t, err)
	l, err := schemas.UnmarshalList(raw)
	must(t, err)
	l.Items[0].Count--
	l.Items[0].Lower = min(l.Items[0].Lower, l.Items[0].Count)
	raw, err = schemas.MarshalList(l)
	must(t, err)
	must(t, os.WriteFile(lp, raw, 0o644))
	rep = run()
	alerts := 0
	for _, g := range rep.Grades {
		if g.Alert {
			alerts++
		}
	}
	stored, err := st.Grades(context.Background(), hour, hour.Add(time.Hour))
	must(t, err)
	storedAlerts := 0
	for _, g := range stored {
		if g.Alert {
			storedAlerts++
			if g.UnderCounts != 1 {
				t.Errorf("stored grade %+v: want 1 under-count", g)
			}
		}
	}
	prom, err := os.ReadFile(metrics)
	must(t, err)
	if alerts != 1 || storedAlerts != 1 || !strings.Contains(string(prom), `topk_grade_alert{scope="global",type="video"} 1`) ||
		!strings.Contains(string(prom), `topk_grade_under_counts{scope="global",type="video"} 1`) {
		t.Fatalf("alerts %d, stored %d, metrics:\n%s", alerts, storedAlerts, prom)
	}
}
