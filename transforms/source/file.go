package source

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/topk-dev/topk/schemas"
)

func init() {
	register.DoFn4x1[context.Context, []byte, func(beam.EventTime, []byte), func(schemas.DeadLetter), error](&fileFn{})
	register.Emitter1[schemas.DeadLetter]()
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
)

// fileFn reads an NDJSON file of events in order into beacons. It runs once,
// on the single Impulse element, so the file is read sequentially by one
// worker: arrival order is kept and the data clock is exact.
type fileFn struct {
	Path   string
	Beacon int
}

func (fn *fileFn) ProcessElement(ctx context.Context, _ []byte, emit func(beam.EventTime, []byte), dead func(schemas.DeadLetter)) error {
	f, err := os.Open(fn.Path)
	if err != nil {
		return fmt.Errorf("file source: %w", err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(fn.Path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return fmt.Errorf("file source %s: gzip: %w", fn.Path, err)
		}
		defer zr.Close()
		r = zr
	}
	fr := fileReader{
		r:      bufio.NewReaderSize(r, 256<<10),
		beacon: fn.Beacon,
		prefix: "f",
	}
	err = fr.run(func(clock int64, data []byte) {
		fileBeacons.Inc(ctx, 1)
		emit(mtime.Time(clock), data)
	}, func(d schemas.DeadLetter) {
		fileBadLines.Inc(ctx, 1)
		dead(d)
	})
	fileEvents.Inc(ctx, fr.events)
	if err != nil {
		return fmt.Errorf("file source %s: %w", fn.Path, err)
	}
	return nil
}

// fileReader turns NDJSON lines into beacons: the part of the file source
// with no Beam in it.
type fileReader struct {
	r      *bufio.Reader
	beacon int
	prefix string // beacon ids are prefix + sequence number

	line   []byte // a line longer than the bufio buffer, assembled
	b      schemas.Beacon
	n      int   // beacons emitted
	lineNo int   // lines read
	clock  int64 // max event time of the beacons emitted so far, Unix ms; MinTimestamp before any
	// maxTS is the max event time in the current beacon, and first its
	// smallest: they advance the clock when the beacon is emitted.
	maxTS, first int64
	events       int64
	// lineBytes is the length of the lines in the current beacon.
	lineBytes int
}

// run reads to the end of input, emitting each beacon with the data clock
// as it stood before the beacon's first event, and each bad line as a dead
// letter.
func (fr *fileReader) run(emit func(clock int64, beacon []byte), dead func(schemas.DeadLetter)) error {
	fr.clock, fr.maxTS = int64(mtime.MinTimestamp), int64(mtime.MinTimestamp)
	fr.b.Events = make([]schemas.Event, 0, fr.beacon)
	for {
		line, tooLong, err := fr.next()
		if len(line) > 0 || tooLong {
			fr.lineNo++
			// A binary event is never longer than its JSON line: keep the
			// beacon under MaxBeaconBytes by its lines' length.
			if fr.lineBytes+len(line) > maxBeaconLineBytes {
				if err := fr.flush(emit); err != nil {
					return err
				}
			}
			fr.parse(line, tooLong, dead)
			if len(fr.b.Events) == fr.beacon {
				if err := fr.flush(emit); err != nil {
					return err
				}
			}
		} else if err == nil {
			fr.lineNo++ // empty line
		}
		if err == io.EOF {
			return fr.flush(emit)
		}
		if err != nil {
			return fmt.Errorf("line %d: %w", fr.lineNo+1, err)
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

func (fr *fileReader) flush(emit func(int64, []byte)) error {
	if len(fr.b.Events) == 0 {
		return nil
	}
	fr.b.BeaconID = fr.prefix + strconv.Itoa(fr.n)
	data, err := schemas.MarshalBeacon(&fr.b)
	if err != nil {
		// Unreachable while binary events are shorter than their lines.
		return fmt.Errorf("beacon %d (before line %d): %w", fr.n, fr.lineNo, err)
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
	emit(at, data)
	fr.clock = max(fr.clock, fr.maxTS)
	fr.b.Events = fr.b.Events[:0]
	fr.lineBytes = 0
	return nil
}
