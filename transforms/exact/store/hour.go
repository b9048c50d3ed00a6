package store

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/topk-dev/topk/schemas"
)

// TopDepthFactor sets how deep an hour's t# row is: an hour written for list
// depth k keeps the top TopDepthFactor*k items of each list (10,000 for
// k = 1,000). TopOfHours answers from these rows alone unless a window's
// top needs items that no single hour ranks that deep.
const TopDepthFactor = 10

// entry is one (type, scope, item) and its count in an hour.
type entry struct {
	key itemKey
	n   int64
}

func keyCmp(a, b itemKey) int {
	if c := strings.Compare(a.typ, b.typ); c != 0 {
		return c
	}
	if c := strings.Compare(a.scope, b.scope); c != 0 {
		return c
	}
	return strings.Compare(a.item, b.item)
}

// prepare checks counts, sums repeated (type, scope, item)s and returns them
// sorted by key without zeros.
func prepare(hour time.Time, counts []schemas.ExactCount) ([]entry, error) {
	out := make([]entry, 0, len(counts))
	for _, c := range counts {
		if !c.Hour.IsZero() && !c.Hour.Equal(hour) {
			return nil, fmt.Errorf("store: count for hour %s in hour %s", HourKey(c.Hour), HourKey(hour))
		}
		if c.Count < 0 {
			return nil, fmt.Errorf("store: negative count %d for %s/%s/%s", c.Count, c.Type, c.Scope, c.Item)
		}
		if c.Type == "" || c.Scope == "" || c.Item == "" {
			return nil, fmt.Errorf("store: count with empty type, scope or item: %+v", c)
		}
		if strings.ContainsAny(c.Type+c.Scope+c.Item, "\t\n") {
			return nil, fmt.Errorf("store: tab or newline in %q/%q/%q", c.Type, c.Scope, c.Item)
		}
		out = append(out, entry{itemKey{listID{c.Type, c.Scope}, c.Item}, c.Count})
	}
	slices.SortFunc(out, func(a, b entry) int { return keyCmp(a.key, b.key) })
	w := 0
	for _, e := range out {
		if w > 0 && out[w-1].key == e.key {
			out[w-1].n += e.n
			continue
		}
		out[w] = e
		w++
	}
	out = out[:w]
	w = 0
	for _, e := range out {
		if e.n > 0 {
			out[w] = e
			w++
		}
	}
	return out[:w], nil
}

// union merges sorted entries with sorted keys; keys not in next get n = 0.
func union(next []entry, old []itemKey) []entry {
	out := make([]entry, 0, max(len(next), len(old)))
	i, j := 0, 0
	for i < len(next) || j < len(old) {
		switch {
		case j == len(old) || (i < len(next) && keyCmp(next[i].key, old[j]) < 0):
			out = append(out, next[i])
			i++
		case i == len(next) || keyCmp(old[j], next[i].key) < 0:
			out = append(out, entry{key: old[j]})
			j++
		default:
			out = append(out, next[i])
			i++
			j++
		}
	}
	return out
}

// ---- index ----

// indexBuckets is the number of index rows of an hour (at most): a key's
// row is fixed by its hash, so rewriting the index with a superset of a
// row's keys never loses a key, even if the rewrite stops half way. 256
// rows hold ~40,000 keys (~1.5 MB) each at 10M keys an hour.
const indexBuckets = 256

func indexBucket(k itemKey) int {
	h := fnv.New32a()
	h.Write([]byte(k.typ))
	h.Write([]byte{0})
	h.Write([]byte(k.scope))
	h.Write([]byte{0})
	h.Write([]byte(k.item))
	return int(h.Sum32() % indexBuckets)
}

// readIndex returns every key of the hour's index, sorted and unique.
func (s *Store) readIndex(ctx context.Context, hour time.Time) ([]itemKey, error) {
	var keys []itemKey
	err := s.scan(ctx, indexPrefix(hour), func(r bigtable.Row) error {
		blob, _ := cell(r, famC, "blob")
		for line := range strings.SplitSeq(strings.TrimSuffix(string(blob), "\n"), "\n") {
			parts := strings.SplitN(line, "\t", 3)
			if len(parts) != 3 {
				return fmt.Errorf("store: malformed index line %q in %s", line, r.Key())
			}
			keys = append(keys, itemKey{listID{parts[0], parts[1]}, parts[2]})
		}
		return nil
	})
	slices.SortFunc(keys, keyCmp)
	return slices.Compact(keys), err
}

// writeIndex makes the hour's index the keys of entries: every bucket row
// is overwritten with its keys, or deleted when it has none.
func (s *Store) writeIndex(ctx context.Context, hour time.Time, entries []entry) error {
	blobs := make([][]byte, indexBuckets)
	for _, e := range entries {
		i := indexBucket(e.key)
		b := append(blobs[i], e.key.typ...)
		b = append(b, '\t')
		b = append(b, e.key.scope...)
		b = append(b, '\t')
		b = append(b, e.key.item...)
		blobs[i] = append(b, '\n')
	}
	b := &bulk{s: s}
	for i, blob := range blobs {
		m := deleteRow()
		if len(blob) > 0 {
			m = bigtable.NewMutation()
			m.Set(famC, "blob", cellTS, blob)
		}
		if err := b.add(ctx, indexRow(hour, i), m); err != nil {
			return err
		}
	}
	return b.flush(ctx)
}

// ---- writing an hour ----

// WriteHour replaces the hour's exact counts with counts, for list depth k:
//
//  1. the index of the hour becomes old set ∪ new set;
//  2. list by list, every item of that union gets l:{hour} = its new count
//     (deleted when zero) and its all-time total moved by new - old, in one
//     row mutation; the list's t# row gets its new top TopDepthFactor*k; its
//     all-time candidates (top 3k) are updated;
//  3. the index becomes the new set.
//
// A rerun of the same counts changes nothing; a corrected hour moves totals
// by the correction only, including items it no longer has. Counts of zero
// are not stored; every count's Hour must be hour (or zero). Recompute24h
// must follow for the 24h candidates.
func (s *Store) WriteHour(ctx context.Context, hour time.Time, counts []schemas.ExactCount, k int) error {
	if err := checkHour(hour); err != nil {
		return err
	}
	if k <= 0 {
		return fmt.Errorf("store: list depth k = %d", k)
	}
	next, err := prepare(hour, counts)
	if err != nil {
		return err
	}
	old, err := s.readIndex(ctx, hour)
	if err != nil {
		return err
	}
	all := union(next, old)
	old = nil
	if err := s.writeIndex(ctx, hour, all); err != nil {
		return err
	}
	for lo := 0; lo < len(all); {
		hi := lo + 1
		for hi < len(all) && all[hi].key.listID == all[lo].key.listID {
			hi++
		}
		if err := s.writeList(ctx, hour, all[lo:hi], TopDepthFactor*k, 3*k); err != nil {
			return err
		}
		lo = hi
	}
	return s.writeIndex(ctx, hour, next)
}

// writeList writes one list's part of an hour: seg is sorted by item and
// holds every item of the list the hour had or has.
func (s *Store) writeList(ctx context.Context, hour time.Time, seg []entry, depth, limit int) error {
	id := seg[0].key.listID
	hk := HourKey(hour)
	old, oldCap, oldUntil, err := s.readCandidates(ctx, id, schemas.WindowAll)
	if err != nil {
		return err
	}
	isOld := make(map[string]bool, len(old))
	for _, e := range old {
		isOld[e.Item] = true
	}
	hourTop, best := newCollector(depth), newCollector(limit)
	var hourTotal int64 // the list's events in the hour (trend baselines)
	touched := map[string]int64{}
	b := &bulk{s: s}
	type state struct{ total, cell int64 }
	for lo := 0; lo < len(seg); lo += bulkRows {
		batch := seg[lo:min(lo+bulkRows, len(seg))]
		keys := make([]string, len(batch))
		at := make(map[string]int, len(batch))
		for i, e := range batch {
			keys[i] = itemRow(e.key)
			at[keys[i]] = i
		}
		cur := make([]state, len(batch))
		err := s.readRows(ctx, keys, func(r bigtable.Row) error {
			total, _, err := cellInt(r, famC, "n")
			if err != nil {
				return err
			}
			c, _, err := cellInt(r, famL, hk)
			if err != nil {
				return err
			}
			cur[at[r.Key()]] = state{total, c}
			return nil
		}, bigtable.InterleaveFilters(totalFilter, columnFilter(famL, hk)))
		if err != nil {
			return err
		}
		for i, e := range batch {
			st := cur[i]
			total := st.total + e.n - st.cell
			if total < 0 {
				return fmt.Errorf("store: all-time total of %s/%s/%s would be %d", id.typ, id.scope, e.key.item, total)
			}
			hourTop.add(e.key.item, e.n)
			hourTotal += e.n
			best.add(e.key.item, total)
			if isOld[e.key.item] {
				touched[e.key.item] = total
			}
			if e.n == st.cell {
				continue
			}
			var m *bigtable.Mutation
			switch {
			case total == 0: // every hour's cell is zero: nothing to keep
				m = deleteRow()
			case e.n > 0:
				m = bigtable.NewMutation()
				setInt(m, famC, "n", total)
				setInt(m, famL, hk, e.n)
			default:
				m = bigtable.NewMutation()
				setInt(m, famC, "n", total)
				m.DeleteCellsInColumn(famL, hk)
			}
			if err := b.add(ctx, keys[i], m); err != nil {
				return err
			}
		}
		if err := b.flush(ctx); err != nil {
			return err
		}
	}
	if top := hourTop.top(); len(top) > 0 {
		m := bigtable.NewMutation()
		m.Set(famC, "blob", cellTS, encodeList(top))
		setInt(m, famC, "rest", hourTop.rest)
		setInt(m, famC, "total", hourTotal)
		err = s.tbl.Apply(ctx, topRow(hour, id), m)
	} else {
		err = s.tbl.Apply(ctx, topRow(hour, id), deleteRow())
	}
	if err != nil {
		return fmt.Errorf("store: write hour top %s: %w", topRow(hour, id), err)
	}
	return s.updateAllCandidates(ctx, id, old, oldCap, oldUntil, best.top(), touched, limit, hour.Add(time.Hour))
}

// ---- reading hours ----

// HourCounts point-reads the exact counts of items of one list in one hour.
// Items without a count are absent from the map.
func (s *Store) HourCounts(ctx context.Context, hour time.Time, typ, scope string, items []string) (map[string]int64, error) {
	if err := checkHour(hour); err != nil {
		return nil, err
	}
	return s.sumCells(ctx, listID{typ, scope}, items, []time.Time{hour})
}

// HourTop returns the top of one list in one hour as written (at most
// TopDepthFactor*k items, rank order) and rest, the largest count of an item
// not in it (0 when it holds every item of the hour).
func (s *Store) HourTop(ctx context.Context, hour time.Time, typ, scope string) ([]schemas.ExactCount, int64, error) {
	id := listID{typ, scope}
	r, err := s.tbl.ReadRow(ctx, topRow(hour, id), latest)
	if err != nil {
		return nil, 0, fmt.Errorf("store: read hour top: %w", err)
	}
	return parseTop(r, id, hour)
}

func parseTop(r bigtable.Row, id listID, hour time.Time) ([]schemas.ExactCount, int64, error) {
	rest, _, err := cellInt(r, famC, "rest")
	if err != nil {
		return nil, 0, err
	}
	blob, _ := cell(r, famC, "blob")
	top, err := decodeList(blob, id)
	for i := range top {
		top[i].Hour = hour
	}
	return top, rest, err
}
