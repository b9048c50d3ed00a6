package source

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/sdf"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/topk-dev/topk/schemas"
)

func init() {
	register.DoFn6x2[context.Context, *fileEstimator, *fileTracker, []byte,
		func(beam.EventTime, []byte), func(schemas.DeadLetter), sdf.ProcessContinuation, error](&fileFn{})
	register.Emitter1[schemas.DeadLetter]()
	beam.RegisterType(reflect.TypeOf((*fileRestriction)(nil)).Elem())
}

const (
	// maxLineBytes bounds one NDJSON line; a longer one is a dead letter.
	maxLineBytes = 1 << 20
	// maxBeaconLineBytes bounds the NDJSON bytes that go into one beacon.
	maxBeaconLineBytes = schemas.MaxBeaconBytes - 4<<10
)

var (
	fileEvents   = beam.NewCounter("topk.source", "file_events")
	fileBadLines = beam.NewCounter("topk.source", "file_bad_lines")
	fileBeacons  = beam.NewCounter("topk.source", "file_beacons")
	fileReopened = beam.NewCounter("topk.source", "file_reopened")
)

// fileFn reads an NDJSON file of events in order into beacons: a splittable
// DoFn over the single Impulse element whose restriction is the reader's
// cursor (fileRestriction), so the file is read sequentially by one loop
// (arrival order is kept and the data clock is exact), in calls of about
// BundleTime that each end in a checkpoint.
//
// Why checkpoints, for a bounded file: output and the watermark reach the
// runner only when a call returns. Read in one call, the whole file was
// one bundle, every window and trending round of the replay fired at its
// end, and all of the file's buckets sat in state at once (6.5 GB for an
// 80-minute replay of 4M events, BENCHMARKS.md "Replays with a moving
// watermark"). With a checkpoint every BundleTime and a watermark that
// follows the data clock (fileEstimator: the clock minus Slack), windows
// fire as the replay goes, as they do live, and state holds what the
// windows cover.
//
// A call that checkpoints leaves its open reader (gzip state and buffered
// input) in openReaders under the cursor it stopped at, and the resumed
// call takes it from there: resuming a gzip stream at an offset otherwise
// means decompressing it again from the start. A call that finds none (a
// resume in another process, on another runner's worker, or after a failed
// bundle) opens the file and skips to the cursor's offset
// (topk.source/file_reopened counts those).
type fileFn struct {
	Path       string
	Beacon     int
	Slack      time.Duration
	BundleTime time.Duration
	// BundleBeacons > 0 also checkpoints after that many beacons a call
	// (Options.BundleBeacons).
	BundleBeacons int
}

// fileCursor is where the reader stands between two beacons: enough to
// resume exactly there.
type fileCursor struct {
	// Offset is the bytes of the (decompressed) input read, Line the lines.
	Offset, Line int64
	// Beacon is the number of the next beacon (beacons emitted so far): it
	// names the beacon ("f" + number) and is the position it claims.
	Beacon int64
	// Clock is the data clock: the largest event ts of the beacons so far
	// (Unix ms); mtime.MinTimestamp before the first.
	Clock int64
}

// fileRestriction is the file source's restriction: the cursor of the next
// beacon, and End, the first position not to claim (unbounded until a
// checkpoint or the end of the file closes it).
type fileRestriction struct {
	Cursor fileCursor
	End    int64
}

func (fn *fileFn) CreateInitialRestriction(_ []byte) fileRestriction {
	return fileRestriction{Cursor: fileCursor{Clock: int64(mtime.MinTimestamp)}, End: unbounded}
}

func (fn *fileFn) SplitRestriction(_ []byte, r fileRestriction) []fileRestriction {
	return []fileRestriction{r}
}

// RestrictionSize is unknown before the file is read: one reader weighs 1.
func (fn *fileFn) RestrictionSize(_ []byte, _ fileRestriction) float64 { return 1 }

func (fn *fileFn) CreateTracker(r fileRestriction) *fileTracker { return &fileTracker{rest: r} }

// TruncateRestriction (drain) ends the read where it is.
func (fn *fileFn) TruncateRestriction(rt *fileTracker, _ []byte) fileRestriction {
	r := rt.GetRestriction().(fileRestriction)
	r.End = r.Cursor.Beacon
	return r
}

func (fn *fileFn) InitialWatermarkEstimatorState(_ beam.EventTime, _ fileRestriction, _ []byte) int64 {
	return int64(mtime.MinTimestamp)
}

func (fn *fileFn) CreateWatermarkEstimator(state int64) *fileEstimator {
	return &fileEstimator{wm: state}
}

func (fn *fileFn) WatermarkEstimatorState(e *fileEstimator) int64 { return e.wm }

// ProcessElement reads from the restriction's cursor, emitting each beacon
// (and the dead letters of the lines before its end) once it has claimed
// it, until BundleTime has passed or BundleBeacons were emitted
// (checkpoint), a claim is refused (the runner split the restriction) or
// the file ends.
func (fn *fileFn) ProcessElement(ctx context.Context, we *fileEstimator, rt *fileTracker, _ []byte, emit func(beam.EventTime, []byte), dead func(schemas.DeadLetter)) (sdf.ProcessContinuation, error) {
	start := time.Now()
	r := rt.GetRestriction().(fileRestriction)
	if r.Cursor.Beacon >= r.End {
		return sdf.StopProcessing(), nil
	}
	or, err := fn.open(ctx, r.Cursor)
	if err != nil {
		return nil, err
	}
	fr := or.fr
	events := fr.events
	var refused, checkpoint bool
	beacons := 0
	eof, err := fr.run(func(at int64, data []byte, after fileCursor) bool {
		if !rt.claim(after.Beacon-1, after) {
			refused = true
			return false
		}
		fn.emitDead(ctx, fr, dead)
		fileBeacons.Inc(ctx, 1)
		emit(mtime.Time(at), data)
		we.advance(after.Clock - fn.Slack.Milliseconds())
		beacons++
		if rt.IsDone() || time.Since(start) >= fn.BundleTime || beacons == fn.BundleBeacons {
			// Checkpoint, or the runner split the restriction here.
			checkpoint = true
			return false
		}
		return true
	}, func(d schemas.DeadLetter) { fr.dead = append(fr.dead, d) })
	fileEvents.Inc(ctx, fr.events-events)
	switch {
	case err != nil:
		or.close()
		return nil, fmt.Errorf("file source %s: %w", fn.Path, err)
	case refused:
		or.close()
		return sdf.StopProcessing(), nil
	case checkpoint:
		stash(fn.Path, rt.cursor(), or)
		if rt.IsDone() { // split: the residual goes on from the cursor
			return sdf.StopProcessing(), nil
		}
		return sdf.ResumeProcessingIn(0), nil
	}
	// The end of the file: the dead letters after the last beacon claim
	// the next position.
	defer or.close()
	if eof && len(fr.dead) > 0 {
		c := rt.cursor()
		if !rt.claim(c.Beacon, c) {
			return sdf.StopProcessing(), nil
		}
		fn.emitDead(ctx, fr, dead)
	}
	rt.finish()
	return sdf.StopProcessing(), nil
}

func (fn *fileFn) emitDead(ctx context.Context, fr *fileReader, dead func(schemas.DeadLetter)) {
	for _, d := range fr.dead {
		fileBadLines.Inc(ctx, 1)
		dead(d)
	}
	clear(fr.dead)
	fr.dead = fr.dead[:0]
}

// open returns a reader standing at c: the one a checkpointed call left
// there, or the file opened and read up to c.
func (fn *fileFn) open(ctx context.Context, c fileCursor) (*openReader, error) {
	if or := unstash(fn.Path, c); or != nil {
		return or, nil
	}
	f, err := os.Open(fn.Path)
	if err != nil {
		return nil, fmt.Errorf("file source: %w", err)
	}
	or := &openReader{closers: []io.Closer{f}}
	var r io.Reader = f
	skip := c.Offset // bytes to read past
	if strings.HasSuffix(fn.Path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			or.close()
			return nil, fmt.Errorf("file source %s: gzip: %w", fn.Path, err)
		}
		or.closers = append(or.closers, zr)
		r = zr
	} else if skip > 0 {
		if _, err := f.Seek(skip, io.SeekStart); err != nil {
			or.close()
			return nil, fmt.Errorf("file source %s: %w", fn.Path, err)
		}
		skip = 0
	}
	br := bufio.NewReaderSize(r, 256<<10)
	if c.Offset > 0 {
		fileReopened.Inc(ctx, 1)
	}
	if skip > 0 {
		if _, err := io.CopyN(io.Discard, br, skip); err != nil {
			or.close()
			return nil, fmt.Errorf("file source %s: skipping to byte %d: %w", fn.Path, skip, err)
		}
	}
	or.fr = newFileReader(br, fn.Beacon, "f", c)
	return or, nil
}

// openReader is a file being read and what closes it.
type openReader struct {
	fr      *fileReader
	closers []io.Closer
}

func (or *openReader) close() {
	for i := len(or.closers) - 1; i >= 0; i-- {
		or.closers[i].Close()
	}
}

// openReaders holds the readers of calls that checkpointed, by file and
// cursor (see fileFn), at most maxOpenReaders: a resumed call takes its
// reader out, so there is one per file being read unless calls are
// abandoned (a bundle that failed after its checkpoint), whose readers are
// closed as newer ones push them out.
var openReaders struct {
	sync.Mutex
	m     map[openKey]*openReader
	order []openKey
}

const maxOpenReaders = 8

type openKey struct {
	path string
	at   fileCursor
}

func stash(path string, c fileCursor, or *openReader) {
	openReaders.Lock()
	defer openReaders.Unlock()
	if openReaders.m == nil {
		openReaders.m = map[openKey]*openReader{}
	}
	k := openKey{path, c}
	if old := openReaders.m[k]; old != nil {
		old.close()
	} else {
		openReaders.order = append(openReaders.order, k)
	}
	openReaders.m[k] = or
	for len(openReaders.order) > maxOpenReaders {
		oldest := openReaders.order[0]
		openReaders.order = openReaders.order[1:]
		if o := openReaders.m[oldest]; o != nil {
			o.close()
			delete(openReaders.m, oldest)
		}
	}
}

func unstash(path string, c fileCursor) *openReader {
	openReaders.Lock()
	defer openReaders.Unlock()
	k := openKey{path, c}
	or := openReaders.m[k]
	if or == nil {
		return nil
	}
	delete(openReaders.m, k)
	for i, o := range openReaders.order {
		if o == k {
			openReaders.order = append(openReaders.order[:i], openReaders.order[i+1:]...)
			break
		}
	}
	return or
}

// fileTracker claims a fileRestriction's positions (beacons) in order,
// keeping the cursor after the last claimed one, which is where a
// checkpoint's residual starts. It refuses every split but the checkpoint
// (fraction 0): a file is read by one loop. Its methods are safe for
// concurrent use (the runner may call TrySplit while ProcessElement
// claims).
type fileTracker struct {
	mu      sync.Mutex
	rest    fileRestriction
	stopped bool
}

// claim claims position pos (the next one) and records after, the cursor
// once it is emitted.
func (t *fileTracker) claim(pos int64, after fileCursor) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if pos != t.rest.Cursor.Beacon {
		panic(fmt.Sprintf("source: file claim of %d out of order (next %d)", pos, t.rest.Cursor.Beacon))
	}
	if t.stopped || pos >= t.rest.End {
		t.stopped = true
		return false
	}
	t.rest.Cursor = after
	if t.rest.Cursor.Beacon == pos { // a claim without a beacon (trailing dead letters)
		t.rest.Cursor.Beacon++
	}
	return true
}

// cursor is the cursor after the last claim.
func (t *fileTracker) cursor() fileCursor {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rest.Cursor
}

// finish marks the file read to its end.
func (t *fileTracker) finish() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rest.End = t.rest.Cursor.Beacon
	t.stopped = true
}

// TryClaim is not used: the reader claims with claim, which also records
// the cursor. It refuses.
func (t *fileTracker) TryClaim(any) bool { return false }

// GetError never reports an error: misuse panics.
func (t *fileTracker) GetError() error { return nil }

// TrySplit at fraction 0 checkpoints: the primary ends after the last
// claimed beacon, the residual starts at its cursor. Any other fraction is
// refused (nil residual).
func (t *fileTracker) TrySplit(fraction float64) (primary, residual any, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if fraction != 0 || t.stopped || t.rest.Cursor.Beacon >= t.rest.End {
		return t.rest, nil, nil
	}
	res := t.rest
	t.rest.End = t.rest.Cursor.Beacon
	t.stopped = true
	return t.rest, res, nil
}

// GetProgress reports beacons: claimed, and 1 while the file is not done.
func (t *fileTracker) GetProgress() (done, remaining float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped || t.rest.Cursor.Beacon >= t.rest.End {
		return float64(t.rest.Cursor.Beacon), 0
	}
	return float64(t.rest.Cursor.Beacon), 1
}

// IsDone reports whether no position is left to claim.
func (t *fileTracker) IsDone() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stopped || t.rest.Cursor.Beacon >= t.rest.End
}

// GetRestriction returns the current restriction (the primary after a split).
func (t *fileTracker) GetRestriction() any {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rest
}

// IsBounded reports whether the restriction has an end.
func (t *fileTracker) IsBounded() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rest.End != unbounded
}

// fileEstimator is the file source's watermark estimator: the data clock
// of the beacons emitted so far minus the source's Slack, never moving back
// (its state is the watermark, Unix ms). Every later beacon is stamped with
// the clock before it, which is at least that clock, so no beacon is ever
// behind the watermark; with Slack at least the pre-aggregation's allowed
// lateness plus a bucket (the fast path's default), no bucket an event
// still counts in closes before its events are read, and a replay counts
// what the one-bundle read counted.
type fileEstimator struct{ wm int64 }

func (e *fileEstimator) advance(ms int64) {
	if ms > e.wm {
		e.wm = ms
	}
}

// CurrentWatermark is the estimate described on the type.
func (e *fileEstimator) CurrentWatermark() time.Time { return time.UnixMilli(e.wm) }

// fileReader turns NDJSON lines into beacons: the part of the file source
// with no Beam in it.
type fileReader struct {
	r      *bufio.Reader
	beacon int
	prefix string // beacon ids are prefix + sequence number

	line   []byte // a line longer than the bufio buffer, assembled
	b      schemas.Beacon
	n      int64 // beacons emitted
	lineNo int64 // lines read
	clock  int64 // max event time of the beacons emitted so far, Unix ms; MinTimestamp before any
	// maxTS is the max event time in the current beacon, and first its
	// smallest: they advance the clock when the beacon is emitted.
	maxTS, first int64
	events       int64
	// lineBytes is the length of the lines in the current beacon.
	lineBytes int
	// consumed is the bytes read from r, lineStart the offset of the line
	// being parsed.
	consumed, lineStart int64
	// dead holds the fileFn's dead letters read since its last claim.
	dead []schemas.DeadLetter
}

// newFileReader returns a reader of r, which stands at cursor c.
func newFileReader(r *bufio.Reader, beacon int, prefix string, c fileCursor) *fileReader {
	fr := &fileReader{r: r, beacon: beacon, prefix: prefix}
	fr.n, fr.lineNo, fr.consumed = c.Beacon, c.Line, c.Offset
	fr.clock, fr.maxTS = c.Clock, c.Clock
	fr.b.Events = make([]schemas.Event, 0, beacon)
	return fr
}

// run reads to the end of input (eof) or until emit returns false, emitting
// each beacon with the data clock as it stood before the beacon's first
// event and the cursor just after the beacon, and each bad line as a dead
// letter. When emit returns false at a beacon that ended before the line
// just read (the beacon size limit), that line is parsed first, so that
// the reader stands, as its state says, past it.
func (fr *fileReader) run(emit func(clock int64, beacon []byte, after fileCursor) bool, dead func(schemas.DeadLetter)) (eof bool, err error) {
	if fr.b.Events == nil {
		fr.b.Events = make([]schemas.Event, 0, fr.beacon)
	}
	for {
		fr.lineStart = fr.consumed
		line, tooLong, err := fr.next()
		if len(line) > 0 || tooLong {
			fr.lineNo++
			// A binary event is never longer than its JSON line: keep the
			// beacon under MaxBeaconBytes by its lines' length.
			if fr.lineBytes+len(line) > maxBeaconLineBytes {
				more, err := fr.flush(emit, fileCursor{Offset: fr.lineStart, Line: fr.lineNo - 1})
				if err != nil {
					return false, err
				}
				fr.parse(line, tooLong, dead)
				if !more {
					return false, nil
				}
			} else {
				fr.parse(line, tooLong, dead)
			}
			if len(fr.b.Events) == fr.beacon {
				if more, err := fr.flush(emit, fileCursor{Offset: fr.consumed, Line: fr.lineNo}); err != nil || !more {
					return false, err
				}
			}
		} else if err == nil {
			fr.lineNo++ // empty line
		}
		if err == io.EOF {
			_, err := fr.flush(emit, fileCursor{Offset: fr.consumed, Line: fr.lineNo})
			return err == nil, err
		}
		if err != nil {
			return false, fmt.Errorf("line %d: %w", fr.lineNo+1, err)
		}
	}
}

// next returns the next line without its newline (and a trailing \r). A line
// over maxLineBytes is skipped and reported as tooLong, with its beginning.
// The slice is valid until the next call.
func (fr *fileReader) next() (line []byte, tooLong bool, err error) {
	fr.line = fr.line[:0]
	for {
		chunk, err := fr.r.ReadSlice('\n')
		fr.consumed += int64(len(chunk))
		if !tooLong {
			if len(fr.line) == 0 && err != bufio.ErrBufferFull {
				line = chunk // common case: the whole line in the buffer, no copy
			} else {
				fr.line = append(fr.line, chunk...)
				line = fr.line
				if len(fr.line) > maxLineBytes {
					tooLong = true
					fr.line = fr.line[:schemas.MaxDeadLetterPayload]
					line = fr.line
				}
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		if err == io.EOF && len(line) == 0 && !tooLong {
			return nil, false, io.EOF
		}
		if err == io.EOF {
			err = nil // a last line without a newline; EOF comes next call
		}
		return line, tooLong, err
	}
}

func (fr *fileReader) parse(line []byte, tooLong bool, dead func(schemas.DeadLetter)) {
	if tooLong {
		dead(deadLine(line, fmt.Sprintf("line %d: longer than %d bytes", fr.lineNo, maxLineBytes)))
		return
	}
	if len(bytes.TrimSpace(line)) == 0 {
		return
	}
	fr.b.Events = append(fr.b.Events, schemas.Event{})
	e := &fr.b.Events[len(fr.b.Events)-1]
	if err := schemas.ParseEventJSON(line, e); err != nil {
		fr.b.Events = fr.b.Events[:len(fr.b.Events)-1]
		dead(deadLine(line, fmt.Sprintf("line %d: %v", fr.lineNo, err)))
		return
	}
	fr.events++
	fr.lineBytes += len(line)
	if !e.TS.IsZero() {
		ms := e.TS.UnixMilli()
		if len(fr.b.Events) == 1 || ms < fr.first {
			fr.first = ms
		}
		fr.maxTS = max(fr.maxTS, ms)
	}
}

func deadLine(line []byte, reason string) schemas.DeadLetter {
	if len(line) > schemas.MaxDeadLetterPayload {
		line = line[:schemas.MaxDeadLetterPayload]
	}
	return schemas.DeadLetter{Stage: "source", Reason: reason, Payload: bytes.Clone(line)}
}

// flush emits the current beacon, if it has events, with after (whose
// Offset and Line the caller sets) completed: more is emit's answer (true
// when there was nothing to emit).
func (fr *fileReader) flush(emit func(int64, []byte, fileCursor) bool, after fileCursor) (more bool, err error) {
	if len(fr.b.Events) == 0 {
		return true, nil
	}
	fr.b.BeaconID = fr.prefix + strconv.FormatInt(fr.n, 10)
	data, err := schemas.MarshalBeacon(&fr.b)
	if err != nil {
		// Unreachable while binary events are shorter than their lines.
		return false, fmt.Errorf("beacon %d (before line %d): %w", fr.n, fr.lineNo, err)
	}
	fr.n++
	// The beacon carries the clock as it stood when its first event arrived
	// (the events before it), not after its last: lateness is judged against
	// what had been seen before an event, and a beacon spanning minutes of a
	// sparse stream must not make its own first events late. The first
	// beacon carries its earliest event time.
	at := fr.clock
	if at == int64(mtime.MinTimestamp) {
		at = fr.first
	}
	fr.clock = max(fr.clock, fr.maxTS)
	fr.b.Events = fr.b.Events[:0]
	fr.lineBytes = 0
	after.Beacon, after.Clock = fr.n, fr.clock
	return emit(at, data, after), nil
}
