package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/bigtable"
)

// History reads for the trend scorer (transforms/trend): an item's exact
// count in each hour, over the list's exact total of that hour, is its
// hourly share, the older part of its baseline.

// HourTotals point-reads the list's exact total events in each of hours
// (the t# rows' c:total). Hours without a total (not recounted, empty, or
// recounted before totals were written) are absent from the map.
func (s *Store) HourTotals(ctx context.Context, typ, scope string, hours []time.Time) (map[time.Time]int64, error) {
	hs, err := newHourSet(hours)
	if err != nil {
		return nil, err
	}
	id := listID{typ, scope}
	keys := make([]string, len(hs.hours))
	byRow := make(map[string]time.Time, len(hs.hours))
	for i, h := range hs.hours {
		keys[i] = topRow(h, id)
		byRow[keys[i]] = h
	}
	out := make(map[time.Time]int64, len(keys))
	err = s.readRows(ctx, keys, func(r bigtable.Row) error {
		n, ok, err := cellInt(r, famC, "total")
		if ok && n > 0 {
			out[byRow[r.Key()]] = n
		}
		return err
	}, columnFilter(famC, "total"))
	return out, err
}

// ItemHours point-reads the exact counts of items of a list in every hour
// of [from, to) (one read of each item's a# row, its l: cells of the span).
// Items and hours without a count are absent.
func (s *Store) ItemHours(ctx context.Context, typ, scope string, items []string, from, to time.Time) (map[string]map[time.Time]int64, error) {
	if err := checkHour(from); err != nil {
		return nil, err
	}
	if err := checkHour(to); err != nil {
		return nil, err
	}
	out := make(map[string]map[time.Time]int64, len(items))
	if len(items) == 0 || !from.Before(to) {
		return out, nil
	}
	id := listID{typ, scope}
	keys := make([]string, len(items))
	byRow := make(map[string]string, len(items))
	for i, it := range items {
		keys[i] = itemRow(itemKey{id, it})
		byRow[keys[i]] = it
	}
	filter := bigtable.ColumnRangeFilter(famL, HourKey(from), HourKey(to))
	err := s.readRows(ctx, keys, func(r bigtable.Row) error {
		m := map[time.Time]int64{}
		for _, c := range r[famL] {
			h, err := parseHour(strings.TrimPrefix(c.Column, famL+":"))
			if err != nil {
				return fmt.Errorf("store: row %s column %s: %w", r.Key(), c.Column, err)
			}
			n, err := strconv.ParseInt(string(c.Value), 10, 64)
			if err != nil {
				return fmt.Errorf("store: row %s %s=%q: %w", r.Key(), c.Column, c.Value, err)
			}
			if n > 0 && !h.Before(from) && h.Before(to) {
				m[h] = n
			}
		}
		if len(m) > 0 {
			out[byRow[r.Key()]] = m
		}
		return nil
	}, filter)
	return out, err
}
