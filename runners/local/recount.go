package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"time"

	"github.com/topk-dev/topk/pipelines/recount"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/archive"
	"github.com/topk-dev/topk/transforms/exact/store"
	"github.com/topk-dev/topk/transforms/rules"
)

// recounter recounts the archive's closed hours that the store does not
// have yet: the hourly exact path of a real deployment, on a timer.
type recounter struct {
	root   string
	st     *store.Store
	k      int
	out    io.Writer
	every  time.Duration
	hours  []recount.HourReport // every hour recounted, in order
	failed int                  // passes that ended in an error
	rules  *rules.Config        // the fast path's rules, applied before counting
	// Grading (both nil: none): each recounted hour grades the fast path's
	// 1h lists at its end, copied from Redis by ends, into grades.
	ends   *hourEnds
	grades *recount.GradeMetrics
	// gradeWait is how long after its end an hour the run was up for waits
	// for its lists to be copied before it is recounted (and graded) anyway.
	gradeWait time.Duration
	// minCount1h is the fast path's minimum count of a non-global 1h list
	// (recount.Config.ScopedMinCount).
	minCount1h uint64
}

// loop runs a pass at once and then every r.every until ctx ends; a pass
// that has started finishes (its Beam job cannot be cancelled cleanly). A
// failed pass is logged and retried at the next tick.
func (r *recounter) loop(ctx context.Context) {
	tick := time.NewTicker(r.every)
	defer tick.Stop()
	for {
		if err := r.pass(context.Background()); err != nil {
			r.failed++
			slog.Error("local: recount failed; retrying at the next tick", "err", err, "every", r.every)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// pass recounts, in order, every closed hour that is not done, and every
// hour between two closed hours that has no archived file at all (the
// machine was off, or the run stopped): such an hour had no events, and
// recounting it as empty lets exact_until pass it, where a gap would hold
// exact_until back for good.
func (r *recounter) pass(ctx context.Context) error {
	closed, err := archive.ClosedHours(ctx, r.root)
	if err != nil || len(closed) == 0 {
		return err
	}
	done, err := r.st.DoneHours(ctx)
	if err != nil {
		return err
	}
	var todo []time.Time
	for h := closed[0]; !h.After(closed[len(closed)-1]); h = h.Add(time.Hour) {
		if slices.ContainsFunc(done, h.Equal) {
			continue
		}
		if !slices.ContainsFunc(closed, h.Equal) {
			files, isClosed, err := archive.ListHourContext(ctx, r.root, h)
			if err != nil {
				return err
			}
			if len(files) > 0 || isClosed {
				continue // an open hour: the archiver closes it
			}
		}
		if r.ends != nil && r.ends.pending(h.Add(time.Hour), time.Now(), r.gradeWait) {
			break // in order: exact_until moves over done hours without a gap
		}
		todo = append(todo, h)
	}
	if len(todo) == 0 {
		return nil
	}
	// Not RequireClosed: the hours are chosen above (closed, or empty).
	cfg := recount.Config{Archive: r.root, Hours: todo, K: r.k, Shards: 4, Parts: 4, Store: r.st, Rules: r.rules}
	if r.ends != nil {
		// Grades go to the summary line below and to /metrics; an alert is
		// also logged (error level), the per-list lines are not.
		cfg.ListsDir, cfg.ScopedMinCount = r.ends.dir, r.minCount1h
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	reps, err := recount.Run(ctx, cfg)
	for _, rep := range reps {
		fmt.Fprintf(r.out, "recount: hour %s: %d events counted, %d rows, exact_until %s (%.1fs)\n",
			rep.Hour, rep.Metrics["exact_events_counted"], rep.Rows, rep.ExactUntil, rep.Seconds)
		if r.ends != nil {
			r.grades.Observe(rep.Grades)
			fmt.Fprintln(r.out, gradeLine(rep))
			r.ends.forget(rep.Hour)
		}
	}
	r.hours = append(r.hours, reps...)
	if err != nil {
		return fmt.Errorf("%d of %d hours from %s: %w", len(todo)-len(reps), len(todo), schemas.HourDir(todo[0]), err)
	}
	return nil
}

// gradeLine sums up an hour's grades in one line.
func gradeLine(rep recount.HourReport) string {
	if len(rep.Grades) == 0 {
		return fmt.Sprintf("grade: hour %s: no 1h list of its end to grade (the run was not up then, or an earlier run's events are in the hour)", rep.Hour)
	}
	alerts, under := 0, 0
	minRecall, worst := 1.0, int64(math.MinInt64)
	for _, g := range rep.Grades {
		if g.Alert {
			alerts++
		}
		under += g.UnderCounts
		minRecall = min(minRecall, g.Recall100)
		worst = max(worst, int64(g.MaxOvercount)-int64(g.Bound))
	}
	return fmt.Sprintf("grade: hour %s: %d lists graded against the exact hour, %d alerts; recall@100 min %.3f, under-counts %d, over-count minus bound at most %d",
		rep.Hour, len(rep.Grades), alerts, minRecall, under, worst)
}
