package fastpath

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/teststream"

	"github.com/topk-dev/topk/schemas"
)

// Window semantics on Prism, fed by a TestStream through BuildFrom. A
// TestStream element is one binary beacon, timestamped on the source's clock
// (as the file source does: the data clock when the beacon arrives, never
// behind the watermark), and the watermark is advanced after every add, so
// every stage sees the stream in order.

func init() {
	register.Function2x0(noSourceDeadFn)
}

// noSourceDeadFn stands in for the source's dead letters: it has none.
func noSourceDeadFn(_ []byte, _ func(schemas.DeadLetter)) {}

// windowT0 starts the streams: aligned to the hour, so every 1m, 5m and 1h
// window boundary is a multiple of the window's period from it.
var windowT0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

const bucket = 10 * time.Second

// fedEvent is an event the test expects the pipeline to count, with when and
// at which watermark it arrived.
type fedEvent struct {
	ev      schemas.Event
	arrival time.Time // its beacon's element timestamp (the source clock)
	wm      time.Time // the watermark when its beacon was added
}

// stream builds a TestStream of beacons and remembers what it fed.
type stream struct {
	t   *testing.T
	ts  teststream.Config
	wm  time.Time // zero until the first advance
	fed []fedEvent
	seq int
}

func newStream(t *testing.T) *stream {
	return &stream{t: t, ts: teststream.NewConfig()}
}

// ev is a valid "video" event of item at ts with a fresh event_id.
func (s *stream) ev(item string, ts time.Time) schemas.Event {
	s.seq++
	return schemas.Event{EventID: "e" + strconv.Itoa(s.seq), Type: "video", Item: item, TS: ts}
}

// add adds one beacon of events with element timestamp at; every event is
// expected to be counted unless it is later than the allowed lateness.
func (s *stream) add(at time.Time, events ...schemas.Event) {
	s.t.Helper()
	s.seq++
	b, err := schemas.MarshalBeacon(&schemas.Beacon{BeaconID: "b" + strconv.Itoa(s.seq), Events: events})
	if err != nil {
		s.t.Fatal(err)
	}
	s.addRaw(at, b)
	for _, e := range events {
		s.fed = append(s.fed, fedEvent{ev: e, arrival: at, wm: s.wm})
	}
}

// addRaw adds one element of arbitrary bytes at at; nothing in it is
// expected to be counted.
func (s *stream) addRaw(at time.Time, b []byte) {
	s.t.Helper()
	if !s.wm.IsZero() && at.Before(s.wm) {
		s.t.Fatalf("beacon at %v behind the watermark %v: the source clock never is", at, s.wm)
	}
	if err := s.ts.AddElements(at.UnixMilli(), b); err != nil {
		s.t.Fatal(err)
	}
}

// advance moves the watermark to to.
func (s *stream) advance(to time.Time) {
	s.t.Helper()
	if err := s.ts.AdvanceWatermark(to.UnixMilli()); err != nil {
		s.t.Fatal(err)
	}
	s.wm = to
}

// windowRun is what one run published.
type windowRun struct {
	metrics Metrics
	lists   map[schemas.Window]map[time.Time]*schemas.List // by window, as_of
	files   int
	dead    []schemas.DeadLetter
}

// run builds the fast path after a TestStream of s on Prism (the watermark
// goes to infinity at the end, so every window fires) and reads back every
// list file and dead letter.
func (s *stream) run(mutate func(*Config)) windowRun {
	t := s.t
	t.Helper()
	if err := s.ts.AdvanceWatermarkToInfinity(); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cfg := DefaultConfig()
	cfg.Publish.ListsOut = filepath.Join(out, "lists")
	cfg.DeadLetterDir = filepath.Join(out, "deadletter")
	// These tests are about the top lists' windows: the lists counter and
	// the files must match one to one (trending: trend_test.go).
	cfg.Trending = false
	if mutate != nil {
		mutate(&cfg)
	}
	p, root := beam.NewPipelineWithRoot()
	beacons := teststream.Create(root, s.ts) // the first transform
	srcDead := beam.ParDo(root, noSourceDeadFn, beacons)
	if err := BuildFrom(root, beacons, srcDead, cfg); err != nil {
		t.Fatal(err)
	}
	m, err := BeamRunner(context.Background(), p)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	r := windowRun{metrics: m, lists: map[schemas.Window]map[time.Time]*schemas.List{}}
	err = filepath.WalkDir(cfg.Publish.ListsOut, func(path string, d os.DirEntry, err error) error {
		if os.IsNotExist(err) {
			return nil
		}
		if err == nil && d.IsDir() && d.Name() == string(schemas.WindowTrending) {
			return filepath.SkipDir // trending lists are checked by trend_test.go
		}
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		l, err := schemas.UnmarshalList(b)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if want := strconv.FormatInt(l.AsOf.UnixMilli(), 10) + ".json"; filepath.Base(path) != want {
			return fmt.Errorf("%s holds the list as of %v", path, l.AsOf)
		}
		if r.lists[l.Window] == nil {
			r.lists[l.Window] = map[time.Time]*schemas.List{}
		}
		r.lists[l.Window][l.AsOf.UTC()] = l
		r.files++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	names, _ := filepath.Glob(filepath.Join(cfg.DeadLetterDir, "*.ndjson"))
	for _, name := range names {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var d schemas.DeadLetter
			if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			r.dead = append(r.dead, d)
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// expected is the model of what each list of window w must count, from what
// was fed: an event is dropped when its bucket ended at least the allowed
// lateness before its beacon's element time; otherwise it is counted, in its
// own bucket, in every window of w that holds its bucket and had not fired
// when it arrived (the window's end is after the watermark then). A window
// that already fired is never published again.
func (s *stream) expected(w schemas.Window, lateness time.Duration) map[time.Time]map[string]uint64 {
	out := map[time.Time]map[string]uint64{}
	for _, f := range s.fed {
		b := f.ev.TS.Truncate(bucket)
		if !b.Add(bucket + lateness).After(f.arrival) {
			continue // later than the allowed lateness
		}
		first := b.Truncate(w.Period()).Add(w.Period()) // the first window end after b
		for end := first; end.Sub(b) <= w.Length(); end = end.Add(w.Period()) {
			if !end.After(f.wm) {
				continue // fired before the event arrived
			}
			if out[end] == nil {
				out[end] = map[string]uint64{}
			}
			out[end][f.ev.Item]++
		}
	}
	return out
}

// checkAgainstModel: every window of cfg's windows has exactly the lists the
// model expects, each counting exactly the model's counts (small data:
// every item is tracked, so count == lower == exact and the list is
// complete), and nothing was published twice.
func checkAgainstModel(t *testing.T, s *stream, r windowRun, windows []schemas.Window, lateness time.Duration) {
	t.Helper()
	total := 0
	for _, w := range windows {
		want := s.expected(w, lateness)
		total += len(want)
		got := r.lists[w]
		for _, end := range slices.SortedFunc(maps.Keys(want), time.Time.Compare) {
			l := got[end]
			if l == nil {
				t.Errorf("%s: no list as of %s", w, end.Format(time.TimeOnly))
				continue
			}
			checkCounts(t, l, want[end])
		}
		for end := range got {
			if want[end] == nil {
				t.Errorf("%s: unexpected list as of %s: %v", w, end.Format(time.TimeOnly), got[end].Items)
			}
		}
	}
	if int64(r.files) != r.metrics["lists"] || r.files != total {
		t.Errorf("%d lists published (counter), %d files, want %d: a list was republished or missed", r.metrics["lists"], r.files, total)
	}
}

// checkCounts: l lists exactly the items of want, ranked, each with count
// and lower equal to its exact count.
func checkCounts(t *testing.T, l *schemas.List, want map[string]uint64) {
	t.Helper()
	name := string(l.Window) + "@" + l.AsOf.UTC().Format(time.TimeOnly)
	if l.Type != "video" || l.Scope != schemas.ScopeGlobal {
		t.Errorf("%s: list %s/%s", name, l.Type, l.Scope)
	}
	if l.Version != l.AsOf.Unix() || !l.Complete || l.MaxOvercount != 0 {
		t.Errorf("%s: version %d complete %v max_overcount %d, want %d, true, 0", name, l.Version, l.Complete, l.MaxOvercount, l.AsOf.Unix())
	}
	got := map[string]uint64{}
	for i, e := range l.Items {
		if e.Count != e.Lower {
			t.Errorf("%s: %s count %d lower %d: small data must be exact", name, e.Item, e.Count, e.Lower)
		}
		if i > 0 && e.Count > l.Items[i-1].Count {
			t.Errorf("%s: rank %d (%d) above rank %d (%d)", name, e.Rank, e.Count, l.Items[i-1].Rank, l.Items[i-1].Count)
		}
		got[e.Item] = e.Count
	}
	if !maps.Equal(got, want) {
		t.Errorf("%s: counts %v, want %v", name, got, want)
	}
}

// at is windowT0 plus d.
func at(d time.Duration) time.Time { return windowT0.Add(d) }

// TestWindowOneMinuteSlides: over two minutes of event time with known
// per-bucket counts, the 1m list is published at every 10 s boundary while
// its window holds events (as_of T0+10s ... T0+170s), and each list counts
// exactly the sum of the six 10 s buckets it covers: it slides, it never
// resets, skips or double-counts a bucket.
func TestWindowOneMinuteSlides(t *testing.T) {
	const buckets = 12
	s := newStream(t)
	perBucket := make([]map[string]uint64, buckets)
	for b := range buckets {
		perBucket[b] = map[string]uint64{
			"a": uint64(b + 1),  // grows
			"b": uint64(12 - b), // shrinks
		}
		if b%3 == 0 {
			perBucket[b]["c"] = 20 // comes and goes
		}
		start := at(time.Duration(b) * bucket)
		// Two beacons per bucket, events spread over it in time order, each
		// stamped with its last event's ts (the source clock); the
		// watermark follows each.
		var events []schemas.Event
		for _, item := range slices.Sorted(maps.Keys(perBucket[b])) {
			for i := range perBucket[b][item] {
				events = append(events, s.ev(item, start.Add(time.Duration(i%10)*time.Second+time.Duration(i)*time.Millisecond)))
			}
		}
		slices.SortStableFunc(events, func(x, y schemas.Event) int { return x.TS.Compare(y.TS) })
		half := len(events) / 2
		for _, part := range [][]schemas.Event{events[:half], events[half:]} {
			clock := part[len(part)-1].TS
			s.add(clock, part...)
			s.advance(clock.Add(time.Millisecond))
		}
		s.advance(start.Add(bucket))
	}
	r := s.run(func(c *Config) { c.Windows = []schemas.Window{schemas.Window1m} })
	if r.metrics["events"] != int64(len(s.fed)) || r.metrics["late_dropped"] != 0 || r.metrics["dead_letters"] != 0 {
		t.Fatalf("metrics %v, want %d events, none late or dead", r.metrics, len(s.fed))
	}
	// Directly from the per-bucket table: list k covers buckets k-6 .. k-1.
	for k := 1; k <= buckets+5; k++ {
		end := at(time.Duration(k) * bucket)
		want := map[string]uint64{}
		for b := max(0, k-6); b < min(k, buckets); b++ {
			for item, c := range perBucket[b] {
				want[item] += c
			}
		}
		l := r.lists[schemas.Window1m][end]
		if l == nil {
			t.Fatalf("no 1m list as of %s", end.Format(time.TimeOnly))
		}
		checkCounts(t, l, want)
	}
	if n := len(r.lists[schemas.Window1m]); n != buckets+5 || r.metrics["lists"] != int64(n) {
		t.Errorf("%d 1m lists (%d published), want %d, one per 10 s boundary", n, r.metrics["lists"], buckets+5)
	}
	checkAgainstModel(t, s, r, []schemas.Window{schemas.Window1m}, DefaultConfig().Preagg.AllowedLateness)
}

// TestWindowLateData: allowed lateness 2 m. Three minutes of on-time data
// (item "base", one event per bucket) plus late beacons, each stamped with
// the source clock when it arrives (the watermark then, or just after):
//
//   - "inside": ts in bucket [T0+20s, T0+30s), arriving 30 s after the
//     watermark passed the bucket (clock T0+60s), with three more "base"
//     events of that bucket. They are counted in their own bucket, in every
//     1m, 5m and 1h window holding it that had not fired when they arrived,
//     added to what those windows counted on time: 1m as of T0+70s and
//     T0+80s, 5m as of T0+70s ... T0+320s, 1h from T0+2m on. The windows
//     that already fired (1m and 5m as of T0+30s ... T0+60s, 1h as of T0+1m)
//     keep their on-time counts and are not published again.
//   - "edge": ts in bucket [T0+10s, T0+20s), arriving 1 ms before its
//     lateness ends (clock T0+139.999s): still counted, in the 5m windows
//     as of T0+140s ... T0+310s and the 1h windows from T0+3m on.
//   - "beyond": ts in bucket [T0, T0+10s), arriving at T0+140s, 10 s after
//     bucket end + lateness: counted nowhere, and late_dropped moves.
//
// Then every list of every window is checked against the model (expected).
func TestWindowLateData(t *testing.T) {
	const buckets = 18
	lateness := 2 * time.Minute
	s := newStream(t)
	for b := range buckets {
		start := at(time.Duration(b) * bucket)
		s.add(start.Add(5*time.Second), s.ev("base", start.Add(5*time.Second)))
		switch start {
		case at(130 * time.Second):
			// The watermark is at T0+130s: one more beacon just before the
			// clock reaches bucket [T0+10s, T0+20s)'s end + lateness.
			s.advance(start.Add(6 * time.Second))
			s.add(at(139*time.Second+999*time.Millisecond), s.ev("edge", at(15*time.Second)))
		}
		s.advance(start.Add(bucket))
		switch s.wm {
		case at(60 * time.Second):
			// With it, three more of an item already counted on time in
			// that bucket: its windows count both, never one or the other.
			s.add(s.wm, s.ev("inside", at(25*time.Second)),
				s.ev("base", at(21*time.Second)), s.ev("base", at(22*time.Second)), s.ev("base", at(29*time.Second)))
			s.advance(s.wm.Add(time.Second))
		case at(140 * time.Second):
			s.add(s.wm, s.ev("beyond", at(5*time.Second)))
			s.advance(s.wm.Add(time.Second))
		}
	}
	windows := []schemas.Window{schemas.Window1m, schemas.Window5m, schemas.Window1h}
	r := s.run(func(c *Config) {
		c.Windows = windows
		c.Preagg.AllowedLateness = lateness
	})
	if r.metrics["events"] != buckets+5 || r.metrics["late_dropped"] != 1 {
		t.Errorf("metrics %v, want %d events counted and 1 late_dropped", r.metrics, buckets+5)
	}

	// The late events, spelled out.
	count := func(w schemas.Window, end time.Time, item string) uint64 {
		if l := r.lists[w][end]; l != nil {
			for _, e := range l.Items {
				if e.Item == item {
					return e.Count
				}
			}
		}
		return 0
	}
	if c := count(schemas.Window1m, at(60*time.Second), "base"); c != 6 {
		t.Errorf("1m@T0+60s (fired before the late beacon) counts base %d, want its 6 on-time events", c)
	}
	if c := count(schemas.Window1m, at(70*time.Second), "base"); c != 6+3 {
		t.Errorf("1m@T0+70s counts base %d, want 6 on time + 3 late", c)
	}
	for k := 3; k <= 8; k++ {
		end := at(time.Duration(k) * bucket)
		if want := k >= 7; (count(schemas.Window1m, end, "inside") == 1) != want {
			t.Errorf("1m@%s: counts the late event inside the lateness: %v, want %v", end.Format(time.TimeOnly), !want, want)
		}
	}
	for k := 3; k <= 32; k++ {
		end := at(time.Duration(k) * bucket)
		if want := k >= 7; (count(schemas.Window5m, end, "inside") == 1) != want {
			t.Errorf("5m@%s: counts the late event inside the lateness: %v, want %v", end.Format(time.TimeOnly), !want, want)
		}
		if want := k >= 14 && k <= 31; (count(schemas.Window5m, end, "edge") == 1) != want {
			t.Errorf("5m@%s: counts the event 1 ms inside the lateness: %v, want %v", end.Format(time.TimeOnly), !want, want)
		}
	}
	for k := 1; k <= 60; k++ {
		end := at(time.Duration(k) * time.Minute)
		if want := k >= 2; (count(schemas.Window1h, end, "inside") == 1) != want {
			t.Errorf("1h@%s: counts the late event inside the lateness: %v, want %v", end.Format(time.TimeOnly), !want, want)
		}
		if want := k >= 3; (count(schemas.Window1h, end, "edge") == 1) != want {
			t.Errorf("1h@%s: counts the event 1 ms inside the lateness: %v, want %v", end.Format(time.TimeOnly), !want, want)
		}
	}
	for w, byEnd := range r.lists {
		for end := range byEnd {
			if count(w, end, "beyond") != 0 {
				t.Errorf("%s@%s counts the event beyond the allowed lateness", w, end.Format(time.TimeOnly))
			}
		}
	}
	checkAgainstModel(t, s, r, windows, lateness)
}

// TestWindowDeadLetters: a malformed beacon and an invalid event go to the
// dead-letter files with their reasons (the valid event beside the invalid
// one is counted), the counters move, and the stream goes on: the buckets
// after them are counted exactly.
func TestWindowDeadLetters(t *testing.T) {
	s := newStream(t)
	garbage := []byte("this is not a beacon")
	var invalid schemas.Event
	for b := range 6 {
		start := at(time.Duration(b) * bucket)
		s.add(start.Add(2*time.Second), s.ev("x", start.Add(time.Second)), s.ev("y", start.Add(2*time.Second)))
		s.advance(start.Add(3 * time.Second))
		switch b {
		case 1:
			s.addRaw(start.Add(4*time.Second), garbage)
			s.advance(start.Add(5 * time.Second))
		case 2:
			// One beacon: an invalid event, then a valid one.
			invalid = s.ev("x", start.Add(4*time.Second))
			invalid.Type = "Not A Type"
			valid := s.ev("y", start.Add(4*time.Second))
			beacon, err := schemas.MarshalBeacon(&schemas.Beacon{BeaconID: "mixed", Events: []schemas.Event{invalid, valid}})
			if err != nil {
				t.Fatal(err)
			}
			s.addRaw(start.Add(4*time.Second), beacon)
			s.fed = append(s.fed, fedEvent{ev: valid, arrival: start.Add(4 * time.Second), wm: s.wm})
			s.advance(start.Add(5 * time.Second))
		}
		s.advance(start.Add(bucket))
	}
	r := s.run(func(c *Config) { c.Windows = []schemas.Window{schemas.Window1m} })
	m := r.metrics
	if m["dead_letters"] != 2 || m["bad_beacons"] != 1 || m["bad_events"] != 1 || m["events"] != int64(len(s.fed)) || m["late_dropped"] != 0 {
		t.Errorf("metrics %v, want 2 dead letters (1 bad beacon, 1 bad event), %d events, none late", m, len(s.fed))
	}
	if len(r.dead) != 2 {
		t.Fatalf("dead letters %+v, want 2", r.dead)
	}
	slices.SortFunc(r.dead, func(a, b schemas.DeadLetter) int { return strings.Compare(a.Stage, b.Stage) })
	if d := r.dead[0]; d.Stage != "decode" || !strings.Contains(d.Reason, schemas.ErrBadBeacon.Error()) || string(d.Payload) != string(garbage) || !d.At.Equal(at(14*time.Second)) {
		t.Errorf("malformed beacon's dead letter %+v, want stage decode, a bad-beacon reason, the bytes, at its element time", d)
	}
	if d := r.dead[1]; d.Stage != "validate" || !strings.Contains(d.Reason, schemas.ErrInvalidEvent.Error()) || !strings.Contains(d.Reason, "type") || d.EventID != invalid.EventID || !d.At.Equal(invalid.TS) {
		t.Errorf("invalid event's dead letter %+v, want stage validate, an invalid-type reason, event_id %s, at its ts", d, invalid.EventID)
	}
	checkAgainstModel(t, s, r, []schemas.Window{schemas.Window1m}, DefaultConfig().Preagg.AllowedLateness)
}

// TestCutN: the default cut per (list, partition) is four shares of K +
// margin for the lists with the fewest partitions (region lists, 4 of 16,
// or country lists if they have fewer, when there are scopes), at least a
// quarter of N; an explicit one is kept.
func TestCutN(t *testing.T) {
	c := DefaultConfig() // K 1,000 + margin 100, N 4,096, 16 partitions, regions in 4, countries in all
	for _, tc := range []struct {
		name                      string
		scopes                    bool
		regionParts, countryParts int
		n, want                   int
	}{
		{"scopes, regions in 4, countries in 8", true, 4, 8, 0, 4 * 275},
		{"no scopes: no region lists", false, 4, 8, 0, 4096 / 4},
		{"regions and countries in all 16", true, 0, 0, 0, 4096 / 4},
		{"regions in all 16, countries in 8", true, 0, 8, 0, 4096 / 4},
		{"countries in 2", true, 4, 2, 0, 4 * 550},
		{"regions in 1: capped at N", true, 1, 8, 0, 4096},
		{"explicit", true, 4, 8, 300, 300},
	} {
		c.Preagg.Scopes, c.Preagg.RegionPartitions, c.Preagg.CountryPartitions = tc.scopes, tc.regionParts, tc.countryParts
		if got := c.cutN(tc.n); got != tc.want {
			t.Errorf("%s: cutN(%d) = %d, want %d", tc.name, tc.n, got, tc.want)
		}
	}
}
