package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"cloud.google.com/go/bigtable"
)

// Grade is how the fast path's 1h list published at Hour+1h compares with
// the exact count of Hour (DESIGN.md section 2, exact path step 4).
type Grade struct {
	Hour  time.Time `json:"hour"`
	Type  string    `json:"type"`
	Scope string    `json:"scope"`
	// RecallAt100 and RecallAt1000: the share of the exact top 100 (1,000)
	// that the published list has in its top 100 (1,000).
	RecallAt100  float64 `json:"recall_at_100"`
	RecallAt1000 float64 `json:"recall_at_1000"`
	// MaxOvercountVsBound is the largest (count - exact) - max_overcount over
	// the listed items: > 0 means a promise was broken.
	MaxOvercountVsBound int64 `json:"max_overcount_vs_bound"`
	// MaxDisplacement100 is the largest |published rank - exact rank| in the
	// top 100.
	MaxDisplacement100 int `json:"max_displacement_100"`
	// UnderCounts is the number of listed items counted below their exact
	// count: > 0 means a promise was broken.
	UnderCounts int  `json:"under_counts"`
	Alert       bool `json:"alert"`
}

func gradePrefix(hour time.Time) string { return "g#" + HourKey(hour) + "#" }

// WriteGrade stores a grade at g#{hour}#{type}#{scope} (JSON in c:json);
// a regrade replaces it.
func (s *Store) WriteGrade(ctx context.Context, g Grade) error {
	if err := checkHour(g.Hour); err != nil {
		return err
	}
	g.Hour = g.Hour.UTC()
	b, err := json.Marshal(g)
	if err != nil {
		return err
	}
	m := bigtable.NewMutation()
	m.Set(famC, "json", cellTS, b)
	key := gradePrefix(g.Hour) + listPart(listID{g.Type, g.Scope})
	if err := s.tbl.Apply(ctx, key, m); err != nil {
		return fmt.Errorf("store: write grade %s: %w", key, err)
	}
	return nil
}

// Grades returns the grades of hours in [from, to), in key order (hour,
// type, scope).
func (s *Store) Grades(ctx context.Context, from, to time.Time) ([]Grade, error) {
	var out []Grade
	var ferr error
	err := s.tbl.ReadRows(ctx, bigtable.NewRange(gradePrefix(from), gradePrefix(to)), func(r bigtable.Row) bool {
		v, _ := cell(r, famC, "json")
		var g Grade
		if ferr = json.Unmarshal(v, &g); ferr != nil {
			ferr = fmt.Errorf("store: grade %s: %w", r.Key(), ferr)
			return false
		}
		out = append(out, g)
		return true
	}, latest)
	if err != nil {
		return nil, fmt.Errorf("store: read grades: %w", err)
	}
	return out, ferr
}
