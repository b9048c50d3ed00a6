package source

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/passert"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
	"github.com/topk-dev/topk/schemas"
)

func init() {
	register.Function3x1(beaconEventsFn)
	register.Function2x0(deadLetterKeyFn)
	register.Emitter1[string]()
}

// beaconEventsFn emits a beacon as "beacon_id @ element_ts_ms" and each of
// its events as "beacon_id event_id item ts_ms".
func beaconEventsFn(ts beam.EventTime, data []byte, emit func(string)) error {
	var r schemas.BeaconReader
	if err := r.Reset(data); err != nil {
		return err
	}
	emit(fmt.Sprintf("%s @ %d", r.BeaconID(), ts))
	var e schemas.Event
	for r.Next(&e) {
		emit(fmt.Sprintf("%s %s %s %d", r.BeaconID(), e.EventID, e.Item, e.TS.UnixMilli()))
	}
	return r.Err()
}

// deadLetterKeyFn emits "stage | line N | payload" for a dead letter whose
// reason is "line N: invalid event: ...", and the whole reason otherwise.
func deadLetterKeyFn(d schemas.DeadLetter, emit func(string)) {
	where, why, _ := strings.Cut(d.Reason, ": ")
	if !strings.HasPrefix(why, schemas.ErrInvalidEvent.Error()) {
		where = "unexpected reason " + d.Reason
	}
	emit(d.Stage + " | " + where + " | " + string(d.Payload))
}

// testEvents builds an NDJSON stream of n valid events with increasing,
// slightly disordered timestamps and bad lines at known places; it returns
// the file's lines, what beaconEventsFn should print for beacons of b events
// (each beacon stamped with the largest ts of the beacons before it, the
// first with its own smallest), and the expected dead letters as
// deadLetterKeyFn prints them.
func testEvents(n, b int) (lines []string, want []string, dead []string) {
	base := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	bad := map[int]string{
		3:  `{"event_id":"x","type":"video",`,
		4:  `not json`,
		10: `{"event_id":"e-x","type":"video","item":"v_1","ts":"2026-11-30T10:00:00Z","color":"red"}`,
		17: `{"event_id":"e-y","type":"video","item":"v_1","ts":"yesterday"}`,
		18: `[1,2]`,
	}
	k := 0
	clock, beaconMin, beaconMax := int64(0), int64(0), int64(0)
	flush := func() {
		at := clock
		if k <= b {
			at = beaconMin
		}
		want = append(want, fmt.Sprintf("f%d @ %d", (k-1)/b, at))
		clock = max(clock, beaconMax)
	}
	for i := 0; i < n; i++ {
		for line := len(lines) + 1; bad[line] != ""; line = len(lines) + 1 {
			lines = append(lines, bad[line])
			dead = append(dead, fmt.Sprintf("source | line %d | %s", line, bad[line]))
		}
		if i == 7 {
			lines = append(lines, "", "   ") // blank lines are skipped silently
		}
		// Every fifth event is 3 s late.
		ts := base.Add(time.Duration(i) * time.Second)
		if i%5 == 4 {
			ts = ts.Add(-3 * time.Second)
		}
		e := fmt.Sprintf(`{"event_id":"e-%d","type":"video","item":"v_%d","user":"u_1","ts":%q}`, i, i%7, ts.Format(time.RFC3339Nano))
		lines = append(lines, e)
		want = append(want, fmt.Sprintf("f%d e-%d v_%d %d", k/b, i, i%7, ts.UnixMilli()))
		ms := ts.UnixMilli()
		if k%b == 0 {
			beaconMin, beaconMax = ms, ms
		}
		beaconMin, beaconMax = min(beaconMin, ms), max(beaconMax, ms)
		k++
		if k%b == 0 || i == n-1 {
			flush()
		}
	}
	return lines, want, dead
}

func writeFile(t *testing.T, path string, lines []string) {
	t.Helper()
	var buf bytes.Buffer
	var w interface {
		Write([]byte) (int, error)
	} = &buf
	var zw *gzip.Writer
	if strings.HasSuffix(path, ".gz") {
		zw = gzip.NewWriter(&buf)
		w = zw
	}
	for i, l := range lines {
		sep := "\n"
		if i == len(lines)-1 {
			sep = "" // no newline at the end of the last line
		}
		if i%2 == 1 {
			sep = "\r\n"
		}
		fmt.Fprint(w, l+sep)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestFileSource: on Prism, every valid event of a plain and a gzip NDJSON
// file comes out once, in beacons of at most B events in file order, each
// beacon timestamped with the data clock before it; every bad
// line comes out as a dead letter with its line number and reason.
func TestFileSource(t *testing.T) {
	const n, b = 53, 10
	lines, want, dead := testEvents(n, b)
	for _, name := range []string{"events.ndjson", "events.ndjson.gz"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), name)
			writeFile(t, path, lines)
			spec, err := ParseSpec(fmt.Sprintf("file:%s?beacon=%d", path, b))
			if err != nil {
				t.Fatal(err)
			}
			p, s := beam.NewPipelineWithRoot()
			beacons, deadLetters := Read(s, spec, Options{})
			passert.Count(s, beacons, "beacons", (n+b-1)/b)
			passert.EqualsList(s, beam.ParDo(s, beaconEventsFn, beacons), want)
			passert.EqualsList(s, beam.ParDo(s, deadLetterKeyFn, deadLetters), dead)
			if err := ptest.Run(p); err != nil {
				t.Fatalf("pipeline: %v", err)
			}
		})
	}
}

// TestFileReader checks, without a runner, beacon boundaries, ids, the data
// clock and the dead letters' line numbers and payloads.
func TestFileReader(t *testing.T) {
	lines, wantStrs, dead := testEvents(23, 4)
	var in bytes.Buffer
	for _, l := range lines {
		in.WriteString(l + "\n")
	}
	fr := newFileReader(bufio.NewReader(&in), 4, "f", startCursor)
	type out struct {
		clock  int64
		id     string
		events int
	}
	var got []out
	var gotDead []schemas.DeadLetter
	_, err := fr.run(func(clock int64, data []byte, _ fileCursor) bool {
		var bc schemas.Beacon
		if err := schemas.UnmarshalBeacon(data, &bc); err != nil {
			t.Fatal(err)
		}
		got = append(got, out{clock: clock, id: bc.BeaconID, events: len(bc.Events)})
		return true
	}, func(d schemas.DeadLetter) { gotDead = append(gotDead, d) })
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 6 {
		t.Fatalf("%d beacons, want 6 (23 events by 4)", len(got))
	}
	wantClock := map[string]string{}
	for _, w := range wantStrs {
		if id, at, ok := strings.Cut(w, " @ "); ok {
			wantClock[id] = at
		}
	}
	prev := int64(0)
	for i, o := range got {
		if want := fmt.Sprintf("f%d", i); o.id != want {
			t.Errorf("beacon %d id %q, want %q", i, o.id, want)
		}
		if want := min(4, 23-4*i); o.events != want {
			t.Errorf("beacon %d has %d events, want %d", i, o.events, want)
		}
		if got := strconv.FormatInt(o.clock, 10); got != wantClock[o.id] {
			t.Errorf("beacon %s clock %s, want %s", o.id, got, wantClock[o.id])
		}
		if o.clock < prev {
			t.Errorf("beacon %d clock %d went back from %d", i, o.clock, prev)
		}
		prev = o.clock
	}
	if len(gotDead) != len(dead) {
		t.Fatalf("%d dead letters, want %d", len(gotDead), len(dead))
	}
	for i, d := range gotDead {
		var key string
		deadLetterKeyFn(d, func(k string) { key = k })
		if key != dead[i] {
			t.Errorf("dead letter %d = %q, want %q", i, key, dead[i])
		}
	}
	if want := "line 3: invalid event"; !strings.HasPrefix(gotDead[0].Reason, want) {
		t.Errorf("first dead letter reason %q, want prefix %q", gotDead[0].Reason, want)
	}
}

// TestFileReaderLongLine: a line over the limit is a dead letter holding its
// beginning, and reading goes on.
func TestFileReaderLongLine(t *testing.T) {
	long := `{"event_id":"` + strings.Repeat("x", maxLineBytes) + `"}`
	ok := `{"event_id":"e","type":"video","item":"v_1","ts":"2026-11-30T10:00:00Z"}`
	in := strings.NewReader(ok + "\n" + long + "\n" + ok + "\n")
	fr := newFileReader(bufio.NewReaderSize(in, 4096), 10, "f", startCursor)
	var events int
	var gotDead []schemas.DeadLetter
	_, err := fr.run(func(_ int64, data []byte, _ fileCursor) bool {
		var r schemas.BeaconReader
		if err := r.Reset(data); err != nil {
			t.Fatal(err)
		}
		events += r.Len()
		return true
	}, func(d schemas.DeadLetter) { gotDead = append(gotDead, d) })
	if err != nil {
		t.Fatal(err)
	}
	if events != 2 || len(gotDead) != 1 {
		t.Fatalf("%d events and %d dead letters, want 2 and 1", events, len(gotDead))
	}
	if d := gotDead[0]; !strings.Contains(d.Reason, "line 2: longer than") || len(d.Payload) != schemas.MaxDeadLetterPayload {
		t.Errorf("dead letter reason %q, payload %d bytes", d.Reason, len(d.Payload))
	}
}

// startCursor is a new reader's cursor: the start of the file.
var startCursor = fileCursor{Clock: int64(mtime.MinTimestamp)}

// drive runs fn over the file as a runner would: a call per restriction,
// each checkpoint's residual the next call's. After a call's split-th
// beacon (0: never) the "runner" splits the restriction at fraction 0
// from outside, as it may at any time (it lands between a beacon's claim
// and the next: the source stops there and the residual goes on from
// the split). reopen empties openReaders before each call, so every
// resumed call opens the file again and skips to its cursor. It returns
// what beaconEventsFn and deadLetterKeyFn print, in order, the calls and
// the watermark estimator's state at the end, and checks that no beacon
// is stamped behind the watermark reported before it.
func drive(t *testing.T, fn *fileFn, split int, reopen bool) (got, gotDead []string, calls int, wm int64) {
	t.Helper()
	rest := fn.CreateInitialRestriction(nil)
	wmState := fn.InitialWatermarkEstimatorState(0, rest, nil)
	for ; calls < 10000; calls++ {
		if reopen {
			openReaders.Lock()
			for _, or := range openReaders.m {
				or.close()
			}
			openReaders.m, openReaders.order = nil, nil
			openReaders.Unlock()
		}
		rt := fn.CreateTracker(rest)
		we := fn.CreateWatermarkEstimator(wmState)
		n := 0
		var residual any
		emit := func(ts beam.EventTime, data []byte) {
			if wm := we.CurrentWatermark().UnixMilli(); int64(ts) < wm {
				t.Fatalf("beacon stamped %d, behind the watermark %d", ts, wm)
			}
			if err := beaconEventsFn(ts, data, func(s string) { got = append(got, s) }); err != nil {
				t.Fatal(err)
			}
			if n++; n == split {
				var err error
				if _, residual, err = rt.TrySplit(0); err != nil {
					t.Fatal(err)
				}
			}
		}
		dead := func(d schemas.DeadLetter) { deadLetterKeyFn(d, func(s string) { gotDead = append(gotDead, s) }) }
		pc, err := fn.ProcessElement(context.Background(), we, rt, nil, emit, dead)
		if err != nil {
			t.Fatal(err)
		}
		wmState = fn.WatermarkEstimatorState(we)
		if pc.ShouldResume() {
			if residual != nil {
				t.Fatal("a call resumed after the runner split it")
			}
			if _, residual, err = rt.TrySplit(0); err != nil {
				t.Fatal(err)
			}
		}
		if residual == nil {
			if !rt.IsDone() {
				t.Fatal("stopped without a residual, not done")
			}
			return got, gotDead, calls + 1, wmState
		}
		rest = residual.(fileRestriction)
	}
	t.Fatal("no end after 10,000 calls")
	return nil, nil, 0, 0
}

// TestFileSourceResumes: read in calls that checkpoint after every beacon,
// or are split by the runner in the middle of a call, with the reader kept
// between calls or the file opened again at the cursor each time, plain or
// gzip, the file source emits exactly the beacons and dead letters of one
// pass, in order, never behind its watermark; beacons that end at the size
// limit (before the line just read) resume at that line.
func TestFileSourceResumes(t *testing.T) {
	const b = 20
	lines, want, dead := testEvents(53, b) // 3 beacons by count
	// Big events (padded with JSON whitespace: an event's fields have
	// length limits): 20 of them pass maxBeaconLineBytes twice, so
	// beacons also end at the size limit, with a line read past their end.
	pad := strings.Repeat(" ", min(maxLineBytes-200, maxBeaconLineBytes/3))
	for i := 0; i < 20; i++ {
		lines = append(lines, fmt.Sprintf(`{"event_id":"b-%d",%s"type":"video","item":"v_%d","ts":"2026-11-30T11:00:00Z"}`, i, pad, i))
	}
	lines = append(lines, "not json either") // a dead letter after the last beacon
	for _, name := range []string{"events.ndjson", "events.ndjson.gz"} {
		path := filepath.Join(t.TempDir(), name)
		writeFile(t, path, lines)
		// One pass, one call: what every other way of reading must give.
		one := &fileFn{Path: path, Beacon: b, Slack: time.Second, BundleTime: time.Hour}
		wantAll, wantDead, calls, _ := drive(t, one, 0, false)
		if calls != 1 {
			t.Fatalf("%s: one pass took %d calls", name, calls)
		}
		beacons := 0
		for _, l := range wantAll {
			if strings.Contains(l, " @ ") {
				beacons++
			}
		}
		// By count alone: 73 events in 4 beacons.
		if n := len(wantAll) - beacons; n != 73 || beacons < 5 || !slices.Equal(wantDead[:len(dead)], dead) || len(wantDead) != len(dead)+1 {
			t.Fatalf("%s: one pass: %d events in %d beacons, %d dead letters; want 73 in 5 or more (the size limit), %d", name, n, beacons, len(wantDead), len(dead)+1)
		}
		if !isSubset(want, wantAll) {
			t.Fatalf("%s: one pass does not hold the small events as TestFileSource reads them", name)
		}
		for _, c := range []struct {
			split  int
			reopen bool
		}{{0, false}, {0, true}, {1, false}, {2, true}} {
			fn := &fileFn{Path: path, Beacon: b, Slack: time.Second} // BundleTime 0: a checkpoint after every beacon
			got, gotDead, calls, wm := drive(t, fn, c.split, c.reopen)
			// The watermark moved with the reads: the data clock (the
			// big events' ts, the file's latest) minus the slack.
			if want := time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC).Add(-time.Second).UnixMilli(); wm != want {
				t.Errorf("%s split %d reopen %v: watermark %d at the end, want %d", name, c.split, c.reopen, wm, want)
			}
			if !slices.Equal(got, wantAll) || !slices.Equal(gotDead, wantDead) {
				t.Errorf("%s split %d reopen %v: %d calls: %d lines and %d dead letters, not one pass's (%d, %d) in order", name, c.split, c.reopen, calls, len(got), len(gotDead), len(wantAll), len(wantDead))
			}
			if calls < beacons {
				t.Errorf("%s split %d reopen %v: %d calls, want one per beacon at least", name, c.split, c.reopen, calls)
			}
		}
	}
}

// isSubset reports whether every string of a is in b (as many times).
func isSubset(a, b []string) bool {
	n := map[string]int{}
	for _, s := range b {
		n[s]++
	}
	for _, s := range a {
		if n[s]--; n[s] < 0 {
			return false
		}
	}
	return true
}

// TestFileSourceBundleBeacons: with BundleBeacons a call checkpoints after
// that many beacons whatever the time (bundle boundaries at fixed places in
// the file): the same beacons and dead letters as one pass, in b/2 + 1
// calls of two beacons (the last finds the end of the file).
func TestFileSourceBundleBeacons(t *testing.T) {
	lines, _, _ := testEvents(53, 5)
	path := filepath.Join(t.TempDir(), "events.ndjson")
	writeFile(t, path, lines)
	wantAll, wantDead, calls, _ := drive(t, &fileFn{Path: path, Beacon: 5, Slack: time.Second, BundleTime: time.Hour}, 0, false)
	beacons := 0
	for _, l := range wantAll {
		if strings.Contains(l, " @ ") {
			beacons++
		}
	}
	if calls != 1 || beacons < 5 {
		t.Fatalf("one pass: %d calls, %d beacons; want 1 call, 5 or more beacons", calls, beacons)
	}
	got, gotDead, calls, _ := drive(t, &fileFn{Path: path, Beacon: 5, Slack: time.Second, BundleTime: time.Hour, BundleBeacons: 2}, 0, false)
	if !slices.Equal(got, wantAll) || !slices.Equal(gotDead, wantDead) {
		t.Fatalf("two beacons a call: %d lines, %d dead letters; want %d, %d as one pass", len(got), len(gotDead), len(wantAll), len(wantDead))
	}
	if calls != beacons/2+1 {
		t.Fatalf("two beacons a call: %d calls for %d beacons, want %d", calls, beacons, beacons/2+1)
	}
}
