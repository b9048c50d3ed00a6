// Package recoverylog is the fast path's durable message log: the Pub/Sub
// reader (transforms/source) writes every message it pulls here before it
// acknowledges it, and a restarted job replays the last hour of it to rebuild
// the window state the crashed process held only in memory. It has no Beam
// import.
//
// # Why a log, and not checkpoints of the window state
//
// On Prism the windows live in the process (Beam state held by the runner in
// memory) and Pub/Sub forgets a message once it is acknowledged, so a kill -9
// loses every acknowledged event that a 1m, 5m or 1h window still covered.
// Checkpointing the summaries instead would need a consistent cut between
// the summaries and the acknowledgements across stages and workers: the
// runner's job (Dataflow's durable state does exactly that), not something a
// DoFn can build on a runner whose state dies with the process. A log of the
// source's input is consistent by construction: a message is acknowledged
// only once it is in the log, so after a crash every accepted message is
// either in the log or still in the subscription. Replaying the log's last
// horizon (the longest window, plus the allowed lateness and a bucket)
// through the unchanged pipeline rebuilds every window exactly, with the
// counting core's usual bounds. Pub/Sub's own seek to a timestamp over
// retained acknowledged messages would do the same, but the emulators cannot
// seek (pstest crashes, the official emulator does not retain), and a log the
// job owns also works on Flink and any portable runner.
//
// Cost: one point read and one bulk write per pulled batch (up to 1,000
// messages), against Bigtable beside the exact tables. Recovery time is the
// time to replay the horizon: at the design's peak that is an hour of
// traffic, so a restart catches up at the job's replay speed (BENCHMARKS.md).
//
// # Exactly once across a crash
//
// Each row records the run (one id per job submission) that wrote it. A
// message pulled again after a crash (written, but the process died before
// its acknowledgement reached Pub/Sub) finds its row, written by an earlier
// run at a publish time the replay covers, so the live reader skips it: the
// replay emits it. A message redelivered within one run (a lost
// acknowledgement) finds a row of its own run and is skipped too. The replay
// skips rows of the current run, which the live readers emitted. So every
// message in the horizon is counted once, however the crash and the
// redeliveries interleave. One job per subscription: two jobs running at
// once on one log would skip each other's rows.
//
// # Table
//
// Table "fastlog" (Config.Table) in the exact tables' instance, one family
// "m" whose cells are written at the message's publish time with a max-age
// garbage-collection policy of twice the horizon (Ensure): retention is
// Bigtable's, nothing here deletes. Row keys:
//
//	{salt}#{publish Unix ms, 13 digits}#{message id}    m:d = payload, m:t = element time (Unix ms), m:r = run
//	k#{beacon_id}                                        m:r = run, m:p = publish time of the message logged for it
//
// The k# rows make beacon_id an idempotency key, as it is at ingest: a
// beacon published twice (ingest answered 503 after an ambiguous publish and
// the client retried with the same beacon_id) is two messages with two ids,
// and the second finds the first's k# row and is not counted again.
//
// salt is one hex digit from a hash of the message id, so that writes at one
// instant spread over 16 key ranges instead of one hot tablet; a replay reads
// the next rows of all 16 ranges (Next) and orders them by publish time.
package recoverylog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/topk-dev/topk/transforms/exact/store"
)

// DefaultTable is the log's table name.
const DefaultTable = "fastlog"

const (
	family = "m"
	colD   = "d"
	colT   = "t"
	colR   = "r"
	colP   = "p"
	salts  = 16
	// bulkRows bounds the row mutations of one ApplyBulk call.
	bulkRows = 5000
)

// Config names the log's Bigtable table.
type Config struct {
	Project, Instance string
	// EmulatorAddr connects to an emulator without credentials; "" means
	// BIGTABLE_EMULATOR_HOST or Google Cloud with default credentials.
	EmulatorAddr string
	// Table is the table name ("" : DefaultTable).
	Table string
	// Retention is the garbage-collection age of the log's cells (Ensure).
	Retention time.Duration
}

// Enabled reports whether c names a log.
func (c Config) Enabled() bool { return c.Project != "" && c.Instance != "" }

func (c Config) table() string {
	if c.Table == "" {
		return DefaultTable
	}
	return c.Table
}

// Record is one logged message.
type Record struct {
	// ID is the Pub/Sub message id (unique per topic, kept on redelivery).
	ID string
	// Publish is the message's publish time in Unix ms.
	Publish int64
	// TS is the element timestamp the reader gave it, Unix ms.
	TS int64
	// Data is the payload (a binary beacon).
	Data []byte
	// Beacon is the message's beacon_id attribute ("" : none): an
	// idempotency key, so that a beacon published twice (a retry after an
	// ambiguous publish) is logged, and counted, once.
	Beacon string
	// Run is the id of the job run that wrote it (set by Append; filled by
	// Scan and Seen).
	Run string
}

// Key is a message's row key.
func Key(id string, publishMs int64) string {
	h := fnv.New32a()
	h.Write([]byte(id))
	return fmt.Sprintf("%x#%013d#%s", h.Sum32()%salts, publishMs, id)
}

// beaconKey is the row key of a beacon_id's index row.
func beaconKey(beacon string) string { return "k#" + beacon }

// Logged says who logged a message (or another message of its beacon) and
// when that one was published.
type Logged struct {
	Run     string
	Publish int64 // Unix ms
}

// Log reads and writes the table.
type Log struct {
	cfg    Config
	admin  *bigtable.AdminClient
	client *bigtable.Client
	tbl    *bigtable.Table
}

// Open connects (lazily: no call is made until the first operation).
func Open(ctx context.Context, cfg Config) (*Log, error) {
	if !cfg.Enabled() {
		return nil, errors.New("recovery log: project and instance are required")
	}
	var opts = store.EmulatorOptions(cfg.EmulatorAddr)
	if cfg.EmulatorAddr == "" {
		opts = nil
	}
	admin, err := bigtable.NewAdminClient(ctx, cfg.Project, cfg.Instance, opts...)
	if err != nil {
		return nil, fmt.Errorf("recovery log admin client: %w", err)
	}
	var bc bigtable.ClientConfig
	if cfg.EmulatorAddr != "" || os.Getenv("BIGTABLE_EMULATOR_HOST") != "" {
		bc.MetricsProvider = bigtable.NoopMetricsProvider{}
	}
	client, err := bigtable.NewClientWithConfig(ctx, cfg.Project, cfg.Instance, bc, opts...)
	if err != nil {
		admin.Close()
		return nil, fmt.Errorf("recovery log client: %w", err)
	}
	return &Log{cfg: cfg, admin: admin, client: client, tbl: client.Open(cfg.table())}, nil
}

// Close closes the clients.
func (l *Log) Close() error { return errors.Join(l.client.Close(), l.admin.Close()) }

// Ensure creates the table and its family (with the retention policy) if
// missing; safe to call on every start.
func (l *Log) Ensure(ctx context.Context) error {
	name := l.cfg.table()
	tables, err := l.admin.Tables(ctx)
	if err != nil {
		return fmt.Errorf("recovery log: list tables: %w", err)
	}
	if !slices.Contains(tables, name) {
		if err := l.admin.CreateTable(ctx, name); err != nil && !strings.Contains(err.Error(), "AlreadyExists") {
			return fmt.Errorf("recovery log: create table %s: %w", name, err)
		}
	}
	info, err := l.admin.TableInfo(ctx, name)
	if err != nil {
		return fmt.Errorf("recovery log: table info %s: %w", name, err)
	}
	if !slices.Contains(info.Families, family) {
		if err := l.admin.CreateColumnFamily(ctx, name, family); err != nil && !strings.Contains(err.Error(), "AlreadyExists") {
			return fmt.Errorf("recovery log: create family: %w", err)
		}
	}
	if l.cfg.Retention > 0 {
		if err := l.admin.SetGCPolicy(ctx, name, family, bigtable.MaxAgePolicy(l.cfg.Retention)); err != nil {
			return fmt.Errorf("recovery log: gc policy: %w", err)
		}
	}
	return nil
}

// Seen reports, for each of recs the log already holds (by message id, or
// by its beacon's id when it has one), who logged it: a map from the index
// in recs.
func (l *Log) Seen(ctx context.Context, recs []Record) (map[int]Logged, error) {
	out := map[int]Logged{}
	if len(recs) == 0 {
		return out, nil
	}
	keys := make(bigtable.RowList, 0, 2*len(recs))
	for _, r := range recs {
		keys = append(keys, Key(r.ID, r.Publish))
		if r.Beacon != "" {
			keys = append(keys, beaconKey(r.Beacon))
		}
	}
	found := map[string]Logged{}
	err := l.tbl.ReadRows(ctx, keys, func(row bigtable.Row) bool {
		var lg Logged
		if strings.HasPrefix(row.Key(), "k#") {
			lg.Publish = -1
		} else {
			lg.Publish, _ = splitKey(row.Key())
		}
		for _, it := range row[family] {
			switch strings.TrimPrefix(it.Column, family+":") {
			case colR:
				lg.Run = string(it.Value)
			case colP:
				lg.Publish, _ = strconv.ParseInt(string(it.Value), 10, 64)
			}
		}
		found[row.Key()] = lg
		return true
	}, bigtable.RowFilter(bigtable.ChainFilters(bigtable.LatestNFilter(1), bigtable.ColumnFilter(colR+"|"+colP))))
	if err != nil {
		return nil, fmt.Errorf("recovery log: read %d keys: %w", len(keys), err)
	}
	for i, r := range recs {
		if lg, ok := found[Key(r.ID, r.Publish)]; ok {
			out[i] = lg
		} else if lg, ok := found[beaconKey(r.Beacon)]; ok && r.Beacon != "" {
			out[i] = lg
		}
	}
	return out, nil
}

// Append writes recs as logged by run. It returns only once every row is
// written (a partial failure is an error: the caller must not acknowledge).
func (l *Log) Append(ctx context.Context, run string, recs []Record) error {
	for len(recs) > 0 {
		n := min(len(recs), bulkRows)
		keys := make([]string, 0, 2*n)
		muts := make([]*bigtable.Mutation, 0, 2*n)
		for _, r := range recs[:n] {
			ts := bigtable.Time(time.UnixMilli(r.Publish))
			m := bigtable.NewMutation()
			m.Set(family, colD, ts, r.Data)
			m.Set(family, colT, ts, []byte(strconv.FormatInt(r.TS, 10)))
			m.Set(family, colR, ts, []byte(run))
			keys, muts = append(keys, Key(r.ID, r.Publish)), append(muts, m)
			if r.Beacon != "" {
				b := bigtable.NewMutation()
				b.Set(family, colR, ts, []byte(run))
				b.Set(family, colP, ts, []byte(strconv.FormatInt(r.Publish, 10)))
				keys, muts = append(keys, beaconKey(r.Beacon)), append(muts, b)
			}
		}
		errs, err := l.tbl.ApplyBulk(ctx, keys, muts)
		if err != nil {
			return fmt.Errorf("recovery log: write %d rows: %w", n, err)
		}
		for _, e := range errs {
			if e != nil {
				return fmt.Errorf("recovery log: write %d rows: %w", n, e)
			}
		}
		recs = recs[n:]
	}
	return nil
}

// Next returns the next records published in [from, to) that were not
// logged by skipRun, ordered by publish time and then id, and where the
// next call starts (to: done). It reads at most limit rows from each of the
// 16 key ranges, so an hour of which most minutes are empty costs a few
// reads, and memory stays bounded: the result ends before the first
// publish time a range may have more rows of.
func (l *Log) Next(ctx context.Context, from, to int64, skipRun string, limit int) ([]Record, int64, error) {
	if from >= to {
		return nil, to, nil
	}
	end := to
	var all []Record
	for s := range salts {
		rows, err := l.read(ctx, bigtable.NewRange(fmt.Sprintf("%x#%013d#", s, from), fmt.Sprintf("%x#%013d#", s, to)), limit)
		if err != nil {
			return nil, from, err
		}
		if len(rows) == limit {
			end = min(end, rows[len(rows)-1].Publish) // that ms may go on past the limit
		}
		all = append(all, rows...)
	}
	if end <= from {
		// One millisecond holds more than limit rows of some range: read
		// that millisecond whole.
		end = from + 1
		all = all[:0]
		for s := range salts {
			rows, err := l.read(ctx, bigtable.NewRange(fmt.Sprintf("%x#%013d#", s, from), fmt.Sprintf("%x#%013d#", s, end)), 0)
			if err != nil {
				return nil, from, err
			}
			all = append(all, rows...)
		}
	}
	out := all[:0]
	for _, r := range all {
		if r.Publish < end && r.Run != skipRun && r.Data != nil {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b Record) int {
		if c := cmp.Compare(a.Publish, b.Publish); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, end, nil
}

// read returns the rows of one range (at most limit; 0: all) as records.
func (l *Log) read(ctx context.Context, rr bigtable.RowRange, limit int) ([]Record, error) {
	var out []Record
	var perr error
	opts := []bigtable.ReadOption{bigtable.RowFilter(bigtable.LatestNFilter(1))}
	if limit > 0 {
		opts = append(opts, bigtable.LimitRows(int64(limit)))
	}
	err := l.tbl.ReadRows(ctx, rr, func(row bigtable.Row) bool {
		pub, id := splitKey(row.Key())
		r := Record{ID: id, Publish: pub}
		for _, it := range row[family] {
			switch strings.TrimPrefix(it.Column, family+":") {
			case colD:
				r.Data = it.Value
			case colT:
				t, err := strconv.ParseInt(string(it.Value), 10, 64)
				if err != nil {
					perr = fmt.Errorf("recovery log: row %q: bad time %q", row.Key(), it.Value)
					return false
				}
				r.TS = t
			case colR:
				r.Run = string(it.Value)
			}
		}
		out = append(out, r)
		return true
	}, opts...)
	if err == nil {
		err = perr
	}
	if err != nil {
		return nil, fmt.Errorf("recovery log: read: %w", err)
	}
	return out, nil
}

// splitKey returns the publish time and message id of a row key.
func splitKey(k string) (int64, string) {
	parts := strings.SplitN(k, "#", 3)
	if len(parts) != 3 {
		return 0, k
	}
	p, _ := strconv.ParseInt(parts[1], 10, 64)
	return p, parts[2]
}
