package store

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/topk-dev/topk/schemas"
)

// hourSet is a sorted, unique set of whole hours with its row-key spellings.
type hourSet struct {
	hours []time.Time
	keys  map[string]bool
}

func newHourSet(hours []time.Time) (hourSet, error) {
	hs := hourSet{keys: map[string]bool{}}
	for _, h := range hours {
		if err := checkHour(h); err != nil {
			return hs, err
		}
		hs.hours = append(hs.hours, h.UTC())
	}
	slices.SortFunc(hs.hours, func(a, b time.Time) int { return a.Compare(b) })
	hs.hours = slices.CompactFunc(hs.hours, func(a, b time.Time) bool { return a.Equal(b) })
	for _, h := range hs.hours {
		hs.keys[HourKey(h)] = true
	}
	return hs, nil
}

// filter keeps the l: cells of the set's span (the caller also checks
// membership, for sets with gaps).
func (hs hourSet) filter() bigtable.Filter {
	return bigtable.ColumnRangeFilter(famL, HourKey(hs.hours[0]), HourKey(hs.hours[len(hs.hours)-1].Add(time.Hour)))
}

// sum adds the row's l: cells of hours in the set.
func (hs hourSet) sum(r bigtable.Row) (int64, error) {
	var n int64
	for _, it := range r[famL] {
		if !hs.keys[strings.TrimPrefix(it.Column, famL+":")] {
			continue
		}
		v, err := strconv.ParseInt(string(it.Value), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("store: row %s %s=%q: %w", r.Key(), it.Column, it.Value, err)
		}
		n += v
	}
	return n, nil
}

// sumCells point-reads items of a list and sums their counts over hours.
// Items without a count are absent from the map.
func (s *Store) sumCells(ctx context.Context, id listID, items []string, hours []time.Time) (map[string]int64, error) {
	hs, err := newHourSet(hours)
	if err != nil || len(hs.hours) == 0 {
		return map[string]int64{}, err
	}
	return s.readItems(ctx, id, items, hs.sum, hs.filter())
}

// readItems point-reads the item rows of a list through filter and maps
// each item found to value(row) when positive.
func (s *Store) readItems(ctx context.Context, id listID, items []string, value func(bigtable.Row) (int64, error), filter bigtable.Filter) (map[string]int64, error) {
	keys := make([]string, len(items))
	byRow := make(map[string]string, len(items))
	for i, it := range items {
		keys[i] = itemRow(itemKey{id, it})
		byRow[keys[i]] = it
	}
	out := make(map[string]int64, len(items))
	err := s.readRows(ctx, keys, func(r bigtable.Row) error {
		n, err := value(r)
		if n > 0 {
			out[byRow[r.Key()]] = n
		}
		return err
	}, filter)
	return out, err
}

// TopOfHours returns the exact top limit items of a list over a set of
// recounted hours (count descending, ties by item). It takes the union of
// the hours' t# tops as candidates and point-reads their exact totals; an
// item in none of the tops totals at most the sum of the hours' rest, so
// when the limit-th candidate total is at least that sum the candidates hold
// an exact top (an outside item can at most tie with the last entry; ties
// at the cut are kept in item order among the candidates). Otherwise it
// scans every item row of the list.
func (s *Store) TopOfHours(ctx context.Context, typ, scope string, hours []time.Time, limit int) ([]schemas.ExactCount, error) {
	id := listID{typ, scope}
	hs, err := newHourSet(hours)
	if err != nil || len(hs.hours) == 0 || limit <= 0 {
		return nil, err
	}
	keys := make([]string, len(hs.hours))
	for i, h := range hs.hours {
		keys[i] = topRow(h, id)
	}
	var items []string
	seen := map[string]bool{}
	var bound int64
	err = s.readRows(ctx, keys, func(r bigtable.Row) error {
		top, rest, err := parseTop(r, id, time.Time{})
		for _, e := range top {
			if !seen[e.Item] {
				seen[e.Item] = true
				items = append(items, e.Item)
			}
		}
		bound += rest
		return err
	})
	if err != nil {
		return nil, err
	}
	totals, err := s.sumCells(ctx, id, items, hs.hours)
	if err != nil {
		return nil, err
	}
	top := topOf(totals, limit)
	if bound > 0 && (len(top) < limit || top[limit-1].Count < bound) {
		s.topScans.Add(1)
		c := newCollector(limit)
		prefix := "a#" + listPart(id)
		err := s.scan(ctx, prefix, func(r bigtable.Row) error {
			n, err := hs.sum(r)
			c.add(unesc(strings.TrimPrefix(r.Key(), prefix)), n)
			return err
		}, hs.filter())
		if err != nil {
			return nil, err
		}
		top = c.top()
	}
	for i := range top {
		top[i].Type, top[i].Scope = typ, scope
	}
	return top, nil
}

// ---- 24 hours ----

// Recompute24h writes the 24h candidates (top 3k) of every list for the
// window [end-24h, end) from its 24 hourly partitions (TopOfHours: no
// running subtraction, so a corrected hour is picked up by the next
// recompute) and records end as the window the store holds. Lists that had
// 24h candidates but no count in the window get an empty list.
func (s *Store) Recompute24h(ctx context.Context, end time.Time, k int) error {
	if err := checkHour(end); err != nil {
		return err
	}
	hours := make([]time.Time, 24)
	for i := range hours {
		hours[i] = end.Add(time.Duration(i-24) * time.Hour)
	}
	lists := map[listID]bool{}
	for _, h := range hours {
		p := topPrefix(h)
		err := s.scan(ctx, p, func(r bigtable.Row) error {
			parts := strings.Split(strings.TrimPrefix(r.Key(), p), "#")
			if len(parts) != 3 {
				return fmt.Errorf("store: malformed hour top key %q", r.Key())
			}
			lists[listID{unesc(parts[0]), unesc(parts[1])}] = true
			return nil
		}, bigtable.CellsPerRowLimitFilter(1), bigtable.StripValueFilter())
		if err != nil {
			return err
		}
	}
	err := s.scan(ctx, "c#", func(r bigtable.Row) error {
		id, w, err := parseCandRow(r.Key())
		if w == schemas.Window24h {
			lists[id] = true
		}
		return err
	}, bigtable.CellsPerRowLimitFilter(1), bigtable.StripValueFilter())
	if err != nil {
		return err
	}
	b := &bulk{s: s}
	for id := range lists {
		top, err := s.TopOfHours(ctx, id.typ, id.scope, hours, 3*k)
		if err != nil {
			return err
		}
		if err := b.add(ctx, candRow(id, schemas.Window24h), candMutation(top, 3*k, end)); err != nil {
			return err
		}
	}
	if err := b.flush(ctx); err != nil {
		return err
	}
	return s.writeTime(ctx, rowEnd24h, end)
}

// End24h is the end of the 24-hour window the store holds (zero if none).
func (s *Store) End24h(ctx context.Context) (time.Time, error) { return s.readTime(ctx, rowEnd24h) }

// Totals point-reads the exact totals of items in a long window: the 24-hour
// totals of the window the store holds (End24h), or the all-time totals.
// Items without a count are absent from the map.
func (s *Store) Totals(ctx context.Context, typ, scope string, window schemas.Window, items []string) (map[string]int64, error) {
	id := listID{typ, scope}
	switch window {
	case schemas.Window24h:
		e, err := s.End24h(ctx)
		if err != nil || e.IsZero() {
			return map[string]int64{}, err
		}
		hours := make([]time.Time, 24)
		for i := range hours {
			hours[i] = e.Add(time.Duration(i-24) * time.Hour)
		}
		return s.sumCells(ctx, id, items, hours)
	case schemas.WindowAll:
	default:
		return nil, fmt.Errorf("store: no exact totals for window %q", window)
	}
	total := func(r bigtable.Row) (int64, error) {
		n, _, err := cellInt(r, famC, "n")
		return n, err
	}
	return s.readItems(ctx, id, items, total, totalFilter)
}
