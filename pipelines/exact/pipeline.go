package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/parquet-go/parquet-go"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/summary"
)

// HourJob is what Build needs for one hour: the archive files to read and the
// staging folder the per-partition count files go to.
type HourJob struct {
	Hour    time.Time
	Files   []string
	Staging string
	// Shards is the number of event_id shards for the dedupe (>= 1); Parts
	// the number of item partitions the counts are summed in (>= 1).
	Shards, Parts int
}

// Build adds the recount of one hour to s:
//
//	files -> read (per bundle: events batched by shard = hash(event_id))
//	      -> GroupByKey(shard) -> dedupe by event_id, count per (type, scope, item)
//	         in a summary.Counter (map-side), flushed as batches by item partition
//	      -> GroupByKey(partition) -> sum -> part-{p}.parquet in Staging
//
// Every element crossing a shuffle is a batch of thousands of events or
// counts, never one event. The output files are a function of the input only
// (the dedupe keeps the smallest record of an event_id, whichever arrives
// first), written to a temp name and renamed, so a retried bundle rewrites the
// same file.
func Build(s beam.Scope, job HourJob) {
	s = s.Scope("exact.recount")
	files := beam.CreateList(s, job.Files)
	batches := beam.ParDo(s, &readFn{Shards: job.Shards, HourMs: job.Hour.UnixMilli()}, files)
	byShard := beam.GroupByKey(s, batches)
	counts := beam.ParDo(s, &dedupeCountFn{Parts: job.Parts}, byShard)
	byPart := beam.GroupByKey(s, counts)
	beam.ParDo0(s, &sumWriteFn{Staging: job.Staging, HourMs: job.Hour.UnixMilli()}, byPart)
}

func init() {
	register.DoFn3x1[context.Context, string, func(int, []byte), error](&readFn{})
	register.DoFn4x0[context.Context, int, func(*[]byte) bool, func(int, []byte)](&dedupeCountFn{})
	register.DoFn3x1[context.Context, int, func(*[]byte) bool, error](&sumWriteFn{})
	register.Emitter2[int, []byte]()
	register.Iter1[[]byte]()
}

var (
	mEvents     = beam.NewCounter("topk", "exact_events_read")
	mInvalid    = beam.NewCounter("topk", "exact_events_invalid")
	mOutside    = beam.NewCounter("topk", "exact_events_outside_hour")
	mDuplicates = beam.NewCounter("topk", "exact_duplicates_dropped")
	mCounted    = beam.NewCounter("topk", "exact_events_counted")
	mRows       = beam.NewCounter("topk", "exact_count_rows")
)

// batchBytes is the size at which a shard's or partition's batch is emitted.
const batchBytes = 1 << 20

// ---- read ----

// readFn reads archive Parquet files and emits their events as batches keyed
// by event_id shard. Per event the record is the length-prefixed strings
// event_id, type, item, country, region.
type readFn struct {
	Shards int
	HourMs int64

	bufs [][]byte
}

func (f *readFn) StartBundle(_ context.Context, _ func(int, []byte)) {
	f.bufs = make([][]byte, f.Shards)
}

func (f *readFn) ProcessElement(ctx context.Context, path string, emit func(int, []byte)) error {
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	r := parquet.NewGenericReader[schemas.ArchiveEvent](fh)
	defer r.Close()
	rows := make([]schemas.ArchiveEvent, 1024)
	hour := time.UnixMilli(f.HourMs).UTC()
	var v schemas.Validator
	var nEvents, nInvalid, nOutside int64
	for {
		n, err := r.Read(rows)
		for i := range rows[:n] {
			a := &rows[i]
			nEvents++
			e := a.Event()
			if v.Validate(&e, hour) != nil {
				nInvalid++
				continue
			}
			if e.TS.Before(hour) || !e.TS.Before(hour.Add(time.Hour)) {
				nOutside++
				continue
			}
			sh := int(summary.Hash(a.EventID) % uint64(f.Shards))
			b := f.bufs[sh]
			for _, s := range [...]string{a.EventID, a.Type, a.Item, a.Country, a.Region} {
				b = binary.AppendUvarint(b, uint64(len(s)))
				b = append(b, s...)
			}
			if len(b) >= batchBytes {
				emit(sh, b)
				b = nil
			}
			f.bufs[sh] = b
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
	}
	mEvents.Inc(ctx, nEvents)
	mInvalid.Inc(ctx, nInvalid)
	mOutside.Inc(ctx, nOutside)
	return nil
}

func (f *readFn) FinishBundle(_ context.Context, emit func(int, []byte)) {
	for sh, b := range f.bufs {
		if len(b) > 0 {
			emit(sh, b)
		}
	}
	f.bufs = nil
}

// record is one event as batched: its fields point into the batch.
type record struct{ id, typ, item, country, region string }

// nextRecord decodes the record at b, returning it, its encoded bytes and the rest.
func nextRecord(b []byte) (record, []byte, []byte, error) {
	var f [5]string
	start := b
	for i := range f {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			return record{}, nil, nil, errors.New("exact: corrupt event batch")
		}
		f[i] = string(b[k : k+int(n)])
		b = b[k+int(n):]
	}
	return record{f[0], f[1], f[2], f[3], f[4]}, start[:len(start)-len(b)], b, nil
}

// ---- dedupe and count ----

// dedupeCountFn gets every event of one event_id shard, keeps one event per
// event_id (the one with the smallest encoded record, so the choice does not
// depend on arrival order), counts per (type, scope, item) for every scope
// of the event, and emits the counts in batches keyed by item partition.
type dedupeCountFn struct {
	Parts int
}

func (f *dedupeCountFn) ProcessElement(ctx context.Context, _ int, batches func(*[]byte) bool, emit func(int, []byte)) {
	kept := map[string][]byte{}
	var total, dups int64
	var batch []byte
	for batches(&batch) {
		b := batch
		for len(b) > 0 {
			rec, enc, rest, err := nextRecord(b)
			if err != nil {
				panic(err)
			}
			b = rest
			total++
			if old, ok := kept[rec.id]; ok {
				dups++
				if bytes.Compare(enc, old) >= 0 {
					continue
				}
			}
			kept[rec.id] = enc
		}
	}
	mDuplicates.Inc(ctx, dups)
	mCounted.Inc(ctx, total-dups)
	c := summary.NewCounter(len(kept)*3 + 1)
	var key []byte
	var scopes []string
	for _, enc := range kept {
		rec, _, _, _ := nextRecord(enc)
		e := schemas.Event{Country: rec.country, Region: rec.region}
		for _, sc := range e.Scopes(scopes) {
			key = append(key[:0], rec.typ...)
			key = append(key, 0)
			key = append(key, sc...)
			key = append(key, 0)
			key = append(key, rec.item...)
			c.Add(string(key), summary.Hash(string(key)), 1)
		}
	}
	out := make([][]byte, f.Parts)
	c.Each(func(k string, h, n uint64) {
		p := summary.Partition(h, f.Parts)
		b := binary.AppendUvarint(out[p], uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, n)
		if len(b) >= batchBytes {
			emit(p, b)
			b = nil
		}
		out[p] = b
	})
	for p, b := range out {
		if len(b) > 0 {
			emit(p, b)
		}
	}
}

// ---- sum and write ----

// sumWriteFn sums the counts of one item partition and writes them, sorted,
// to Staging/part-{p}.parquet through a temp file and a rename.
type sumWriteFn struct {
	Staging string
	HourMs  int64
}

func (f *sumWriteFn) ProcessElement(ctx context.Context, part int, batches func(*[]byte) bool) error {
	sums := map[string]int64{}
	var batch []byte
	for batches(&batch) {
		b := batch
		for len(b) > 0 {
			n, k := binary.Uvarint(b)
			if k <= 0 || uint64(len(b)-k) < n {
				return errors.New("exact: corrupt count batch")
			}
			key := string(b[k : k+int(n)])
			b = b[k+int(n):]
			c, k2 := binary.Uvarint(b)
			if k2 <= 0 {
				return errors.New("exact: corrupt count batch")
			}
			b = b[k2:]
			sums[key] += int64(c)
		}
	}
	hour := time.UnixMilli(f.HourMs).UTC()
	rows := make([]schemas.ExactCount, 0, len(sums))
	for key, n := range sums {
		parts := strings.SplitN(key, "\x00", 3)
		rows = append(rows, schemas.ExactCount{Hour: hour, Type: parts[0], Scope: parts[1], Item: parts[2], Count: n})
	}
	sortCounts(rows)
	mRows.Inc(ctx, int64(len(rows)))
	return writeParquet(filepath.Join(f.Staging, fmt.Sprintf("part-%05d.parquet", part)), rows)
}

// sortCounts orders rows by (type, scope, count descending, item), the
// order of the exact table's files.
func sortCounts(rows []schemas.ExactCount) {
	sort.Slice(rows, func(i, j int) bool {
		a, b := &rows[i], &rows[j]
		if a.Type != b.Type {
			return a.Type < b.Type
		}
		if a.Scope != b.Scope {
			return a.Scope < b.Scope
		}
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		return a.Item < b.Item
	})
}

// writeParquet writes rows to path through a temp file in the same folder
// and a rename, so a reader sees the old file or the new one, never half.
func writeParquet(path string, rows []schemas.ExactCount) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	w := parquet.NewGenericWriter[schemas.ExactCount](tmp)
	if _, err := w.Write(rows); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := w.Close(); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// readCounts reads every part file in dir.
func readCounts(dir string) ([]schemas.ExactCount, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "part-*.parquet"))
	if err != nil {
		return nil, err
	}
	var out []schemas.ExactCount
	for _, p := range paths {
		rows, err := parquet.ReadFile[schemas.ExactCount](p)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		out = append(out, rows...)
	}
	return out, nil
}
