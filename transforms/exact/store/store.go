// Package store owns topk's exact tables in Bigtable: the deduplicated hourly
// counts written by the exact recount (pipelines/exact), the 24-hour and
// all-time totals per item that the long windows point-read, the all-time
// ledger that makes reruns safe, the exact top candidates per long window,
// exact_until, and the fast path's grades. It has no Beam import.
//
// # Table and row keys
//
// One table, "exact", two column families. Every write here is a computed
// overwrite, never an increment, and every cell is written at timestamp 0
// (cellTS), so an overwrite replaces the cell in place and no cell ever has
// a second version: the families need no garbage-collection policy. (With
// one, bttest walks every row of the table each second; at 3M rows that was
// a third of the emulator's CPU.)
//
//   - c: values. Counts are decimal ASCII ("3104"), hours are
//     "2006-01-02T15" (UTC), so `cbt read` output is readable as is.
//   - l: hourly counts, one column per hour (qualifier "2006-01-02T15").
//
// Row keys ('#' separates components; '%' and '#' inside an id are escaped as
// %25 and %23, so a prefix always ends on a component boundary):
//
//	a#{type}#{scope}#{item}          c:n l:{hour}...  all-time total; l:{hour} = exact count in that hour
//	t#{hour}#{type}#{scope}#         c:blob c:rest c:total  the hour's top items of the list, rank order; rest = largest count not in it; total = the list's events in the hour
//	x#{hour}#{bucket}                c:blob           index: every (type, scope, item) the hour has a count for
//	c#{type}#{scope}#{window}        c:blob c:until c:cap   exact top candidates (window 24h or all)
//	w#{hour}                         c:at             the hour is fully recounted (hourly, 24h, all-time)
//	m#exact_until                    c:t              hours before this are exact
//	m#end_24h                        c:t              end of the 24-hour window the 24h candidates total
//	g#{hour}#{type}#{scope}          c:json           grade of the fast path's 1h list ending at hour+1h
//	r#{type}#{item}                  c:json           a removed item (takedown): the durable deny set, Redis is its cache
//
// Blobs are lines: "item<TAB>count" for lists, "type<TAB>scope<TAB>item" for
// the index (ids never contain tabs or newlines: schemas.Validator).
//
// # One row per item
//
// An hour of 20M events has ~10M (type, scope, item) counts, almost all of
// them the Zipf tail seen once or twice. Each has exactly one row, a#, for
// all its hours: the hourly count of (item, hour) is the cell l:{hour}, the
// all-time total is c:n, and the 24-hour total of a window is the sum of the
// window's 24 l: cells, read with a column-range filter in the same point
// read. Nothing per item is written twice, and no per-item 24-hour rows are
// rewritten when the window moves (an earlier layout did, with four row
// families per item; it did not fit an emulator's memory at 5M events).
//
// Reads they serve:
//   - an item's hourly count, 24-hour or all-time total: point reads of a#
//     rows, many items in one ReadRows (store.Totals, store.HourCounts).
//   - the top of a long window: one row, c#{type}#{scope}#{window}, holding
//     the top 3K in rank order (store.Candidates).
//   - the top of any set of hours (the 24h candidates, a daily chart):
//     store.TopOfHours, from the hours' t# rows and point reads of a# rows.
//     An item outside every hour's t# top has a total of at most the sum of
//     the hours' rest; when the K-th best total of the items in the tops is
//     above that sum, those items hold the exact top K. Otherwise (rare: it
//     needs a top that no single hour's top 10K shows) it scans the list's a#
//     rows.
//
// # Reruns and the ledger
//
// Writing an hour moves each item's total by new - old, where old is the
// item's l:{hour} cell. Total and cell are in the same row, so one row
// mutation changes both atomically: a run that dies half way leaves every
// item either fully written or untouched, and a rerun computes a zero
// difference for the items already written. The index lists, before any
// total moves, every item the hour may have a cell for (the union of the old
// and the new set; a key's index row is fixed by its hash, so a rewrite that
// stops half way leaves each row old or a superset of old), so a corrected
// hour that no longer has an item takes that item's count back out, even
// after a crash.
//
// There is one writer at a time (the exact pipeline recounts hours one after
// another); concurrent writers of the same hour are not supported.
package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
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

	topScans atomic.Int64 // TopOfHours answers that needed the scan
}

// Open connects to a Bigtable instance. When BIGTABLE_EMULATOR_HOST is set the
// client connects to that emulator without credentials; with
// EmulatorOptions, to that emulator. Against an emulator the client's
// built-in Cloud Monitoring metrics are off (they would only fail to export).
func Open(ctx context.Context, project, instance string, opts ...option.ClientOption) (*Store, error) {
	admin, err := bigtable.NewAdminClient(ctx, project, instance, opts...)
	if err != nil {
		return nil, fmt.Errorf("bigtable admin client: %w", err)
	}
	var cfg bigtable.ClientConfig
	for _, o := range opts {
		if _, ok := o.(emulatorOption); ok {
			cfg.MetricsProvider = bigtable.NoopMetricsProvider{}
		}
	}
	client, err := bigtable.NewClientWithConfig(ctx, project, instance, cfg, opts...)
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

// emulatorOption marks the options EmulatorOptions returns.
type emulatorOption struct{ option.ClientOption }

// EmulatorOptions are the client options for an emulator at addr (what the
// client does by itself when BIGTABLE_EMULATOR_HOST is set).
func EmulatorOptions(addr string) []option.ClientOption {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, "8086")
	}
	return []option.ClientOption{
		emulatorOption{option.WithEndpoint(addr)},
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
	}
}

// EnsureTables creates the table and its column families if missing. It is
// safe to call on every start.
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

func listPart(k listID) string { return esc(k.typ) + "#" + esc(k.scope) + "#" }

func itemRow(k itemKey) string { return "a#" + listPart(k.listID) + esc(k.item) }

func topPrefix(hour time.Time) string         { return "t#" + HourKey(hour) + "#" }
func topRow(hour time.Time, id listID) string { return topPrefix(hour) + listPart(id) }

func indexPrefix(hour time.Time) string { return "x#" + HourKey(hour) + "#" }
func indexRow(hour time.Time, bucket int) string {
	return fmt.Sprintf("%s%03d", indexPrefix(hour), bucket)
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

// cellTS is the timestamp of every cell written (see the package comment).
const cellTS = bigtable.Timestamp(0)

var latest = bigtable.RowFilter(bigtable.LatestNFilter(1))

// columnFilter keeps one column. Filters here are column ranges, not
// regular expressions: the same on Bigtable, and bttest compiles a
// regular expression filter again for every cell it tests.
func columnFilter(fam, col string) bigtable.Filter {
	return bigtable.ColumnRangeFilter(fam, col, col+"\x00")
}

// totalFilter keeps an item row's all-time total, c:n.
var totalFilter = columnFilter(famC, "n")

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
	m.Set(fam, col, cellTS, itoa(n))
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
	m.Set(famC, "t", cellTS, []byte(HourKey(t)))
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
	m.Set(famC, "at", cellTS, []byte(time.Now().UTC().Format(time.RFC3339)))
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
