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

// ---- ranked lists ----

// rankLess orders by count descending, ties by item: the order of every list
// the store writes.
func rankLess(a, b schemas.ExactCount) int {
	if a.Count != b.Count {
		if a.Count > b.Count {
			return -1
		}
		return 1
	}
	return strings.Compare(a.Item, b.Item)
}

// collector keeps the limit best (item, count) pairs added to it in bounded
// memory (at most ~2x limit entries), and the largest count it dropped.
type collector struct {
	limit int
	items []schemas.ExactCount
	rest  int64 // largest count dropped
}

func newCollector(limit int) *collector { return &collector{limit: limit} }

func (c *collector) add(item string, n int64) {
	if n <= 0 {
		return
	}
	c.items = append(c.items, schemas.ExactCount{Item: item, Count: n})
	if len(c.items) >= 2*c.limit+1024 {
		c.trim()
	}
}

func (c *collector) trim() {
	slices.SortFunc(c.items, rankLess)
	if len(c.items) > c.limit {
		c.rest = max(c.rest, c.items[c.limit].Count)
		clear(c.items[c.limit:])
		c.items = c.items[:c.limit]
	}
}

// top returns the kept entries in rank order.
func (c *collector) top() []schemas.ExactCount {
	c.trim()
	return c.items
}

// topOf returns the limit largest counts (ties by item), dropping zeros.
func topOf(m map[string]int64, limit int) []schemas.ExactCount {
	c := newCollector(limit)
	for item, n := range m {
		c.add(item, n)
	}
	return c.top()
}

// encodeList is a ranked list as "item<TAB>count" lines.
func encodeList(top []schemas.ExactCount) []byte {
	var b []byte
	for _, e := range top {
		b = append(b, e.Item...)
		b = append(b, '\t')
		b = strconv.AppendInt(b, e.Count, 10)
		b = append(b, '\n')
	}
	return b
}

// decodeList parses encodeList's lines, setting Type and Scope from id.
func decodeList(blob []byte, id listID) ([]schemas.ExactCount, error) {
	var out []schemas.ExactCount
	for line := range strings.SplitSeq(strings.TrimSuffix(string(blob), "\n"), "\n") {
		if line == "" {
			continue
		}
		item, n, ok := strings.Cut(line, "\t")
		c, err := strconv.ParseInt(n, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("store: malformed list line %q", line)
		}
		out = append(out, schemas.ExactCount{Type: id.typ, Scope: id.scope, Item: item, Count: c})
	}
	return out, nil
}

// ---- candidates ----

func candMutation(top []schemas.ExactCount, limit int, until time.Time) *bigtable.Mutation {
	m := bigtable.NewMutation()
	m.Set(famC, "blob", cellTS, encodeList(top))
	m.Set(famC, "until", cellTS, []byte(HourKey(until)))
	setInt(m, famC, "cap", int64(limit))
	return m
}

func parseCandRow(key string) (listID, schemas.Window, error) {
	parts := strings.Split(strings.TrimPrefix(key, "c#"), "#")
	if len(parts) != 3 {
		return listID{}, "", fmt.Errorf("store: malformed candidates key %q", key)
	}
	return listID{unesc(parts[0]), unesc(parts[1])}, schemas.Window(parts[2]), nil
}

// readCandidates returns the stored list, its capacity and its until hour.
func (s *Store) readCandidates(ctx context.Context, id listID, w schemas.Window) ([]schemas.ExactCount, int, time.Time, error) {
	r, err := s.tbl.ReadRow(ctx, candRow(id, w), latest)
	if err != nil {
		return nil, 0, time.Time{}, fmt.Errorf("store: read candidates: %w", err)
	}
	if len(r) == 0 {
		return nil, 0, time.Time{}, nil
	}
	limit, _, err := cellInt(r, famC, "cap")
	if err != nil {
		return nil, 0, time.Time{}, err
	}
	var until time.Time
	if v, ok := cell(r, famC, "until"); ok {
		if until, err = parseHour(string(v)); err != nil {
			return nil, 0, time.Time{}, fmt.Errorf("store: candidates until %q: %w", v, err)
		}
	}
	blob, _ := cell(r, famC, "blob")
	out, err := decodeList(blob, id)
	if err != nil {
		return nil, 0, time.Time{}, err
	}
	return out, int(limit), until, nil
}

// Candidates returns the exact top candidates of a long window (24h or all)
// in rank order (count descending, ties by item), the hour up to which they
// are exact (for 24h the end of the window they total; for all the store's
// exact_until: totals may also include hours recounted after a gap), and
// whether they are every item with a count in the window (the list is
// shorter than its capacity: TopOfHours and the all-time update keep that
// true), so an item outside them counts zero.
func (s *Store) Candidates(ctx context.Context, typ, scope string, window schemas.Window) (list []schemas.ExactCount, until time.Time, all bool, err error) {
	if window != schemas.Window24h && window != schemas.WindowAll {
		return nil, time.Time{}, false, fmt.Errorf("store: no exact candidates for window %q", window)
	}
	list, limit, until, err := s.readCandidates(ctx, listID{typ, scope}, window)
	if err != nil {
		return nil, time.Time{}, false, err
	}
	if window == schemas.WindowAll {
		if until, err = s.ExactUntil(ctx); err != nil {
			return nil, time.Time{}, false, err
		}
	}
	return list, until, len(list) < limit, nil
}

// updateAllCandidates writes the all-time candidates of a list after an hour
// moved some of its totals. best is the top limit of the totals the write
// touched (new values); touched holds the new totals of the old candidates
// that it touched. Totals of items outside the old candidates and not
// touched are at most the old list's smallest count, so the merge is the
// true top unless the old list was full and the new one's smallest count
// fell below that bound (a correction took counts out); then it rescans the
// list's totals.
func (s *Store) updateAllCandidates(ctx context.Context, id listID, old []schemas.ExactCount, oldCap int, oldUntil time.Time,
	best []schemas.ExactCount, touched map[string]int64, limit int, until time.Time) error {
	if oldUntil.After(until) { // a rerun of an older hour
		until = oldUntil
	}
	merged := make(map[string]int64, len(old)+len(best))
	for _, e := range old {
		if n, ok := touched[e.Item]; ok {
			merged[e.Item] = n
		} else {
			merged[e.Item] = e.Count
		}
	}
	for _, e := range best {
		merged[e.Item] = e.Count
	}
	top := topOf(merged, limit)
	full := oldCap > 0 && len(old) >= oldCap
	rescan := oldCap != limit && len(old) > 0
	if full && !rescan {
		bound := old[len(old)-1].Count
		if len(top) < limit || top[len(top)-1].Count < bound {
			rescan = true
		}
	}
	if rescan {
		c := newCollector(limit)
		prefix := "a#" + listPart(id)
		err := s.scan(ctx, prefix, func(r bigtable.Row) error {
			n, _, err := cellInt(r, famC, "n")
			if err != nil {
				return err
			}
			c.add(unesc(strings.TrimPrefix(r.Key(), prefix)), n)
			return nil
		}, totalFilter)
		if err != nil {
			return err
		}
		top = c.top()
	}
	if err := s.tbl.Apply(ctx, candRow(id, schemas.WindowAll), candMutation(top, limit, until)); err != nil {
		return fmt.Errorf("store: write all-time candidates: %w", err)
	}
	return nil
}
