// Package store owns topk's exact tables in Bigtable: the deduplicated hourly
// counts written by the exact recount (pipelines/exact), the 24-hour and
// all-time totals per item that the long windows point-read, the all-time
// ledger that makes reruns safe, the exact top candidates per long window,
// exact_until, and the fast path's grades. It has no Beam import.
//
// # Table and row keys
//
// One table, "exact", two column families, both garbage-collected to one
// version (every write here is a computed overwrite, never an increment):
//
//   - c: values. Counts are decimal ASCII ("3104"), hours are
//     "2006-01-02T15" (UTC), so `cbt read` output is readable as is.
//   - l: the all-time ledger, one column per hour (qualifier "2006-01-02T15").
//
// Row keys ('#' separates components; '%' and '#' inside an id are escaped as
// %25 and %23, so a prefix always ends on a component boundary):
//
//	h#{hour}#{type}#{scope}#{item}   c:n          the exact count of an item in one event hour
//	d#{type}#{scope}#{item}          c:n c:end    24-hour total over [end-24h, end) (rows of the last recompute only)
//	a#{type}#{scope}#{item}          c:n l:{hour} all-time total, and per hour the count applied to it
//	i#{hour}#{type}#{scope}#{item}   c:n          index of the items applied to all-time for an hour
//	c#{type}#{scope}#{window}        c:blob c:until c:cap   exact top candidates (window 24h or all)
//	w#{hour}                         c:at         the hour is fully recounted (hourly, 24h, all-time)
//	m#exact_until                    c:t          hours before this are exact
//	m#end_24h                        c:t          end of the 24-hour window the d# rows hold
//	g#{hour}#{type}#{scope}          c:json       grade of the fast path's 1h list ending at hour+1h
//
// Reads they serve:
//   - the counts of one hour: prefix scan h#{hour}#{type}#{scope}#. The hour
//     comes first so that overwriting an hour (delete the rows not in the new
//     set) and recomputing 24 hours are prefix scans of that hour only. The
//     hour-leading key is written once per hour by a batch job, so it does not
//     hotspot the way a streaming time-leading key would.
//   - an item's 24-hour or all-time total: point reads of d# / a# rows, many
//     items in one ReadRows.
//   - the candidates of a long window: one row, c#{type}#{scope}#{window},
//     holding the top 3K as "item<TAB>count" lines in rank order (ids never
//     contain tabs or newlines: schemas.Validator).
//
// # Why the ledger lives in the all-time row
//
// Applying an hour to all-time adds new - applied for each (item, hour),
// where applied is what the last run of that hour added. The total (c:n) and
// what was applied (l:{hour}) are cells of the same row, so one row mutation
// changes both atomically: a run that dies half way leaves every item either
// fully applied or untouched, and a rerun computes a zero difference for the
// items already applied. The i# index, written before any total moves, lists
// the items an hour was applied to, so a corrected hour that no longer has an
// item takes that item's count back out.
//
// There is one writer at a time (the exact pipeline recounts hours one after
// another); concurrent writers of the same hour are not supported.
package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/bttest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/topk-dev/topk/schemas"
)

// TableName is the one table of exact counts.
const TableName = "exact"

// Column families.
const (
	famC = "c"
	famL = "l"
)

// HourFormat is how hours appear in row keys and values.
const HourFormat = "2006-01-02T15"

// bulkRows is the number of row mutations per ApplyBulk call.
const bulkRows = 5000

// Store reads and writes the exact tables.
type Store struct {
	admin  *bigtable.AdminClient
	client *bigtable.Client
	tbl    *bigtable.Table
}

// Open connects to a Bigtable instance. When BIGTABLE_EMULATOR_HOST is set the
// client connects to that emulator without credentials.
func Open(ctx context.Context, project, instance string, opts ...option.ClientOption) (*Store, error) {
	admin, err := bigtable.NewAdminClient(ctx, project, instance, opts...)
	if err != nil {
		return nil, fmt.Errorf("bigtable admin client: %w", err)
	}
	client, err := bigtable.NewClient(ctx, project, instance, opts...)
	if err != nil {
		admin.Close()
		return nil, fmt.Errorf("bigtable client: %w", err)
	}
	return &Store{admin: admin, client: client, tbl: client.Open(TableName)}, nil
}

// Close closes the clients.
func (s *Store) Close() error {
	return errors.Join(s.client.Close(), s.admin.Close())
}

// Embedded starts bttest (the code behind the official emulator) in-process
// on a loopback port, accepting messages up to 256 MiB so large bulk writes
// pass. Connect with Open(ctx, p, i, EmulatorOptions(addr)...).
func Embedded() (addr string, stop func(), err error) {
	srv, err := bttest.NewServer("127.0.0.1:0", grpc.MaxRecvMsgSize(256<<20))
	if err != nil {
		return "", nil, fmt.Errorf("bttest: %w", err)
	}
	return srv.Addr, srv.Close, nil
}

// EmulatorOptions are the client options for an emulator at addr (what the
// client does by itself when BIGTABLE_EMULATOR_HOST is set).
func EmulatorOptions(addr string) []option.ClientOption {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, "8086")
	}
	return []option.ClientOption{
		option.WithEndpoint(addr),
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
	}
}

// EnsureTables creates the table and its column families if missing, with a
// GC policy of one version. It is safe to call on every start.
func (s *Store) EnsureTables(ctx context.Context) error {
	tables, err := s.admin.Tables(ctx)
	if err != nil {
		return fmt.Errorf("list tables: %w", err)
	}
	exists := false
	for _, t := range tables {
		if t == TableName {
			exists = true
		}
	}
	if !exists {
		if err := s.admin.CreateTable(ctx, TableName); err != nil && !strings.Contains(err.Error(), "AlreadyExists") {
			return fmt.Errorf("create table %s: %w", TableName, err)
		}
	}
	info, err := s.admin.TableInfo(ctx, TableName)
	if err != nil {
		return fmt.Errorf("table info %s: %w", TableName, err)
	}
	have := map[string]bool{}
	for _, f := range info.Families {
		have[f] = true
	}
	for _, f := range []string{famC, famL} {
		if !have[f] {
			if err := s.admin.CreateColumnFamily(ctx, TableName, f); err != nil && !strings.Contains(err.Error(), "AlreadyExists") {
				return fmt.Errorf("create family %s: %w", f, err)
			}
		}
		if err := s.admin.SetGCPolicy(ctx, TableName, f, bigtable.MaxVersionsPolicy(1)); err != nil {
			return fmt.Errorf("gc policy %s: %w", f, err)
		}
	}
	return nil
}

// ---- keys and values ----

var escaper = strings.NewReplacer("%", "%25", "#", "%23")
var unescaper = strings.NewReplacer("%25", "%", "%23", "#")

func esc(s string) string   { return escaper.Replace(s) }
func unesc(s string) string { return unescaper.Replace(s) }

// HourKey is an hour as written in keys and values.
func HourKey(t time.Time) string { return t.UTC().Format(HourFormat) }

func parseHour(s string) (time.Time, error) { return time.Parse(HourFormat, s) }

func checkHour(t time.Time) error {
	if t.IsZero() || !t.Equal(t.Truncate(time.Hour)) {
		return fmt.Errorf("store: %v is not a whole hour", t)
	}
	return nil
}

// listID identifies a list's (type, scope) in maps.
type listID struct{ typ, scope string }

// itemKey is (type, scope, item).
type itemKey struct {
	listID
	item string
}

func hourPrefix(hour time.Time) string { return "h#" + HourKey(hour) + "#" }

func hourListPrefix(hour time.Time, typ, scope string) string {
	return hourPrefix(hour) + esc(typ) + "#" + esc(scope) + "#"
}

func listPart(k listID) string { return esc(k.typ) + "#" + esc(k.scope) + "#" }

func hourRow(hour time.Time, k itemKey) string {
	return hourPrefix(hour) + listPart(k.listID) + esc(k.item)
}
func dayRow(k itemKey) string           { return "d#" + listPart(k.listID) + esc(k.item) }
func allRow(k itemKey) string           { return "a#" + listPart(k.listID) + esc(k.item) }
func indexPrefix(hour time.Time) string { return "i#" + HourKey(hour) + "#" }
func indexRow(hour time.Time, k itemKey) string {
	return indexPrefix(hour) + listPart(k.listID) + esc(k.item)
}
func candRow(k listID, w schemas.Window) string { return "c#" + listPart(k) + string(w) }
func doneRow(hour time.Time) string             { return "w#" + HourKey(hour) }

const (
	rowExactUntil = "m#exact_until"
	rowEnd24h     = "m#end_24h"
)

// splitKey parses "{type}#{scope}#{item}" (escaped) after a known prefix.
func splitKey(rest string) (itemKey, error) {
	parts := strings.SplitN(rest, "#", 3)
	if len(parts) != 3 {
		return itemKey{}, fmt.Errorf("store: malformed key part %q", rest)
	}
	return itemKey{listID{unesc(parts[0]), unesc(parts[1])}, unesc(parts[2])}, nil
}

func itoa(n int64) []byte { return strconv.AppendInt(nil, n, 10) }

// cell returns the value of family:col in r, and whether it is there.
func cell(r bigtable.Row, fam, col string) ([]byte, bool) {
	for _, it := range r[fam] {
		if it.Column == fam+":"+col {
			return it.Value, true
		}
	}
	return nil, false
}

func cellInt(r bigtable.Row, fam, col string) (int64, bool, error) {
	v, ok := cell(r, fam, col)
	if !ok {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("store: row %s %s:%s=%q: %w", r.Key(), fam, col, v, err)
	}
	return n, true, nil
}

var latest = bigtable.RowFilter(bigtable.LatestNFilter(1))

// ---- bulk writes ----

type bulk struct {
	s    *Store
	keys []string
	muts []*bigtable.Mutation
}

func (b *bulk) add(ctx context.Context, key string, m *bigtable.Mutation) error {
	b.keys = append(b.keys, key)
	b.muts = append(b.muts, m)
	if len(b.keys) >= bulkRows {
		return b.flush(ctx)
	}
	return nil
}

func (b *bulk) flush(ctx context.Context) error {
	if len(b.keys) == 0 {
		return nil
	}
	errs, err := b.s.tbl.ApplyBulk(ctx, b.keys, b.muts)
	if err != nil {
		return fmt.Errorf("store: apply bulk: %w", err)
	}
	for i, e := range errs {
		if e != nil {
			return fmt.Errorf("store: write %s: %w", b.keys[i], e)
		}
	}
	b.keys, b.muts = b.keys[:0], b.muts[:0]
	return nil
}

func setInt(m *bigtable.Mutation, fam, col string, n int64) {
	m.Set(fam, col, bigtable.ServerTime, itoa(n))
}

func deleteRow() *bigtable.Mutation {
	m := bigtable.NewMutation()
	m.DeleteRow()
	return m
}

// scan reads every row under prefix (latest cells only, plus extra filters).
func (s *Store) scan(ctx context.Context, prefix string, f func(bigtable.Row) error, filters ...bigtable.Filter) error {
	var ferr error
	flt := bigtable.LatestNFilter(1)
	if len(filters) > 0 {
		flt = bigtable.ChainFilters(append([]bigtable.Filter{flt}, filters...)...)
	}
	err := s.tbl.ReadRows(ctx, bigtable.PrefixRange(prefix), func(r bigtable.Row) bool {
		if ferr = f(r); ferr != nil {
			return false
		}
		return true
	}, bigtable.RowFilter(flt))
	if err != nil {
		return fmt.Errorf("store: scan %s: %w", prefix, err)
	}
	return ferr
}

// readRows point-reads keys (in batches), calling f for every row found.
func (s *Store) readRows(ctx context.Context, keys []string, f func(bigtable.Row) error, filters ...bigtable.Filter) error {
	flt := bigtable.LatestNFilter(1)
	if len(filters) > 0 {
		flt = bigtable.ChainFilters(append([]bigtable.Filter{flt}, filters...)...)
	}
	for len(keys) > 0 {
		n := min(len(keys), bulkRows)
		var ferr error
		err := s.tbl.ReadRows(ctx, bigtable.RowList(keys[:n]), func(r bigtable.Row) bool {
			if ferr = f(r); ferr != nil {
				return false
			}
			return true
		}, bigtable.RowFilter(flt))
		if err != nil {
			return fmt.Errorf("store: read rows: %w", err)
		}
		if ferr != nil {
			return ferr
		}
		keys = keys[n:]
	}
	return nil
}

// ---- hourly counts ----

// WriteHour replaces the hour's exact counts with counts: rows of the hour
// not in counts are deleted, so a rerun leaves exactly the new set. Counts of
// zero are not stored; every count's Hour must be hour (or zero).
func (s *Store) WriteHour(ctx context.Context, hour time.Time, counts []schemas.ExactCount) error {
	if err := checkHour(hour); err != nil {
		return err
	}
	next, err := collect(hour, counts)
	if err != nil {
		return err
	}
	b := &bulk{s: s}
	// Delete the rows no longer there (keys only: strip values).
	err = s.scan(ctx, hourPrefix(hour), func(r bigtable.Row) error {
		k, err := splitKey(strings.TrimPrefix(r.Key(), hourPrefix(hour)))
		if err != nil {
			return err
		}
		if next[k] == 0 {
			return b.add(ctx, r.Key(), deleteRow())
		}
		return nil
	}, bigtable.CellsPerRowLimitFilter(1), bigtable.StripValueFilter())
	if err != nil {
		return err
	}
	for _, k := range sortedKeys(next) {
		m := bigtable.NewMutation()
		setInt(m, famC, "n", next[k])
		if err := b.add(ctx, hourRow(hour, k), m); err != nil {
			return err
		}
	}
	return b.flush(ctx)
}

// collect sums counts by (type, scope, item), dropping zeros.
func collect(hour time.Time, counts []schemas.ExactCount) (map[itemKey]int64, error) {
	out := make(map[itemKey]int64, len(counts))
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
		out[itemKey{listID{c.Type, c.Scope}, c.Item}] += c.Count
	}
	for k, n := range out {
		if n == 0 {
			delete(out, k)
		}
	}
	return out, nil
}

func sortedKeys(m map[itemKey]int64) []itemKey {
	ks := make([]itemKey, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		a, b := ks[i], ks[j]
		if a.typ != b.typ {
			return a.typ < b.typ
		}
		if a.scope != b.scope {
			return a.scope < b.scope
		}
		return a.item < b.item
	})
	return ks
}

// HourCounts returns the exact counts of one (type, scope) in one hour,
// ordered by item.
func (s *Store) HourCounts(ctx context.Context, hour time.Time, typ, scope string) ([]schemas.ExactCount, error) {
	var out []schemas.ExactCount
	err := s.hourScan(ctx, hour, hourListPrefix(hour, typ, scope), func(k itemKey, n int64) {
		out = append(out, schemas.ExactCount{Hour: hour.UTC(), Type: k.typ, Scope: k.scope, Item: k.item, Count: n})
	})
	return out, err
}

// AllHourCounts returns every exact count of an hour, ordered by (type,
// scope, item).
func (s *Store) AllHourCounts(ctx context.Context, hour time.Time) ([]schemas.ExactCount, error) {
	var out []schemas.ExactCount
	err := s.hourScan(ctx, hour, hourPrefix(hour), func(k itemKey, n int64) {
		out = append(out, schemas.ExactCount{Hour: hour.UTC(), Type: k.typ, Scope: k.scope, Item: k.item, Count: n})
	})
	return out, err
}

func (s *Store) hourScan(ctx context.Context, hour time.Time, prefix string, f func(itemKey, int64)) error {
	hp := hourPrefix(hour)
	return s.scan(ctx, prefix, func(r bigtable.Row) error {
		k, err := splitKey(strings.TrimPrefix(r.Key(), hp))
		if err != nil {
			return err
		}
		n, _, err := cellInt(r, famC, "n")
		if err != nil {
			return err
		}
		f(k, n)
		return nil
	})
}

// ---- 24 hours ----

// Recompute24h recomputes the 24-hour totals for the window [end-24h, end)
// from its 24 hourly partitions (no running subtraction, so a corrected hour
// is picked up by the next recompute), writes them as d# rows with their end,
// deletes the d# rows of items no longer in the window, and writes the top 3k
// candidates of every (type, scope) for window 24h. Recomputing the same end
// after a corrected hour picks up the correction. The store holds one
// 24-hour window, the last one recomputed.
func (s *Store) Recompute24h(ctx context.Context, end time.Time, k int) error {
	if err := checkHour(end); err != nil {
		return err
	}
	totals, err := s.sumHours(ctx, end.Add(-24*time.Hour), end)
	if err != nil {
		return err
	}
	b := &bulk{s: s}
	endV := []byte(HourKey(end))
	for _, key := range sortedKeys(totals) {
		m := bigtable.NewMutation()
		setInt(m, famC, "n", totals[key])
		m.Set(famC, "end", bigtable.ServerTime, endV)
		if err := b.add(ctx, dayRow(key), m); err != nil {
			return err
		}
	}
	// Rows of items no longer in the window (a dropped tail hour, or a
	// corrected hour that lost them): delete. This scan of the d# keys costs
	// the same order as the rewrite above, and it is what makes a recompute
	// of the same end after a correction exact.
	err = s.scan(ctx, "d#", func(r bigtable.Row) error {
		key, err := splitKey(strings.TrimPrefix(r.Key(), "d#"))
		if err != nil {
			return err
		}
		if _, ok := totals[key]; !ok {
			return b.add(ctx, r.Key(), deleteRow())
		}
		return nil
	}, bigtable.CellsPerRowLimitFilter(1), bigtable.StripValueFilter())
	if err != nil {
		return err
	}
	if err := b.flush(ctx); err != nil {
		return err
	}
	// Candidates per list; lists that had 24h candidates but are gone get an
	// empty list.
	byList := map[listID]map[string]int64{}
	for key, n := range totals {
		m := byList[key.listID]
		if m == nil {
			m = map[string]int64{}
			byList[key.listID] = m
		}
		m[key.item] = n
	}
	err = s.scan(ctx, "c#", func(r bigtable.Row) error {
		id, w, err := parseCandRow(r.Key())
		if err != nil {
			return err
		}
		if w == schemas.Window24h && byList[id] == nil {
			byList[id] = map[string]int64{}
		}
		return nil
	}, bigtable.CellsPerRowLimitFilter(1), bigtable.StripValueFilter())
	if err != nil {
		return err
	}
	for id, m := range byList {
		if err := b.add(ctx, candRow(id, schemas.Window24h), candMutation(topOf(m, 3*k), 3*k, end)); err != nil {
			return err
		}
	}
	if err := b.flush(ctx); err != nil {
		return err
	}
	return s.writeTime(ctx, rowEnd24h, end)
}

// sumHours adds the hourly counts of [from, to).
func (s *Store) sumHours(ctx context.Context, from, to time.Time) (map[itemKey]int64, error) {
	totals := map[itemKey]int64{}
	for h := from; h.Before(to); h = h.Add(time.Hour) {
		if err := s.hourScan(ctx, h, hourPrefix(h), func(k itemKey, n int64) { totals[k] += n }); err != nil {
			return nil, err
		}
	}
	for k, n := range totals {
		if n == 0 {
			delete(totals, k)
		}
	}
	return totals, nil
}

// End24h is the end of the 24-hour window the store holds (zero if none).
func (s *Store) End24h(ctx context.Context) (time.Time, error) { return s.readTime(ctx, rowEnd24h) }

// ---- all time ----

// ApplyAllTime applies an hour's exact counts to the all-time totals: for
// every (type, scope, item) in counts or previously applied for this hour,
// the total moves by new - applied, and applied becomes new, in one row
// mutation. A rerun of the same counts changes nothing; a corrected hour
// moves totals by the correction only. Then it updates the all-time top 3k
// candidates of every list the hour touches.
func (s *Store) ApplyAllTime(ctx context.Context, hour time.Time, counts []schemas.ExactCount, k int) error {
	if err := checkHour(hour); err != nil {
		return err
	}
	next, err := collect(hour, counts)
	if err != nil {
		return err
	}
	// 1. Index first: every item whose total may move is listed under the
	// hour before any total moves, so a rerun after a crash finds it.
	union := map[itemKey]int64{}
	for key, n := range next {
		union[key] = n
	}
	ip := indexPrefix(hour)
	err = s.scan(ctx, ip, func(r bigtable.Row) error {
		key, err := splitKey(strings.TrimPrefix(r.Key(), ip))
		if err != nil {
			return err
		}
		if _, ok := union[key]; !ok {
			union[key] = 0
		}
		return nil
	}, bigtable.CellsPerRowLimitFilter(1), bigtable.StripValueFilter())
	if err != nil {
		return err
	}
	b := &bulk{s: s}
	keys := sortedKeys(union)
	for _, key := range keys {
		if n := union[key]; n > 0 {
			m := bigtable.NewMutation()
			setInt(m, famC, "n", n)
			if err := b.add(ctx, indexRow(hour, key), m); err != nil {
				return err
			}
		}
	}
	if err := b.flush(ctx); err != nil {
		return err
	}
	// 2. Read total and applied for the hour, write both in one mutation.
	hk := HourKey(hour)
	rowKeys := make([]string, len(keys))
	byRow := make(map[string]itemKey, len(keys))
	for i, key := range keys {
		rowKeys[i] = allRow(key)
		byRow[rowKeys[i]] = key
	}
	type state struct{ total, applied int64 }
	cur := make(map[itemKey]state, len(keys))
	err = s.readRows(ctx, rowKeys, func(r bigtable.Row) error {
		total, _, err := cellInt(r, famC, "n")
		if err != nil {
			return err
		}
		applied, _, err := cellInt(r, famL, hk)
		if err != nil {
			return err
		}
		cur[byRow[r.Key()]] = state{total, applied}
		return nil
	}, bigtable.ColumnFilter("^(n|"+hk+")$"))
	if err != nil {
		return err
	}
	newTotals := make(map[itemKey]int64, len(keys))
	for _, key := range keys {
		st, n := cur[key], union[key]
		total := st.total + n - st.applied
		if total < 0 {
			return fmt.Errorf("store: all-time total of %s/%s/%s would be %d", key.typ, key.scope, key.item, total)
		}
		newTotals[key] = total
		if n == st.applied {
			continue
		}
		m := bigtable.NewMutation()
		setInt(m, famC, "n", total)
		if n > 0 {
			setInt(m, famL, hk, n)
		} else {
			m.DeleteCellsInColumn(famL, hk)
		}
		if err := b.add(ctx, allRow(key), m); err != nil {
			return err
		}
	}
	if err := b.flush(ctx); err != nil {
		return err
	}
	// 3. Index rows of items the hour no longer has.
	for _, key := range keys {
		if union[key] == 0 {
			if err := b.add(ctx, indexRow(hour, key), deleteRow()); err != nil {
				return err
			}
		}
	}
	if err := b.flush(ctx); err != nil {
		return err
	}
	// 4. Candidates of every list touched.
	byList := map[listID]map[string]int64{}
	for key, n := range newTotals {
		m := byList[key.listID]
		if m == nil {
			m = map[string]int64{}
			byList[key.listID] = m
		}
		m[key.item] = n
	}
	for id, changed := range byList {
		if err := s.updateAllCandidates(ctx, id, changed, 3*k, hour.Add(time.Hour)); err != nil {
			return err
		}
	}
	return nil
}

// updateAllCandidates merges the changed totals into the list's all-time
// candidates. Totals of items outside the old candidates and not changed are
// at most the old list's smallest count, so the merge is the true top unless
// the old list was full and the new one's smallest count fell below that
// bound (a correction took counts out); then it rescans the list's totals.
func (s *Store) updateAllCandidates(ctx context.Context, id listID, changed map[string]int64, limit int, until time.Time) error {
	old, oldCap, oldUntil, err := s.readCandidates(ctx, id, schemas.WindowAll)
	if err != nil {
		return err
	}
	if oldUntil.After(until) { // a rerun of an older hour
		until = oldUntil
	}
	merged := make(map[string]int64, len(old)+len(changed))
	for _, e := range old {
		merged[e.Item] = e.Count
	}
	for item, n := range changed {
		merged[item] = n
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
		all := map[string]int64{}
		prefix := "a#" + listPart(id)
		err := s.scan(ctx, prefix, func(r bigtable.Row) error {
			n, _, err := cellInt(r, famC, "n")
			if err != nil {
				return err
			}
			all[unesc(strings.TrimPrefix(r.Key(), prefix))] = n
			return nil
		}, bigtable.FamilyFilter("^c$"), bigtable.ColumnFilter("^n$"))
		if err != nil {
			return err
		}
		top = topOf(all, limit)
	}
	return s.tbl.Apply(ctx, candRow(id, schemas.WindowAll), candMutation(top, limit, until))
}

// ---- candidates ----

// topOf returns the limit largest counts (ties by item), dropping zeros.
func topOf(m map[string]int64, limit int) []schemas.ExactCount {
	out := make([]schemas.ExactCount, 0, len(m))
	for item, n := range m {
		if n > 0 {
			out = append(out, schemas.ExactCount{Item: item, Count: n})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Item < out[j].Item
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

func candMutation(top []schemas.ExactCount, limit int, until time.Time) *bigtable.Mutation {
	var sb strings.Builder
	for _, e := range top {
		sb.WriteString(e.Item)
		sb.WriteByte('\t')
		sb.WriteString(strconv.FormatInt(e.Count, 10))
		sb.WriteByte('\n')
	}
	m := bigtable.NewMutation()
	m.Set(famC, "blob", bigtable.ServerTime, []byte(sb.String()))
	m.Set(famC, "until", bigtable.ServerTime, []byte(HourKey(until)))
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
	var out []schemas.ExactCount
	for line := range strings.SplitSeq(strings.TrimSuffix(string(blob), "\n"), "\n") {
		if line == "" {
			continue
		}
		item, n, ok := strings.Cut(line, "\t")
		c, err := strconv.ParseInt(n, 10, 64)
		if !ok || err != nil {
			return nil, 0, time.Time{}, fmt.Errorf("store: malformed candidates line %q", line)
		}
		out = append(out, schemas.ExactCount{Type: id.typ, Scope: id.scope, Item: item, Count: c})
	}
	return out, int(limit), until, nil
}

// Candidates returns the exact top candidates of a long window (24h or all)
// in rank order (count descending, ties by item), and the hour up to which
// they are exact: for 24h the end of the window they total; for all the
// store's exact_until (totals may also include hours recounted after a gap).
func (s *Store) Candidates(ctx context.Context, typ, scope string, window schemas.Window) ([]schemas.ExactCount, time.Time, error) {
	if window != schemas.Window24h && window != schemas.WindowAll {
		return nil, time.Time{}, fmt.Errorf("store: no exact candidates for window %q", window)
	}
	list, _, until, err := s.readCandidates(ctx, listID{typ, scope}, window)
	if err != nil {
		return nil, time.Time{}, err
	}
	if window == schemas.WindowAll {
		if until, err = s.ExactUntil(ctx); err != nil {
			return nil, time.Time{}, err
		}
	}
	return list, until, nil
}

// Totals point-reads the exact totals of items in a long window: the 24-hour
// totals of the window the store holds (End24h), or the all-time totals.
// Items without a count are absent from the map.
func (s *Store) Totals(ctx context.Context, typ, scope string, window schemas.Window, items []string) (map[string]int64, error) {
	var rowOf func(itemKey) string
	var end []byte
	switch window {
	case schemas.Window24h:
		rowOf = dayRow
		e, err := s.End24h(ctx)
		if err != nil {
			return nil, err
		}
		if e.IsZero() {
			return map[string]int64{}, nil
		}
		end = []byte(HourKey(e))
	case schemas.WindowAll:
		rowOf = allRow
	default:
		return nil, fmt.Errorf("store: no exact totals for window %q", window)
	}
	keys := make([]string, len(items))
	byRow := make(map[string]string, len(items))
	for i, it := range items {
		keys[i] = rowOf(itemKey{listID{typ, scope}, it})
		byRow[keys[i]] = it
	}
	out := make(map[string]int64, len(items))
	err := s.readRows(ctx, keys, func(r bigtable.Row) error {
		if end != nil {
			if v, _ := cell(r, famC, "end"); string(v) != string(end) {
				return nil
			}
		}
		n, ok, err := cellInt(r, famC, "n")
		if err != nil {
			return err
		}
		if ok && n > 0 {
			out[byRow[r.Key()]] = n
		}
		return nil
	}, bigtable.FamilyFilter("^c$"))
	return out, err
}

// ---- exact_until, done hours ----

func (s *Store) readTime(ctx context.Context, row string) (time.Time, error) {
	r, err := s.tbl.ReadRow(ctx, row, latest)
	if err != nil {
		return time.Time{}, fmt.Errorf("store: read %s: %w", row, err)
	}
	v, ok := cell(r, famC, "t")
	if !ok {
		return time.Time{}, nil
	}
	t, err := parseHour(string(v))
	if err != nil {
		return time.Time{}, fmt.Errorf("store: %s=%q: %w", row, v, err)
	}
	return t, nil
}

func (s *Store) writeTime(ctx context.Context, row string, t time.Time) error {
	m := bigtable.NewMutation()
	m.Set(famC, "t", bigtable.ServerTime, []byte(HourKey(t)))
	if err := s.tbl.Apply(ctx, row, m); err != nil {
		return fmt.Errorf("store: write %s: %w", row, err)
	}
	return nil
}

// SetExactUntil records that every hour before t is exactly recounted.
func (s *Store) SetExactUntil(ctx context.Context, t time.Time) error {
	if err := checkHour(t); err != nil {
		return err
	}
	return s.writeTime(ctx, rowExactUntil, t)
}

// ExactUntil is the hour before which counts are exact (zero if none).
func (s *Store) ExactUntil(ctx context.Context) (time.Time, error) {
	return s.readTime(ctx, rowExactUntil)
}

// MarkHourDone records that an hour is fully recounted: hourly counts
// written, 24h recomputed and applied to all time.
func (s *Store) MarkHourDone(ctx context.Context, hour time.Time) error {
	if err := checkHour(hour); err != nil {
		return err
	}
	m := bigtable.NewMutation()
	m.Set(famC, "at", bigtable.ServerTime, []byte(time.Now().UTC().Format(time.RFC3339)))
	if err := s.tbl.Apply(ctx, doneRow(hour), m); err != nil {
		return fmt.Errorf("store: mark %s done: %w", HourKey(hour), err)
	}
	return nil
}

// DoneHours lists the hours marked done, in order.
func (s *Store) DoneHours(ctx context.Context) ([]time.Time, error) {
	var out []time.Time
	err := s.scan(ctx, "w#", func(r bigtable.Row) error {
		t, err := parseHour(strings.TrimPrefix(r.Key(), "w#"))
		if err != nil {
			return fmt.Errorf("store: done row %q: %w", r.Key(), err)
		}
		out = append(out, t)
		return nil
	}, bigtable.CellsPerRowLimitFilter(1), bigtable.StripValueFilter())
	return out, err
}

// AdvanceExactUntil moves exact_until over the done hours that follow it
// without a gap (starting from the first done hour when it is unset) and
// returns the new value. It never moves exact_until back.
func (s *Store) AdvanceExactUntil(ctx context.Context) (time.Time, error) {
	eu, err := s.ExactUntil(ctx)
	if err != nil {
		return time.Time{}, err
	}
	done, err := s.DoneHours(ctx)
	if err != nil {
		return time.Time{}, err
	}
	next := eu
	for _, h := range done {
		if next.IsZero() {
			next = h
		}
		if h.Before(next) {
			continue
		}
		if !h.Equal(next) {
			break
		}
		next = h.Add(time.Hour)
	}
	if next.After(eu) {
		if err := s.SetExactUntil(ctx, next); err != nil {
			return time.Time{}, err
		}
		return next, nil
	}
	return eu, nil
}
