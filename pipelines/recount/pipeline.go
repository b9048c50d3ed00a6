package recount

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"
	"github.com/cespare/xxhash/v2"
	"github.com/parquet-go/parquet-go"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/archive"
	"github.com/topk-dev/topk/transforms/rules"
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
	// Readers is the number of independent read branches the files are
	// dealt to (file i to branch i mod Readers); 0: one per CPU of the
	// machine that builds the pipeline, at most one per file. A runner
	// that splits reads itself (Dataflow) does not need more than 1; Prism
	// runs each branch as its own bundle, in parallel.
	Readers int
	// Waves is the number of groups the event_id shards are deduplicated
	// in, one group after the other (shard s in wave s mod Waves); 0: 4.
	// A runner that keeps a shuffle in memory (Prism) holds several copies
	// of a stage's whole input while it runs the stage as one bundle; in
	// waves, those copies are of one wave's events only. A runner with a
	// real shuffle (Dataflow, Flink) is fastest with 1.
	Waves int
	// Rules, when set, is the countable-event rule set applied before
	// counting (transforms/rules); nil: only the event_id dedupe (as
	// --rules=none). Its files are read by each worker.
	Rules *rules.Config
}

// Build adds the recount of one hour to s:
//
//	files -> read: per bundle, events batched by shard = hash(event_id)
//	      -> GroupByKey(shard)
//	      -> dedupe by event_id; the kept events combined per
//	         (type, item, country, region), batched by item partition
//	      -> GroupByKey(partition)
//	      -> sum, expand each (country, region) to its scopes, sum per
//	         (type, scope, item) -> part-{p}.parquet in Staging
//
// Every element crossing a shuffle is a batch of thousands of events or
// counts in a compact encoding (batch.go), never one event. The scopes are
// expanded only in the last stage, where every count of an item is in one
// partition, so the second shuffle carries one record per distinct
// (type, item, country, region) of a shard instead of one per scope.
//
// With Rules, the read drops what the stateless rules drop (blocklist,
// bots), and when the repeat or cap rule is on the kept events of the
// dedupe are regrouped by (user, type, item) partition instead of being
// combined there:
//
//	-> GroupByKey(user partition)
//	-> per (user, type, item, rule window), events in canonical order
//	   (event time, event_id hash) through rules.Judge; the counted
//	   ones combined per (type, item, country, region)
//	-> GroupByKey(partition) as above
//
// so the exact path applies the definition exactly, at the cost of a
// second shuffle of the events that have a user.
//
// The output files are a function of the input only (the dedupe keeps the
// smallest record of an event_id, in the encoding of canonicalRecord,
// whichever arrives first), written to a temp name and renamed, so a
// retried bundle rewrites the same file.
func Build(s beam.Scope, job HourJob) {
	s = s.Scope("exact.recount")
	readers := job.Readers
	if readers <= 0 {
		readers = runtime.NumCPU()
	}
	readers = max(1, min(readers, len(job.Files)))
	waves := job.Waves
	if waves <= 0 {
		waves = 4
	}
	waves = max(1, min(waves, job.Shards))
	var rc rules.Config
	apply := job.Rules != nil && !job.Rules.Off
	if apply {
		rc = *job.Rules
		if err := rc.Validate(); err != nil {
			panic(fmt.Sprintf("exact.recount: %v", err))
		}
	}
	stateful := apply && rc.Stateful()
	// byWave[w][r]: reader r's batches of the shards of wave w. The split
	// is fused into the read, so that no stage gets every event as input.
	byWave := make([][]beam.PCollection, waves)
	for r := range readers {
		var files []string
		for i := r; i < len(job.Files); i += readers {
			files = append(files, job.Files[i])
		}
		rs := s.Scope(fmt.Sprintf("reader%d", r))
		batches := beam.ParDo(rs, &readFn{Shards: job.Shards, HourMs: job.Hour.UnixMilli(), Rules: rc, Apply: apply, Stateful: stateful}, beam.CreateList(rs, files))
		for w := range waves {
			byWave[w] = append(byWave[w], beam.ParDo(rs, &waveFn{Wave: w, Waves: waves}, batches))
		}
	}
	var prevDone beam.PCollection
	countsByWave := make([]beam.PCollection, waves)
	usersByWave := make([]beam.PCollection, waves)
	for w := range waves {
		ws := s.Scope(fmt.Sprintf("wave%d", w))
		events := byWave[w][0]
		if readers > 1 {
			events = beam.Flatten(ws, byWave[w]...)
		}
		if w > 0 {
			// Held back until the previous wave's dedupe is done.
			events = beam.ParDo(ws, &afterFn{}, events, beam.SideInput{Input: prevDone})
		}
		byShard := beam.GroupByKey(ws, events)
		countsByWave[w], prevDone, usersByWave[w] = beam.ParDo3(ws, &dedupeCountFn{Parts: job.Parts, Stateful: stateful}, byShard)
	}
	if stateful {
		byUser := beam.GroupByKey(s, beam.Flatten(s, usersByWave...))
		countsByWave = append(countsByWave, beam.ParDo(s, &judgeFn{Parts: job.Parts, Rules: rc, HourMs: job.Hour.UnixMilli()}, byUser))
	}
	counts := countsByWave[0]
	if len(countsByWave) > 1 {
		counts = beam.Flatten(s, countsByWave...)
	}
	byPart := beam.GroupByKey(s, counts)
	rows := beam.ParDo(s, &sumWriteFn{Staging: job.Staging, HourMs: job.Hour.UnixMilli()}, byPart)
	// The rows written per part are summed only to give the last stage an
	// output that another stage reads: Prism busy-waits (a core spinning)
	// through every bundle of a stage without outputs, which would be the
	// whole of the write stage; this way it is only the tiny sum.
	stats.Sum(s, rows)
}

func init() {
	register.DoFn3x1[context.Context, string, func(int, []byte), error](&readFn{})
	register.DoFn6x1[context.Context, int, func(*[]byte) bool, func(int, []byte), func(int), func(int, []byte), error](&dedupeCountFn{})
	register.DoFn4x1[context.Context, int, func(*[]byte) bool, func(int, []byte), error](&judgeFn{})
	register.DoFn3x0[int, []byte, func(int, []byte)](&waveFn{})
	register.DoFn4x0[int, []byte, func(*int) bool, func(int, []byte)](&afterFn{})
	register.Emitter1[int]()
	register.Iter1[int]()
	register.DoFn4x1[context.Context, int, func(*[]byte) bool, func(int64), error](&sumWriteFn{})
	register.Emitter1[int64]()
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
	// Events the rules dropped, by reason (transforms/rules).
	mBlocked = beam.NewCounter("topk", "exact_rules_blocked")
	mBot     = beam.NewCounter("topk", "exact_rules_bot")
	mRepeat  = beam.NewCounter("topk", "exact_rules_repeat")
	mCapped  = beam.NewCounter("topk", "exact_rules_capped")
	// Bytes of the batches sent to the first (events by event_id shard) and
	// the second (counts by item partition) shuffle.
	mEventBytes = beam.NewCounter("topk", "exact_shuffle_event_bytes")
	mCountBytes = beam.NewCounter("topk", "exact_shuffle_count_bytes")
)

// batchBytes is the size at which a shard's or partition's batch is emitted.
const batchBytes = 1 << 20

// ---- read ----

// readFn reads archive Parquet files and emits their events as batches keyed
// by event_id shard. A record is the fields event_id (id), type (dict), item
// (raw), country (dict), region (dict); when Stateful, then user (raw) and
// ts (uvarint, ms since the hour's start). With Apply, events the
// stateless rules drop are not emitted.
type readFn struct {
	Shards int
	HourMs int64
	Rules  rules.Config
	Apply  bool
	// Stateful: the repeat or cap rule is on (records carry user and ts).
	Stateful bool

	bufs []batchWriter
	rs   *rules.Rules
}

func (f *readFn) Setup() error {
	if !f.Apply {
		return nil
	}
	rs, err := rules.New(f.Rules)
	if err != nil {
		return fmt.Errorf("exact: %w", err)
	}
	f.rs = rs
	return nil
}

func (f *readFn) StartBundle(_ context.Context, _ func(int, []byte)) {
	f.bufs = make([]batchWriter, f.Shards)
}

func (f *readFn) ProcessElement(ctx context.Context, path string, emit func(int, []byte)) error {
	fh, err := archive.OpenFile(ctx, path)
	if err != nil {
		return err
	}
	defer fh.Close()
	pf, err := parquet.OpenFile(fh, fh.Size())
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	r := parquet.NewGenericReader[schemas.ArchiveEvent](pf)
	defer r.Close()
	rows := make([]schemas.ArchiveEvent, 1024)
	hour := time.UnixMilli(f.HourMs).UTC()
	var v schemas.Validator
	var nEvents, nInvalid, nOutside int64
	var dropped [rules.NumReasons]int64
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
			if f.rs != nil {
				if _, why := f.rs.Check(&e); why != rules.OK {
					dropped[why]++
					continue
				}
			}
			sh := int(summary.Hash(a.EventID) % uint64(f.Shards))
			w := &f.bufs[sh]
			w.begin()
			w.id(a.EventID)
			w.dictStr(a.Type)
			w.raw(a.Item)
			w.dictStr(a.Country)
			w.dictStr(a.Region)
			if f.Stateful {
				w.raw(a.User)
				w.uvarint(uint64(e.TS.UnixMilli() - f.HourMs))
			}
			w.end()
			if w.len() >= batchBytes {
				b := w.take()
				mEventBytes.Inc(ctx, int64(len(b)))
				emit(sh, b)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
	}
	mBlocked.Inc(ctx, dropped[rules.Blocked])
	mBot.Inc(ctx, dropped[rules.Bot])
	mEvents.Inc(ctx, nEvents)
	mInvalid.Inc(ctx, nInvalid)
	mOutside.Inc(ctx, nOutside)
	return nil
}

func (f *readFn) FinishBundle(ctx context.Context, emit func(int, []byte)) {
	for sh := range f.bufs {
		if f.bufs[sh].len() > 0 {
			b := f.bufs[sh].take()
			mEventBytes.Inc(ctx, int64(len(b)))
			emit(sh, b)
		}
	}
	f.bufs = nil
}

// ---- dedupe and combine ----

// dedupeCountFn gets every event of one event_id shard (and emits the
// shard on its second output when done), keeps one event per
// event_id (the one with the smallest canonicalRecord, so the choice does
// not depend on arrival order), counts the kept events per (type, item,
// country, region), and emits the counts in batches keyed by item
// partition. A count record is type (dict), item (raw), country (dict),
// region (dict), count (uvarint).
//
// When Stateful (the repeat or cap rule is on), a kept event with a user
// is not counted here but emitted on the third output, in batches keyed by
// the partition of its (user, type, item), for judgeFn. A user record is
// type (dict), item (raw), country (dict), region (dict), user (raw), ts
// (uvarint, ms since the hour's start), event_id hash (uvarint).
//
// The dedupe is one open-addressing table of record positions, sized from
// the batches' record counts; records are not copied. A duplicate that
// replaces the record kept so far moves one count from the old record's
// combination to the new one's, so one pass suffices.
type dedupeCountFn struct {
	Parts    int
	Stateful bool
}

// recPos is where a record starts: batch index + 1 (0: empty slot), offset.
type recPos struct{ batch, off uint32 }

// eventRec is one event record of a dedupe batch.
type eventRec struct {
	id                   []byte // encoded
	typ, country, region string
	item, user           []byte
	tsOff                uint64
}

// readEvent reads the next event record; user and ts only when stateful.
func readEvent(r *batchReader, stateful bool) eventRec {
	e := eventRec{id: r.id()}
	e.typ, e.item, e.country, e.region = r.dictStr(), r.raw(), r.dictStr(), r.dictStr()
	if stateful {
		e.user, e.tsOff = r.raw(), r.uvarint()
	}
	return e
}

func (f *dedupeCountFn) ProcessElement(ctx context.Context, shard int, iter func(*[]byte) bool, emit func(int, []byte), done func(int), users func(int, []byte)) error {
	batches, total, err := collectBatches(iter)
	if err != nil {
		return err
	}
	size := uint64(16)
	for size < total*2 {
		size <<= 1
	}
	table := make([]recPos, size)
	mask := size - 1
	dicts := make([][]string, len(batches))
	comb := newCombiner(int(total / 2))
	var key, can1, can2 []byte
	var dups int64
	var r batchReader
	for bi, batch := range batches {
		r.dict = nil
		r.reset(batch)
		for r.next() {
			off := uint32(r.pos)
			e := readEvent(&r, f.Stateful)
			if r.err != nil {
				return r.err
			}
			h := xxhash.Sum64(e.id)
			i := h & mask
			for {
				p := table[i]
				if p.batch == 0 {
					table[i] = recPos{uint32(bi) + 1, off}
					if !f.Stateful {
						key = comboKey(key[:0], e.typ, e.item, e.country, e.region)
						comb.add(key, 1)
					}
					break
				}
				var o batchReader
				o.b, o.pos, o.left = batches[p.batch-1], int(p.off), 1
				o.dict = dicts[p.batch-1]
				if int(p.batch-1) == bi {
					o.dict = r.dict[:len(r.dict):len(r.dict)]
				}
				if string(o.id()) != string(e.id) {
					i = (i + 1) & mask
					continue
				}
				dups++
				o.pos = int(p.off)
				oe := readEvent(&o, f.Stateful)
				if o.err != nil {
					return o.err
				}
				can1 = canonicalRecord(can1[:0], e, f.Stateful)
				can2 = canonicalRecord(can2[:0], oe, f.Stateful)
				if bytes.Compare(can1, can2) < 0 {
					table[i] = recPos{uint32(bi) + 1, off}
					if !f.Stateful {
						key = comboKey(key[:0], oe.typ, oe.item, oe.country, oe.region)
						comb.add(key, -1)
						key = comboKey(key[:0], e.typ, e.item, e.country, e.region)
						comb.add(key, 1)
					}
				}
				break
			}
		}
		if r.err != nil {
			return r.err
		}
		dicts[bi] = r.dict[:len(r.dict):len(r.dict)]
	}
	mDuplicates.Inc(ctx, dups)
	if f.Stateful {
		// The kept events: those without a user are counted here, the
		// others go to judgeFn by (user, type, item) partition.
		byUser := make([]batchWriter, f.Parts)
		var idBuf []byte
		for _, p := range table {
			if p.batch == 0 {
				continue
			}
			var o batchReader
			o.b, o.pos, o.left, o.dict = batches[p.batch-1], int(p.off), 1, dicts[p.batch-1]
			e := readEvent(&o, true)
			if o.err != nil {
				return o.err
			}
			if len(e.user) == 0 {
				key = comboKey(key[:0], e.typ, e.item, e.country, e.region)
				comb.add(key, 1)
				continue
			}
			key = rules.AppendKey(key[:0], string(e.user), e.typ, string(e.item))
			up := summary.Partition(summary.Hash(string(key)), f.Parts)
			w := &byUser[up]
			w.begin()
			w.dictStr(e.typ)
			w.rawBytes(e.item)
			w.dictStr(e.country)
			w.dictStr(e.region)
			w.rawBytes(e.user)
			w.uvarint(e.tsOff)
			idBuf = appendID(idBuf[:0], e.id)
			w.uvarint(rules.IDHash(string(idBuf)))
			w.end()
			if w.len() >= batchBytes {
				b := w.take()
				mEventBytes.Inc(ctx, int64(len(b)))
				users(up, b)
			}
		}
		for up := range byUser {
			if byUser[up].len() > 0 {
				b := byUser[up].take()
				mEventBytes.Inc(ctx, int64(len(b)))
				users(up, b)
			}
		}
	}
	table = nil
	counted := int64(0)
	emitCounts(ctx, comb, f.Parts, func(n int64) { counted += n }, emit)
	if f.Stateful {
		mCounted.Inc(ctx, counted) // the rest is counted by judgeFn
	} else {
		mCounted.Inc(ctx, int64(total)-dups)
	}
	done(shard)
	return nil
}

// judgeFn applies the repeat and cap rules (rules.Judge) to the events of
// one (user, type, item) partition: per (user, type, item, rule window),
// in canonical order (event time, event_id hash), which is the rules'
// definition; the counted events are combined per (type, item, country,
// region) and emitted as count batches keyed by item partition, as
// dedupeCountFn does.
type judgeFn struct {
	Parts  int
	Rules  rules.Config
	HourMs int64
}

// userRec is one decoded user record; strings point into the batches.
type userRec struct {
	key                  string // rules.AppendKey(user, type, item)
	ts                   int64  // Unix ms
	idh                  uint64
	typ, country, region string
	item                 string
}

func (f *judgeFn) ProcessElement(ctx context.Context, _ int, iter func(*[]byte) bool, emit func(int, []byte)) error {
	batches, total, err := collectBatches(iter)
	if err != nil {
		return err
	}
	recs := make([]userRec, 0, total)
	var key []byte
	var r batchReader
	for _, batch := range batches {
		r.dict = nil
		r.reset(batch)
		for r.next() {
			typ, item, country, region := r.dictStr(), r.raw(), r.dictStr(), r.dictStr()
			user, tsOff, idh := r.raw(), r.uvarint(), r.uvarint()
			if r.err != nil {
				return r.err
			}
			key = rules.AppendKey(key[:0], string(user), typ, string(item))
			recs = append(recs, userRec{key: string(key), ts: f.HourMs + int64(tsOff), idh: idh,
				typ: typ, item: string(item), country: country, region: region})
		}
		if r.err != nil {
			return r.err
		}
	}
	batches = nil
	slices.SortFunc(recs, func(a, b userRec) int {
		if c := strings.Compare(a.key, b.key); c != 0 {
			return c
		}
		if a.ts != b.ts {
			return cmpInt(a.ts, b.ts)
		}
		return cmpInt(a.idh, b.idh)
	})
	judge := f.Rules.Judge()
	comb := newCombiner(len(recs) / 2)
	var st rules.KeyState
	var repeats, capped int64
	for i := range recs {
		e := &recs[i]
		if i == 0 || e.key != recs[i-1].key || f.Rules.WindowStart(e.ts) != f.Rules.WindowStart(recs[i-1].ts) {
			st = rules.KeyState{}
		}
		switch judge.Step(&st, e.ts, e.idh) {
		case rules.OK:
			key = comboKey(key[:0], e.typ, []byte(e.item), e.country, e.region)
			comb.add(key, 1)
		case rules.Repeat:
			repeats++
		case rules.Capped:
			capped++
		}
	}
	mRepeat.Inc(ctx, repeats)
	mCapped.Inc(ctx, capped)
	mCounted.Inc(ctx, int64(len(recs))-repeats-capped)
	recs = nil
	emitCounts(ctx, comb, f.Parts, nil, emit)
	return nil
}

func cmpInt[T int64 | uint64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// waveFn keeps the batches of the shards of one wave.
type waveFn struct{ Wave, Waves int }

func (f *waveFn) ProcessElement(shard int, b []byte, emit func(int, []byte)) {
	if shard%f.Waves == f.Wave {
		emit(shard, b)
	}
}

// afterFn passes its input through; its side input (the shards the
// previous wave deduplicated) makes the runner hold the input back until
// that wave is done.
type afterFn struct{}

func (f *afterFn) ProcessElement(shard int, b []byte, _ func(*int) bool, emit func(int, []byte)) {
	emit(shard, b)
}

// canonicalRecord is the encoding duplicates are ordered by: the
// length-prefixed (uvarint) strings event_id, type, item, country, region,
// and when stateful user and ts (uvarint).
func canonicalRecord(dst []byte, e eventRec, stateful bool) []byte {
	dst = appendPrefixed(dst, appendID(nil, e.id))
	dst = appendPrefixed(dst, e.typ)
	dst = appendPrefixed(dst, e.item)
	dst = appendPrefixed(dst, e.country)
	dst = appendPrefixed(dst, e.region)
	if stateful {
		dst = appendPrefixed(dst, e.user)
		dst = binary.AppendUvarint(dst, e.tsOff)
	}
	return dst
}

// comboKey is the combiner's key of (type, item, country, region): the
// first three length-prefixed, then the item.
func comboKey(dst []byte, typ string, item []byte, country, region string) []byte {
	dst = appendPrefixed(dst, typ)
	dst = appendPrefixed(dst, country)
	dst = appendPrefixed(dst, region)
	return append(dst, item...)
}

// appendPrefixed appends s with its length as a uvarint before it.
func appendPrefixed[S ~string | ~[]byte](dst []byte, s S) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

func splitComboKey(k string) (typ, item, country, region string) {
	var f [3]string
	for i := range f {
		n, w := uvarintString(k)
		f[i] = k[w : w+int(n)]
		k = k[w+int(n):]
	}
	return f[0], k, f[1], f[2]
}

// combiner sums int64s per byte-string key; a key's bytes are copied once,
// when it is first added.
type combiner struct {
	idx  map[string]int32
	keys []string
	sums []int64
}

func newCombiner(hint int) *combiner {
	return &combiner{idx: make(map[string]int32, hint)}
}

func (c *combiner) add(k []byte, n int64) {
	if i, ok := c.idx[string(k)]; ok {
		c.sums[i] += n
		return
	}
	s := string(k)
	c.idx[s] = int32(len(c.keys))
	c.keys = append(c.keys, s)
	c.sums = append(c.sums, n)
}

// emitCounts writes the combiner's non-zero (type, item, country, region)
// counts as count batches, one writer per item partition, emitting each
// batch when it is full and the rest at the end; seen, if not nil, gets
// every count written.
func emitCounts(ctx context.Context, comb *combiner, parts int, seen func(int64), emit func(int, []byte)) {
	out := make([]batchWriter, parts)
	comb.each(func(k string, n int64) {
		if n == 0 {
			return
		}
		if seen != nil {
			seen(n)
		}
		typ, item, country, region := splitComboKey(k)
		p := summary.Partition(summary.Hash(item), parts)
		w := &out[p]
		w.begin()
		w.dictStr(typ)
		w.raw(item)
		w.dictStr(country)
		w.dictStr(region)
		w.uvarint(uint64(n))
		w.end()
		if w.len() >= batchBytes {
			b := w.take()
			mCountBytes.Inc(ctx, int64(len(b)))
			emit(p, b)
		}
	})
	for p := range out {
		if out[p].len() > 0 {
			b := out[p].take()
			mCountBytes.Inc(ctx, int64(len(b)))
			emit(p, b)
		}
	}
}

func (c *combiner) each(fn func(k string, n int64)) {
	c.idx = nil
	for i, k := range c.keys {
		fn(k, c.sums[i])
	}
}

// uvarintString is binary.Uvarint of the start of s.
func uvarintString(s string) (uint64, int) {
	var v uint64
	for i := 0; i < len(s) && i < binary.MaxVarintLen64; i++ {
		c := s[i]
		if c < 0x80 {
			return v | uint64(c)<<(7*i), i + 1
		}
		v |= uint64(c&0x7f) << (7 * i)
	}
	return 0, 0
}

// ---- sum and write ----

// sumWriteFn sums the counts of one item partition per (type, scope, item)
// for every scope of each (country, region), and writes them, sorted, to
// Staging/part-{p}.parquet through a temp file and a rename.
type sumWriteFn struct {
	Staging string
	HourMs  int64
}

func (f *sumWriteFn) ProcessElement(ctx context.Context, part int, iter func(*[]byte) bool, emit func(int64)) error {
	batches, total, err := collectBatches(iter)
	if err != nil {
		return err
	}
	// A (type, scope) is a small number, its index in lists; a (type,
	// country, region) maps to the indexes of its scopes.
	type typeScope struct{ typ, scope string }
	var lists []typeScope
	listIdx := map[typeScope]uint16{}
	shapes := map[string][]uint16{}
	sums := newCombiner(int(total))
	var key, shape []byte
	var scopes []string
	var r batchReader
	for _, batch := range batches {
		r.reset(batch)
		for r.next() {
			typ, item, country, region, n := r.dictStr(), r.raw(), r.dictStr(), r.dictStr(), r.uvarint()
			if r.err != nil {
				return r.err
			}
			shape = comboKey(shape[:0], typ, nil, country, region)
			ids, ok := shapes[string(shape)]
			if !ok {
				e := schemas.Event{Country: country, Region: region}
				for _, sc := range e.Scopes(scopes) {
					ts := typeScope{typ, sc}
					j, ok := listIdx[ts]
					if !ok {
						if len(lists) == 1<<16 {
							return errors.New("exact: too many (type, scope) pairs in a partition")
						}
						j = uint16(len(lists))
						listIdx[ts] = j
						lists = append(lists, ts)
					}
					ids = append(ids, j)
				}
				shapes[string(shape)] = ids
			}
			for _, j := range ids {
				key = append(key[:0], byte(j>>8), byte(j))
				key = append(key, item...)
				sums.add(key, int64(n))
			}
		}
		if r.err != nil {
			return r.err
		}
	}
	batches = nil
	hour := time.UnixMilli(f.HourMs).UTC()
	rows := make([]schemas.ExactCount, 0, len(sums.keys))
	for i, k := range sums.keys {
		ts := lists[int(k[0])<<8|int(k[1])]
		rows = append(rows, schemas.ExactCount{Hour: hour, Type: ts.typ, Scope: ts.scope, Item: k[2:], Count: sums.sums[i]})
	}
	sums = nil
	sortCounts(rows)
	mRows.Inc(ctx, int64(len(rows)))
	if err := writeParquet(ctx, filepath.Join(f.Staging, fmt.Sprintf("part-%05d.parquet", part)), rows); err != nil {
		return err
	}
	emit(int64(len(rows)))
	return nil
}

// sortCounts orders rows by (type, scope, count descending, item), the
// order of the exact table's files.
func sortCounts(rows []schemas.ExactCount) {
	slices.SortFunc(rows, func(a, b schemas.ExactCount) int {
		if c := strings.Compare(a.Type, b.Type); c != 0 {
			return c
		}
		if c := strings.Compare(a.Scope, b.Scope); c != 0 {
			return c
		}
		if a.Count != b.Count {
			if a.Count > b.Count {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Item, b.Item)
	})
}

// writeParquet writes rows to path, a local path or a gs:// URL, with
// archive.WriteFile: a reader sees the old file or the new one, never half.
func writeParquet(ctx context.Context, path string, rows []schemas.ExactCount) error {
	err := archive.WriteFile(ctx, path, func(w io.Writer) error {
		pw := parquet.NewGenericWriter[schemas.ExactCount](w)
		if _, err := pw.Write(rows); err != nil {
			return err
		}
		return pw.Close()
	})
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
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
