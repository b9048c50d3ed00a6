package recount

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/exact/store"
	"github.com/topk-dev/topk/transforms/grade"
)

// gradeHour grades, for every (type, scope) with exact counts in the hour,
// the 1h list the fast path published at the hour's end (read from
// ListsDir/{type}/{scope}/1h/{as_of unix ms}.json), stores each grade, logs
// it (an alert at error level) and rewrites the metrics file. A list that
// was never published is logged and skipped: there is nothing to grade.
func gradeHour(ctx context.Context, cfg Config, st *store.Store, hour time.Time, counts []schemas.ExactCount) ([]grade.Grade, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	exact := map[[2]string]map[string]int64{}
	for _, c := range counts {
		k := [2]string{c.Type, c.Scope}
		if exact[k] == nil {
			exact[k] = map[string]int64{}
		}
		exact[k][c.Item] += c.Count
	}
	asOf := hour.Add(time.Hour)
	var out []grade.Grade
	for k, m := range exact {
		path := filepath.Join(cfg.ListsDir, k[0], k[1], string(schemas.Window1h), strconv.FormatInt(asOf.UnixMilli(), 10)+".json")
		raw, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			log.Info("grade: no 1h list published at the hour's end", "type", k[0], "scope", k[1], "hour", store.HourKey(hour))
			continue
		}
		if err != nil {
			return out, fmt.Errorf("grade: %w", err)
		}
		l, err := schemas.UnmarshalList(raw)
		if err != nil {
			return out, fmt.Errorf("grade %s: %w", path, err)
		}
		minCount := l.MinCount
		if minCount == 0 && l.Scope != schemas.ScopeGlobal {
			minCount = cfg.ScopedMinCount
		}
		if minCount > 0 {
			// The list leaves out items below its minimum count: grade it
			// against the items that could be listed.
			cut := make(map[string]int64, len(m))
			for item, c := range m {
				if uint64(c) >= minCount {
					cut[item] = c
				}
			}
			m = cut
		}
		g, err := grade.Of(l, m, hour)
		if err != nil {
			return out, err
		}
		sg := store.Grade{Hour: hour, Type: g.Type, Scope: g.Scope,
			RecallAt100: g.Recall100, RecallAt1000: g.Recall1000,
			MaxOvercountVsBound: int64(g.MaxOvercount) - int64(g.Bound),
			MaxDisplacement100:  g.MaxDisplacement, UnderCounts: g.UnderCounts, Alert: g.Alert}
		if err := waitOut(ctx, cfg, "write grade", func(ctx context.Context) error { return st.WriteGrade(ctx, sg) }); err != nil {
			return out, err
		}
		attrs := []any{"type", g.Type, "scope", g.Scope, "hour", store.HourKey(hour), "recall_at_100", g.Recall100,
			"recall_at_1000", g.Recall1000, "max_overcount", g.MaxOvercount, "bound", g.Bound,
			"under_counts", g.UnderCounts, "max_displacement_100", g.MaxDisplacement}
		if g.Alert {
			log.Error("grade: ALERT "+strings.Join(g.Reasons, "; "), attrs...)
		} else {
			log.Info("grade", attrs...)
		}
		out = append(out, g)
	}
	if cfg.MetricsFile != "" {
		if err := writeMetrics(cfg.MetricsFile, out); err != nil {
			return out, err
		}
	}
	return out, nil
}
