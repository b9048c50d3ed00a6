package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/topk-dev/topk/internal/redistest"
	"github.com/topk-dev/topk/pipelines/fastpath"
	"github.com/topk-dev/topk/pipelines/recount"
	"github.com/topk-dev/topk/pipelines/recount/recounttest"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/exact/store"
	"github.com/topk-dev/topk/transforms/grade"
	"github.com/topk-dev/topk/transforms/publish/liststore"
	"github.com/topk-dev/topk/transforms/source"
)

// TestLocalGrading runs the local run's grading step on a real small hour:
// the fast path replays the hour's events into Redis, the hour-end 1h lists
// are copied from Redis as the local run copies them, the recount loop
// recounts the archived hour and grades them. Every stored grade (exact
// store) matches the grade of the same list against the hour's exact counts
// computed here with a plain map (recounttest.Oracle), the lists keep their
// contract (no under-count, over-counts within max_overcount), and the
// grades are on the run's /metrics registry and in its output.
func TestLocalGrading(t *testing.T) {
	ctx := context.Background()
	hour := time.Now().UTC().Truncate(time.Hour).Add(-3 * time.Hour)
	end := hour.Add(time.Hour)
	events := recounttest.GenEvents(5, hour, 8000)
	root := t.TempDir()
	recounttest.WriteArchive(t, root, hour, events)

	// Redis: a private redis-server when the binary is there, else miniredis.
	var addr string
	if _, err := exec.LookPath("redis-server"); err == nil {
		addr = redistest.New(t).Addr()
	} else {
		addr = miniredis.RunT(t).Addr()
	}

	// The fast path over the hour's events in time order (each once: the
	// archive's redelivered copies are the recount's to drop).
	fcfg := fastpath.DefaultConfig()
	var err error
	fcfg.Source, err = source.ParseSpec("file:" + recounttest.WriteReplay(t, events))
	must(t, err)
	fcfg.Windows = []schemas.Window{schemas.Window1h}
	fcfg.Preagg.Partitions = 2
	// Every version the job made, to files (a replay's publish step keeps
	// only the newest version of a list per bundle in Redis; the live run
	// makes one version a minute).
	out := t.TempDir()
	fcfg.Publish.ListsOut = out
	if _, err := fastpath.Run(ctx, fcfg, fastpath.BeamRunner, nil); err != nil {
		t.Fatal(err)
	}
	// Redis as the live run sees it: every 1h version published in as_of
	// order, so that the hour-end version is an older one, held for
	// liststore's old-version TTL, when it is copied.
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	ls := liststore.New(rc, liststore.Options{})
	versions, _ := filepath.Glob(filepath.Join(out, "*", "*", "1h", "*.json"))
	slices.SortFunc(versions, func(a, b string) int { return strings.Compare(filepath.Base(a), filepath.Base(b)) })
	for _, p := range versions {
		raw, err := os.ReadFile(p)
		must(t, err)
		l, err := schemas.UnmarshalList(raw)
		must(t, err)
		if _, err := ls.Publish(ctx, l); err != nil {
			t.Fatal(err)
		}
	}

	// The hour-end lists, copied from Redis as the local run does.
	ends := newHourEnds(ls, filepath.Join(root, "lists"), hour, time.Time{})
	if !ends.pending(end, end.Add(time.Minute), 10*time.Minute) {
		t.Fatal("nothing copied yet, but the hour is not pending")
	}
	n, err := ends.sweep(ctx, end)
	must(t, err)
	if n == 0 || ends.pending(end, end.Add(time.Minute), 10*time.Minute) {
		t.Fatalf("copied %d hour-end lists", n)
	}
	lists := map[[2]string]*schemas.List{}
	files, _ := filepath.Glob(filepath.Join(root, "lists", "*", "*", "1h", "*.json"))
	for _, p := range files {
		raw, err := os.ReadFile(p)
		must(t, err)
		l, err := schemas.UnmarshalList(raw)
		must(t, err)
		if !l.AsOf.Equal(end) {
			t.Fatalf("%s: as_of %v, want %v", p, l.AsOf, end)
		}
		lists[[2]string{l.Type, l.Scope}] = l
	}
	if len(files) != n {
		t.Fatalf("%d files for %d lists copied", len(files), n)
	}

	// The recount loop's pass recounts the closed hour and grades it.
	st := recounttest.NewStore(t)
	gm := recount.NewGradeMetrics()
	reg := prometheus.NewRegistry()
	reg.MustRegister(gm)
	var log bytes.Buffer
	r := &recounter{root: root, st: st, k: fcfg.Lists.K, out: &log, every: time.Minute, ends: ends, grades: gm, gradeWait: 10 * time.Minute,
		minCount1h: fcfg.MinCount[schemas.Window1h]}
	must(t, r.pass(ctx))
	t.Logf("output:\n%s", log.String())
	if len(r.hours) != 1 || len(r.hours[0].Grades) != len(lists) {
		t.Fatalf("recounted %d hours with %d grades; want 1 hour, %d grades", len(r.hours), len(r.hours[0].Grades), len(lists))
	}

	// The independent recount: the hour's exact counts per (type, scope).
	exact := map[[2]string]map[string]int64{}
	for k, c := range recounttest.Oracle(events) {
		p := strings.SplitN(k, "/", 3)
		lk := [2]string{p[0], p[1]}
		if exact[lk] == nil {
			exact[lk] = map[string]int64{}
		}
		exact[lk][p[2]] = c
	}
	stored, err := st.Grades(ctx, hour, end)
	must(t, err)
	if len(stored) != len(lists) {
		t.Fatalf("%d grades stored, %d lists", len(stored), len(lists))
	}
	for _, sg := range stored {
		l := lists[[2]string{sg.Type, sg.Scope}]
		if l == nil || !sg.Hour.Equal(hour) {
			t.Fatalf("stored grade %+v: no such list, or another hour", sg)
		}
		// Graded against what the list could show: a country or region
		// list leaves out items below the 1h minimum count.
		minCount := uint64(0)
		if l.Scope != schemas.ScopeGlobal {
			if minCount = fcfg.MinCount[schemas.Window1h]; minCount == 0 {
				t.Fatal("the fast path's 1h lists have no minimum count")
			}
		}
		m := map[string]int64{}
		for it, c := range exact[[2]string{sg.Type, sg.Scope}] {
			if uint64(c) >= minCount {
				m[it] = c
			}
		}
		want, err := grade.Of(l, m, hour)
		must(t, err)
		got := store.Grade{Hour: hour, Type: l.Type, Scope: l.Scope, RecallAt100: want.Recall100, RecallAt1000: want.Recall1000,
			MaxOvercountVsBound: int64(want.MaxOvercount) - int64(want.Bound), MaxDisplacement100: want.MaxDisplacement,
			UnderCounts: want.UnderCounts, Alert: want.Alert}
		if sg.Hour = sg.Hour.UTC(); sg != got {
			t.Errorf("%s/%s: stored %+v, want %+v (graded against the exact counts computed here)", sg.Type, sg.Scope, sg, got)
		}
		// The contract, checked here without the grader: no entry under its
		// exact count, none over it by more than max_overcount.
		maxOver := int64(0)
		for _, e := range l.Items {
			x := exact[[2]string{l.Type, l.Scope}][e.Item]
			if int64(e.Count) < x {
				t.Errorf("%s/%s: %s listed %d, exact %d", l.Type, l.Scope, e.Item, e.Count, x)
			}
			maxOver = max(maxOver, int64(e.Count)-x)
		}
		if sg.UnderCounts != 0 || sg.Alert || sg.MaxOvercountVsBound != maxOver-int64(l.MaxOvercount) || maxOver > int64(l.MaxOvercount) {
			t.Errorf("%s/%s: stored %+v; over-count %d, bound %d", l.Type, l.Scope, sg, maxOver, l.MaxOvercount)
		}
	}

	// /metrics: one ok grade per list, an alert gauge per list.
	fams, err := reg.Gather()
	must(t, err)
	series := map[string]int{}
	var ok float64
	for _, fam := range fams {
		series[fam.GetName()] = len(fam.GetMetric())
		if fam.GetName() == "topk_grade_lists_total" {
			for _, m := range fam.GetMetric() {
				if m.GetLabel()[0].GetValue() == "ok" {
					ok = m.GetCounter().GetValue()
				}
			}
		}
	}
	if int(ok) != len(lists) || series["topk_grade_alert"] != len(lists) || series["topk_grade_under_counts"] != len(lists) {
		t.Fatalf("metrics: %v lists graded ok, series %v; want %d", ok, series, len(lists))
	}
	if !strings.Contains(log.String(), "lists graded against the exact hour, 0 alerts") {
		t.Fatalf("no grade line in the output")
	}
	// Graded: the copied lists are gone.
	if left, _ := filepath.Glob(filepath.Join(root, "lists", "*", "*", "1h", "*.json")); len(left) != 0 {
		t.Fatalf("%d copied lists left after grading", len(left))
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
