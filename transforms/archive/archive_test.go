package archive

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/topk-dev/topk/internal/gcstest"
	"github.com/topk-dev/topk/internal/pubsubx"
	"github.com/topk-dev/topk/internal/svctest"
	"github.com/topk-dev/topk/schemas"
)

const testProject = "topk-test"

// ackDeadline is the test subscriptions' ack deadline: the smallest Pub/Sub
// (and the emulator) accepts.
const ackDeadline = 10 * time.Second

var (
	h0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	h1 = h0.Add(time.Hour)
)

// clock is an injectable wall clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.t = t }

// forEachBackend runs fn against pstest, and against the official emulator
// when PUBSUB_EMULATOR_HOST is set.
func forEachBackend(t *testing.T, fn func(t *testing.T, addr string)) {
	t.Run("pstest", func(t *testing.T) {
		t.Parallel()
		emb := pubsubx.StartEmbedded()
		t.Cleanup(func() { emb.Close() })
		fn(t, emb.Addr)
	})
	t.Run("emulator", func(t *testing.T) {
		addr := pubsubx.EmulatorAddr()
		svctest.Need(t, "pubsub", addr != "", pubsubx.EnvEmulator+" is not set (CI sets it)")
		t.Parallel()
		fn(t, addr)
	})
}

// forEachRoot runs fn with a local archive root and with a gs:// root on
// the in-process fake Cloud Storage (internal/gcstest).
func forEachRoot(t *testing.T, fn func(t *testing.T, newRoot func(testing.TB) string)) {
	t.Run("local", func(t *testing.T) {
		t.Parallel()
		fn(t, func(tb testing.TB) string { return tb.TempDir() })
	})
	t.Run("gcs", func(t *testing.T) {
		t.Parallel()
		fn(t, gcstest.Root)
	})
}

// env is one test's topic and subscription.
type env struct {
	client *pubsub.Client
	topic  string
	sub    string // full name
	root   string
	clock  *clock
}

func newEnv(t testing.TB, addr, root string) *env {
	t.Helper()
	ctx := context.Background()
	c, err := pubsubx.NewClient(ctx, testProject, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var b [4]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	e := &env{client: c, topic: "views-" + id, sub: pubsubx.SubscriptionName(testProject, "archive-"+id),
		root: root, clock: &clock{}}
	if err := pubsubx.EnsureTopic(ctx, c, e.topic); err != nil {
		t.Fatal(err)
	}
	if err := pubsubx.EnsureSubscription(ctx, c, "archive-"+id, e.topic, int32(ackDeadline/time.Second)); err != nil {
		t.Fatal(err)
	}
	return e
}

// publish publishes raw payloads with a "ts" attribute.
func (e *env) publish(t testing.TB, payloads ...[]byte) {
	t.Helper()
	pub := e.client.Publisher(e.topic)
	defer pub.Stop()
	var rs []*pubsub.PublishResult
	for _, p := range payloads {
		rs = append(rs, pub.Publish(context.Background(), &pubsub.Message{Data: p,
			Attributes: map[string]string{"ts": strconv.FormatInt(h0.UnixMilli(), 10)}}))
	}
	for _, r := range rs {
		if _, err := r.Get(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// run runs the archiver until the subscription has been idle for a while
// and returns its final stats.
func (e *env) run(t testing.TB, mod func(*Config)) (Stats, error) {
	t.Helper()
	var last Stats
	cfg := Config{Root: e.root, Subscription: e.sub, ReturnImmediately: true,
		IdleStop: 2 * time.Second, IdleWait: 50 * time.Millisecond, Now: e.clock.Now,
		Progress: func(s Stats) { last = s }}
	if mod != nil {
		mod(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := Run(ctx, e.client, cfg)
	return last, err
}

func beacon(t testing.TB, id string, events ...schemas.Event) []byte {
	t.Helper()
	data, err := schemas.MarshalBeacon(&schemas.Beacon{BeaconID: id, Events: events})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// genEvents makes n valid events from start, step apart, ids prefix-i.
func genEvents(prefix string, start time.Time, step time.Duration, n int) []schemas.Event {
	out := make([]schemas.Event, n)
	for i := range out {
		out[i] = schemas.Event{EventID: prefix + strconv.Itoa(i), Type: "video", Item: "v_" + strconv.Itoa(i%7),
			User: "u_" + strconv.Itoa(i%3), TS: start.Add(time.Duration(i) * step).Truncate(time.Millisecond),
			Country: "IN", Region: "IN-MH"}
	}
	return out
}

// rowsOf is the archive rows of events, sorted by event id then time.
func rowsOf(events []schemas.Event) []schemas.ArchiveEvent {
	out := make([]schemas.ArchiveEvent, len(events))
	for i := range events {
		out[i] = schemas.ArchiveEventOf(&events[i])
	}
	sortRows(out)
	return out
}

func sortRows(rows []schemas.ArchiveEvent) {
	slices.SortFunc(rows, func(a, b schemas.ArchiveEvent) int {
		if c := strings.Compare(a.EventID, b.EventID); c != 0 {
			return c
		}
		return a.TS.Compare(b.TS)
	})
}

func readHour(t testing.TB, root string, hour time.Time) []schemas.ArchiveEvent {
	t.Helper()
	rows, err := ReadHour(root, hour)
	if err != nil {
		t.Fatal(err)
	}
	sortRows(rows)
	return rows
}

func diffRows(got, want []schemas.ArchiveEvent) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d rows, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.EventID != w.EventID || g.Type != w.Type || g.Item != w.Item || g.User != w.User ||
			!g.TS.Equal(w.TS) || g.Country != w.Country || g.Region != w.Region {
			return fmt.Sprintf("row %d: got %+v, want %+v", i, g, w)
		}
	}
	return ""
}

// split returns the events of hour h.
func inHour(events []schemas.Event, h time.Time) []schemas.Event {
	var out []schemas.Event
	for _, e := range events {
		if e.TS.Truncate(time.Hour).Equal(h) {
			out = append(out, e)
		}
	}
	return out
}

// TestArchive checks the archive's main properties on one subscription:
// every valid event lands exactly once in the files of its own event hour
// (a beacon spanning two hours included); a malformed beacon and an invalid
// event go to the dead letters with their reasons; every message is acked
// (after the ack deadline, a second run receives nothing); hours close with a
// marker once the clock passes their end plus grace, and not before; an
// event arriving for a closed hour lands in that hour's late/ folder, where
// ReadHour finds it.
func TestArchive(t *testing.T) {
	forEachRoot(t, func(t *testing.T, newRoot func(testing.TB) string) { testArchive(t, newRoot) })
}

func testArchive(t *testing.T, newRoot func(testing.TB) string) {
	forEachBackend(t, func(t *testing.T, addr string) {
		e := newEnv(t, addr, newRoot(t))
		// 40 events from 10:40 to 11:19:00, one a minute: both hours.
		events := genEvents("e", h0.Add(40*time.Minute+123*time.Millisecond), time.Minute, 40)
		bad := schemas.Event{EventID: "bad-1", Type: "video", TS: h0.Add(time.Minute)} // no item
		payloads := [][]byte{
			beacon(t, "b0", events[0:10]...),
			beacon(t, "b1", events[10:30]...), // 10:50 to 11:09: spans the hours
			beacon(t, "b2", append(slices.Clone(events[30:40]), bad)...),
			[]byte("not a beacon"),
		}
		e.publish(t, payloads...)

		// 11:05: h0 closes at 11:10, h1 at 12:10.
		e.clock.Set(h1.Add(5 * time.Minute))
		st, err := e.run(t, nil)
		if err != nil {
			t.Fatal(err)
		}
		if st.Messages != 4 || st.Acked != 4 || st.Events != 40 || st.DeadLetters != 2 || st.Closed != 0 {
			t.Fatalf("stats %+v, want 4 messages acked, 40 events, 2 dead letters, no hour closed", st)
		}
		for _, h := range []time.Time{h0, h1} {
			if d := diffRows(readHour(t, e.root, h), rowsOf(inHour(events, h))); d != "" {
				t.Fatalf("hour %s: %s", schemas.HourDir(h), d)
			}
			files, closed, err := ListHour(e.root, h)
			if err != nil || closed || len(files) != 1 {
				t.Fatalf("ListHour(%s) = %v, %v, %v; want one file, open", schemas.HourDir(h), files, closed, err)
			}
		}
		dead, err := ReadDeadLetters(e.root)
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(dead, func(a, b schemas.DeadLetter) int { return strings.Compare(a.Stage, b.Stage) })
		if len(dead) != 2 || dead[0].Stage != "decode" || !bytes.Equal(dead[0].Payload, []byte("not a beacon")) ||
			!strings.Contains(dead[0].Reason, "bad beacon") ||
			dead[1].Stage != "validate" || dead[1].EventID != "bad-1" || !strings.Contains(dead[1].Reason, "item") {
			t.Fatalf("dead letters %+v, want the malformed beacon (decode) and bad-1 (validate) with reasons", dead)
		}

		// Past the ack deadline an unacked message would be redelivered.
		// 12:11: both hours are due; the run receives nothing and closes them.
		time.Sleep(ackDeadline + time.Second)
		e.clock.Set(h1.Add(time.Hour + DefaultGrace + time.Minute))
		st, err = e.run(t, nil)
		if err != nil {
			t.Fatal(err)
		}
		if st.Messages != 0 || st.Closed != 2 {
			t.Fatalf("second run: stats %+v, want nothing received and 2 hours closed", st)
		}
		for _, h := range []time.Time{h0, h1} {
			files, closed, err := ListHour(e.root, h)
			if err != nil || !closed || len(files) != 1 {
				t.Fatalf("ListHour(%s) = %v, %v, %v; want the same one file, closed", schemas.HourDir(h), files, closed, err)
			}
		}

		// A late event for the closed h0 goes to h0/late/.
		late := genEvents("late", h0.Add(59*time.Minute), 0, 1)
		e.publish(t, beacon(t, "b-late", late...))
		st, err = e.run(t, nil)
		if err != nil {
			t.Fatal(err)
		}
		if st.Messages != 1 || st.Acked != 1 || st.LateEvents != 1 || st.Closed != 0 {
			t.Fatalf("late run: stats %+v, want 1 message, 1 late event, no new close", st)
		}
		files, closed, err := ListHour(e.root, h0)
		if err != nil || !closed || len(files) != 2 ||
			filepath.Base(filepath.Dir(files[1])) != schemas.ArchiveLateDir || filepath.Dir(files[0]) != filepath.Dir(filepath.Dir(files[1])) {
			t.Fatalf("ListHour(h0) = %v, %v, %v; want the hour's file then one late/ file, closed", files, closed, err)
		}
		want := rowsOf(append(inHour(events, h0), late...))
		if d := diffRows(readHour(t, e.root, h0), want); d != "" {
			t.Fatalf("hour h0 with the late event: %s", d)
		}
	})
}

var errCrash = errors.New("simulated crash before ack")

// TestArchiveCrashBeforeAck checks at-least-once delivery: when the archiver
// dies after its files are durable but before it acks, the files stay, the
// messages are redelivered, and the next run archives their events again,
// so every event is in the archive twice (duplicates), none missing.
func TestArchiveCrashBeforeAck(t *testing.T) {
	forEachBackend(t, func(t *testing.T, addr string) {
		e := newEnv(t, addr, t.TempDir())
		events := genEvents("c", h0.Add(30*time.Minute), 5*time.Second, 300) // 10:30 to 10:55
		var payloads [][]byte
		for i := 0; i < len(events); i += 50 {
			payloads = append(payloads, beacon(t, "cb"+strconv.Itoa(i), events[i:i+50]...))
		}
		e.publish(t, payloads...)
		e.clock.Set(h0.Add(50 * time.Minute))

		var held []string
		_, err := e.run(t, func(c *Config) {
			c.beforeAck = func(ids []string) error { held = append(held, ids...); return errCrash }
		})
		if !errors.Is(err, errCrash) {
			t.Fatalf("crashing run returned %v, want %v", err, errCrash)
		}
		if len(held) != len(payloads) {
			t.Fatalf("crash held %d ack ids, want %d", len(held), len(payloads))
		}
		if d := diffRows(readHour(t, e.root, h0), rowsOf(events)); d != "" {
			t.Fatalf("after the crash, files hold: %s; want every event once", d)
		}

		// Stand in for the ack deadline passing: expire the dead process's
		// leases now, so Pub/Sub redelivers.
		err = e.client.SubscriptionAdminClient.ModifyAckDeadline(context.Background(),
			&pb.ModifyAckDeadlineRequest{Subscription: e.sub, AckIds: held, AckDeadlineSeconds: 0})
		if err != nil {
			t.Fatal(err)
		}
		st, err := e.run(t, nil)
		if err != nil {
			t.Fatal(err)
		}
		if st.Messages != int64(len(payloads)) || st.Acked != st.Messages {
			t.Fatalf("rerun: stats %+v, want %d messages redelivered and acked", st, len(payloads))
		}
		want := rowsOf(append(slices.Clone(events), events...))
		if d := diffRows(readHour(t, e.root, h0), want); d != "" {
			t.Fatalf("after redelivery: %s; want every event exactly twice", d)
		}
	})
}

// TestLateDestinationFollowsMarker checks that a file is placed by the
// marker at the moment of its rename: into the hour's folder while open,
// into late/ once closed; and that closing twice writes the marker once.
func TestLateDestinationFollowsMarker(t *testing.T) {
	forEachRoot(t, testLateDestinationFollowsMarker)
}

func testLateDestinationFollowsMarker(t *testing.T, newRoot func(testing.TB) string) {
	ctx := context.Background()
	root := newRoot(t)
	st, err := openRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	rows := rowsOf(genEvents("x", h0, time.Second, 3))
	late, err := writeHourFile(ctx, st, h0, "part-a-000001.parquet", rows)
	if err != nil || late {
		t.Fatalf("open hour: late=%v err=%v, want the hour's own folder", late, err)
	}
	if wrote, err := closeHour(ctx, st, h0, "a", h1); err != nil || !wrote {
		t.Fatalf("closeHour = %v, %v; want the marker written", wrote, err)
	}
	if wrote, err := closeHour(ctx, st, h0, "b", h1); err != nil || wrote {
		t.Fatalf("second closeHour = %v, %v; want nothing written", wrote, err)
	}
	// Past the check, the marker's own write refuses to replace it.
	if wrote, err := st.create(ctx, hourDir(h0)+"/"+schemas.ArchiveClosed, []byte("other")); err != nil || wrote {
		t.Fatalf("create over the marker = %v, %v; want nothing written", wrote, err)
	}
	late, err = writeHourFile(ctx, st, h0, "part-a-000002.parquet", rows[:1])
	if err != nil || !late {
		t.Fatalf("closed hour: late=%v err=%v, want late/", late, err)
	}
	// A temporary file left by a crash is not part of the hour.
	if err := st.write(ctx, hourDir(h0), ".part-z.parquet.tmp-1", func(w io.Writer) error {
		_, err := io.WriteString(w, "junk")
		return err
	}, nil); err != nil {
		t.Fatal(err)
	}
	files, closed, err := ListHour(root, h0)
	if err != nil || !closed || len(files) != 2 || !strings.Contains(files[1], "/late/part-a-000002") {
		t.Fatalf("ListHour = %v, %v, %v", files, closed, err)
	}
	got := readHour(t, root, h0)
	want := slices.Clone(rows)
	want = append(want, rows[0])
	sortRows(want)
	if d := diffRows(got, want); d != "" {
		t.Fatal(d)
	}
	open, err := openHours(ctx, st)
	if err != nil || len(open) != 0 {
		t.Fatalf("openHours = %v, %v; want none", open, err)
	}
	if hours, err := ClosedHours(ctx, root); err != nil || len(hours) != 1 || !hours[0].Equal(h0) {
		t.Fatalf("ClosedHours = %v, %v; want [%v]", hours, err, h0)
	}
}

// TestConfigValidate checks that a configuration is rejected with a clear
// reason: roots other than local folders and gs://bucket, a bad subscription name,
// negative durations; and that the zero durations take their defaults.
func TestConfigValidate(t *testing.T) {
	ok := Config{Root: "/tmp/a", Subscription: "projects/p/subscriptions/s"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, root := range []string{"gs://bucket", "gs://bucket/archive/", "./archive"} {
		c := ok
		c.Root = root
		if err := c.Validate(); err != nil {
			t.Fatalf("root %q: %v", root, err)
		}
	}
	if d := ok.withDefaults(); d.Grace != DefaultGrace || d.FlushEvery != DefaultFlushEvery || d.MaxRows != DefaultMaxRows {
		t.Fatalf("defaults: %+v", d)
	}
	for name, tc := range map[string]struct {
		mod  func(*Config)
		want string
	}{
		"s3":      {func(c *Config) { c.Root = "s3://bucket/archive" }, "only local folders and gs://bucket/prefix"},
		"bucket":  {func(c *Config) { c.Root = "gs:///archive" }, "want gs://bucket"},
		"empty":   {func(c *Config) { c.Root = "" }, "root is empty"},
		"sub":     {func(c *Config) { c.Subscription = "archive" }, "projects/P/subscriptions/S"},
		"grace":   {func(c *Config) { c.Grace = -time.Minute }, "grace"},
		"writer":  {func(c *Config) { c.WriterID = "a/b" }, "writer id"},
		"maxrows": {func(c *Config) { c.MaxRows = -1 }, "max rows"},
	} {
		c := ok
		tc.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want an error containing %q", name, err, tc.want)
		}
	}
	if _, _, err := ListHour("s3://b/a", h0); err == nil || !strings.Contains(err.Error(), "gs://") {
		t.Errorf("ListHour(s3://) = %v, want a clear error", err)
	}
}

// TestOpenHoursClosedAfterRestart checks that an hour left open by an
// earlier run (no marker) is closed by the next run once due, even when no
// new message arrives for it.
func TestOpenHoursClosedAfterRestart(t *testing.T) {
	forEachRoot(t, testOpenHoursClosedAfterRestart)
}

func testOpenHoursClosedAfterRestart(t *testing.T, newRoot func(testing.TB) string) {
	emb := pubsubx.StartEmbedded()
	defer emb.Close()
	e := newEnv(t, emb.Addr, newRoot(t))
	root, err := openRoot(e.root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := writeHourFile(context.Background(), root, h0, "part-old-000001.parquet", rowsOf(genEvents("o", h0, time.Second, 2))); err != nil {
		t.Fatal(err)
	}
	e.clock.Set(h1.Add(DefaultGrace - time.Second))
	st, err := e.run(t, func(c *Config) { c.IdleStop = 100 * time.Millisecond })
	if err != nil {
		t.Fatal(err)
	}
	if _, closed, _ := ListHour(e.root, h0); closed || st.Closed != 0 {
		t.Fatalf("closed=%v stats %+v before h0's end plus grace, want open", closed, st)
	}
	e.clock.Set(h1.Add(DefaultGrace))
	if _, err = e.run(t, func(c *Config) { c.IdleStop = 100 * time.Millisecond }); err != nil {
		t.Fatal(err)
	}
	if _, closed, _ := ListHour(e.root, h0); !closed {
		t.Fatal("h0 still open at its end plus grace")
	}
}

// TestWriteOpenFile checks WriteFile and OpenFile on both kinds of root: an
// overwrite replaces the file; random reads (within a block, across the
// Cloud Storage reader's blocks, the whole file, past the end) return the
// bytes written; ListHour's addresses are under the root.
func TestWriteOpenFile(t *testing.T) {
	forEachRoot(t, func(t *testing.T, newRoot func(testing.TB) string) {
		ctx := context.Background()
		root := newRoot(t)
		p := schemas.ExactHourPath(root, h0)
		data := make([]byte, 3*gcsBlockSize+123)
		rand.Read(data)
		for _, d := range [][]byte{[]byte("old content"), data} {
			if err := WriteFile(ctx, p, func(w io.Writer) error { _, err := w.Write(d); return err }); err != nil {
				t.Fatal(err)
			}
		}
		f, err := OpenFile(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if f.Size() != int64(len(data)) {
			t.Fatalf("size %d, want %d", f.Size(), len(data))
		}
		for _, r := range [][2]int{{0, 10}, {gcsBlockSize - 5, 10}, {0, len(data)}, {2*gcsBlockSize + 7, gcsBlockSize}, {5, 3}} {
			buf := make([]byte, r[1])
			if n, err := f.ReadAt(buf, int64(r[0])); err != nil || n != r[1] || !bytes.Equal(buf, data[r[0]:r[0]+r[1]]) {
				t.Fatalf("ReadAt(%d, %d) = %d, %v, or other bytes", r[0], r[1], n, err)
			}
		}
		buf := make([]byte, 200)
		if n, err := f.ReadAt(buf, int64(len(data)-100)); n != 100 || err != io.EOF || !bytes.Equal(buf[:n], data[len(data)-100:]) {
			t.Fatalf("ReadAt past the end = %d, %v; want 100, EOF", n, err)
		}
		if _, err := writeHourFile(ctx, mustRoot(t, root), h0, "part-a-000001.parquet", rowsOf(genEvents("w", h0, time.Second, 2))); err != nil {
			t.Fatal(err)
		}
		files, _, err := ListHour(root, h0)
		if err != nil || len(files) != 1 || !strings.HasPrefix(files[0], strings.TrimPrefix(root, "./")) {
			t.Fatalf("ListHour = %v, %v; want one file under %s", files, err, root)
		}
	})
}

func mustRoot(t testing.TB, root string) store {
	t.Helper()
	st, err := openRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	return st
}
