package rules

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/topk-dev/topk/internal/memtest"
	"github.com/topk-dev/topk/schemas"
)

var t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustNew(t testing.TB, cfg Config) *Rules {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func ev(id, typ, item, user string, ts time.Time) schemas.Event {
	return schemas.Event{EventID: id, Type: typ, Item: item, User: user, TS: ts}
}

func TestFlagsAndValidate(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg := RegisterFlags(fs, "f_")
	if err := fs.Parse([]string{"--f_rules=none", "--f_cap=3", "--f_repeat_gap=10s", "--f_trust_unknown=0.5", "--f_rules_window=15m"}); err != nil {
		t.Fatal(err)
	}
	if !cfg.Off || cfg.Cap != 3 || cfg.RepeatGap != 10*time.Second || cfg.TrustUnknown != 0.5 || cfg.Window != 15*time.Minute {
		t.Fatalf("parsed %+v", *cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse([]string{"--f_rules=some"}); err == nil {
		t.Fatal("--rules=some accepted")
	}
	for name, mut := range map[string]func(*Config){
		"trust_unknown>1":  func(c *Config) { c.TrustUnknown = 1.5 },
		"window 7m":        func(c *Config) { c.Window = 7 * time.Minute },
		"window 2h":        func(c *Config) { c.Window = 2 * time.Hour },
		"negative cap":     func(c *Config) { c.Cap = -1 },
		"gap > window":     func(c *Config) { c.Window = time.Minute; c.RepeatGap = 2 * time.Minute },
		"max_ids 0":        func(c *Config) { c.MaxIDs = 0 },
		"horizon < bucket": func(c *Config) { c.DedupeHorizon = time.Second },
	} {
		c := DefaultConfig()
		mut(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Validate() = %v, want ErrConfig", name, err)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

// Property: each stateless rule drops exactly the events its file names,
// trust weights come from the table, --rules=none turns all of it off, and
// the version names the files' content.
func TestStatelessRules(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.Bots = writeFile(t, dir, "bots", "# bots\nu_bot\nuser:u_bot2\nua:headless|crawler\nua:^curl/\n")
	cfg.Blocklist = writeFile(t, dir, "block", "video,v_bad\n*,h_worse\n")
	cfg.Trust = writeFile(t, dir, "trust", "user,weight\nu_new,0.05\nu_old,1\nu_zero,0\n")
	cfg.TrustUnknown = 0.5
	r := mustNew(t, cfg)
	for _, c := range []struct {
		e      schemas.Event
		w      float64
		reason Reason
	}{
		{ev("1", "video", "v_bad", "u_old", t0), 0, Blocked},
		{ev("2", "video", "v_ok", "u_old", t0), 1, OK},
		{ev("3", "hashtag", "v_bad", "u_old", t0), 1, OK},
		{ev("4", "hashtag", "h_worse", "", t0), 0, Blocked},
		{ev("5", "video", "v_ok", "u_bot", t0), 0, Bot},
		{ev("6", "video", "v_ok", "u_bot2", t0), 0, Bot},
		{ev("7", "video", "v_ok", "u_new", t0), 0.05, OK},
		{ev("8", "video", "v_ok", "u_zero", t0), 0, OK},
		{ev("9", "video", "v_ok", "u_stranger", t0), 0.5, OK},
		{ev("10", "video", "v_ok", "", t0), 0.5, OK},
	} {
		w, why := r.Check(&c.e)
		if why != c.reason || w != float64(float32(c.w)) {
			t.Errorf("%+v: (%v, %v), want (%v, %v)", c.e, w, why, c.w, c.reason)
		}
	}
	for ua, bot := range map[string]bool{
		"Mozilla/5.0 HeadlessChrome/120": true, "MyCrawler 1.0": true, "curl/8.1": true,
		"Mozilla/5.0 (curl/8.1)": false, "Mozilla/5.0 Safari": false,
	} {
		if got := r.BotAgent(ua); got != bot {
			t.Errorf("BotAgent(%q) = %v, want %v", ua, got, bot)
		}
	}
	v1 := r.Version()
	if !strings.Contains(v1, "cap=10/1h0m0s") || strings.Contains(v1, "bots=-") {
		t.Fatalf("version %q", v1)
	}

	off := cfg
	off.Off = true
	ro := mustNew(t, off)
	e := ev("1", "video", "v_bad", "u_bot", t0)
	if w, why := ro.Check(&e); w != 1 || why != OK || ro.BotAgent("curl/8") {
		t.Fatalf("--rules=none: (%v, %v)", w, why)
	}
	if ro.Version() != "r1;none" {
		t.Fatalf("--rules=none version %q", ro.Version())
	}
}

// Property: a reload swaps in new file content (and a new version), a bad
// file leaves the old rules in force, and Watch notices a changed file.
func TestReloadAndWatch(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.Trust = writeFile(t, dir, "trust", "u_a,0.5\n")
	cfg.Reload = 10 * time.Millisecond
	r := mustNew(t, cfg)
	e := ev("1", "video", "v", "u_a", t0)
	v1 := r.Version()

	writeFile(t, dir, "trust", "u_a,2\n")
	if err := r.Reload(); !errors.Is(err, ErrFile) {
		t.Fatalf("reload of a bad file: %v", err)
	}
	if w, _ := r.Check(&e); w != 0.5 || r.Version() != v1 {
		t.Fatalf("after a failed reload: weight %v, version %q", w, r.Version())
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Watch(ctx, nil); close(done) }()
	writeFile(t, dir, "trust", "u_a,0.25\nu_b,1\n")
	deadline := time.Now().Add(5 * time.Second)
	for {
		if w, _ := r.Check(&e); w == 0.25 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Watch did not reload the changed file")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if r.Version() == v1 {
		t.Fatal("version did not change with the file")
	}
}

// oracle is the definition, computed independently of Judge: for every
// key and rule window, events sorted in canonical order; an event is a
// repeat when its predecessor is less than gap before it, and the first cap
// non-repeats count. Events must be free of duplicates and pass the
// stateless rules.
func oracle(cfg Config, events []schemas.Event) map[string]int {
	type rec struct {
		ts  int64
		idh uint64
	}
	groups := map[string][]rec{}
	for _, e := range events {
		ts := e.TS.UnixMilli()
		k := fmt.Sprintf("%s|%s|%s|%d", e.User, e.Type, e.Item, ts/cfg.Window.Milliseconds())
		groups[k] = append(groups[k], rec{ts, IDHash(e.EventID)})
	}
	counts := map[string]int{}
	for k, g := range groups {
		slices.SortFunc(g, func(a, b rec) int {
			if a.ts != b.ts {
				return int(a.ts - b.ts)
			}
			if a.idh < b.idh {
				return -1
			}
			return 1
		})
		n := 0
		for i, r := range g {
			if i > 0 && cfg.RepeatGap > 0 && r.ts-g[i-1].ts < cfg.RepeatGap.Milliseconds() {
				continue
			}
			if cfg.Cap > 0 && n >= cfg.Cap {
				continue
			}
			n++
		}
		counts[k] = n
	}
	return counts
}

func filterCounts(cfg Config, f *Filter, events []schemas.Event) map[string]int {
	counts := map[string]int{}
	for i := range events {
		e := &events[i]
		k := fmt.Sprintf("%s|%s|%s|%d", e.User, e.Type, e.Item, e.TS.UnixMilli()/cfg.Window.Milliseconds())
		if _, why := f.Check(e); why == OK {
			counts[k]++
		} else if _, ok := counts[k]; !ok {
			counts[k] = 0
		}
	}
	return counts
}

// randomStream is n events of a few users and items over two rule
// windows, at random gaps around the repeat gap.
func randomStream(r *rand.Rand, n int) []schemas.Event {
	out := make([]schemas.Event, n)
	for i := range out {
		ts := t0.Add(time.Duration(r.Int64N(int64(2 * time.Hour))))
		if r.IntN(4) == 0 && i > 0 { // close to an earlier event of the same key
			p := out[r.IntN(i)]
			out[i] = p
			ts = p.TS.Add(time.Duration(r.Int64N(int64(70*time.Second))) - 10*time.Second)
		} else {
			out[i] = ev("", "video", fmt.Sprintf("v_%d", r.IntN(5)), fmt.Sprintf("u_%d", r.IntN(8)), ts)
		}
		out[i].EventID = fmt.Sprintf("e_%d", i)
		out[i].TS = ts.Truncate(time.Millisecond)
	}
	return out
}

// Property: in canonical order a Filter applies exactly the definition;
// in any arrival order it never counts fewer events of a key and window
// than the definition (only over-counts).
func TestFilterMatchesDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	trials := 24
	if testing.Short() {
		trials = 8
	}
	for trial := range trials {
		cfg := DefaultConfig()
		cfg.Cap = []int{0, 1, 3, 10}[trial%4]
		cfg.RepeatGap = []time.Duration{0, 30 * time.Second, 5 * time.Second}[trial%3]
		cfg.Window = []time.Duration{time.Hour, 15 * time.Minute}[trial%2]
		cfg.DedupeHorizon = 3 * time.Hour // the whole stream: no event too old
		cfg.DedupeBucket = time.Hour
		events := randomStream(r, 2000)
		want := oracle(cfg, events)
		sorted := slices.Clone(events)
		slices.SortFunc(sorted, func(a, b schemas.Event) int {
			if c := a.TS.Compare(b.TS); c != 0 {
				return c
			}
			ha, hb := IDHash(a.EventID), IDHash(b.EventID)
			if ha < hb {
				return -1
			}
			return 1
		})
		got := filterCounts(cfg, mustNew(t, cfg).NewFilter(), sorted)
		for k, n := range want {
			if got[k] != n {
				t.Fatalf("trial %d (%+v) in order: key %s counted %d, definition %d", trial, cfg, k, got[k], n)
			}
		}
		r.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
		got = filterCounts(cfg, mustNew(t, cfg).NewFilter(), events)
		for k, n := range want {
			if got[k] < n {
				t.Fatalf("trial %d shuffled: key %s counted %d, under the definition's %d", trial, k, got[k], n)
			}
		}
	}
}

// Property: every event sent twice (same event_id, up to the horizon
// apart in arrival) counts as if sent once; an event never counts as a
// duplicate of a different event_id.
func TestFilterDedupe(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Off = true
	f := mustNew(t, cfg).NewFilter()
	r := rand.New(rand.NewPCG(1, 1))
	var events []schemas.Event
	for i := range 50_000 {
		ts := t0.Add(time.Duration(i) * 5 * time.Millisecond) // 250 s of events
		events = append(events, ev(fmt.Sprintf("e_%d", i), "video", fmt.Sprintf("v_%d", r.IntN(100)), "u", ts))
	}
	counted := 0
	for i := range events {
		if _, why := f.Check(&events[i]); why == OK {
			counted++
		}
		// the duplicate arrives up to 2 minutes of events later
		if j := i - r.IntN(24_000); j >= 0 && r.IntN(2) == 0 {
			if _, why := f.Check(&events[j]); why != Duplicate {
				t.Fatalf("second copy of %s: %v", events[j].EventID, why)
			}
		}
	}
	if counted != len(events) {
		t.Fatalf("%d of %d distinct events counted", counted, len(events))
	}
	st := f.TakeStats()
	if st.Unchecked != 0 || st.Events[OK] != uint64(len(events)) {
		t.Fatalf("stats %+v", st)
	}
}

// Property: with RetriesByBeacon, an event_id met again in a new delivery
// of the beacon that brought it gets its first verdict (whichever rule
// gave it) and changes no state; met in a beacon with another id, in the
// same delivery, in a beacon without an id, or with the option off, it is
// a duplicate.
func TestFilterRetriesByBeacon(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Cap = 2
	// u_1 posts v_1 four times, 40 s apart (past the repeat gap): the
	// cap (2) drops the last two; then once 5 s later: a repeat.
	var events []schemas.Event
	for i := range 4 {
		events = append(events, ev(fmt.Sprint("c", i), "video", "v_1", "u_1", t0.Add(time.Duration(i)*40*time.Second)))
	}
	events = append(events, ev("r", "video", "v_1", "u_1", t0.Add(125*time.Second)))
	want := []Reason{OK, OK, Capped, Capped, Repeat}
	deliver := func(f *Filter, beacon string) []Reason {
		f.Advance(t0.Add(2 * time.Minute))
		f.Beacon(beacon)
		var got []Reason
		for i := range events {
			_, why := f.Check(&events[i])
			got = append(got, why)
		}
		return got
	}
	all := func(r Reason) []Reason { return slices.Repeat([]Reason{r}, len(events)) }
	f := mustNew(t, cfg).NewFilter()
	f.RetriesByBeacon(true)
	for i, step := range []struct {
		beacon string
		want   []Reason
	}{
		{"b1", want},
		{"b1", want},           // retried
		{"b1", want},           // and again: still the first verdicts
		{"b2", all(Duplicate)}, // the same events in another beacon
		{"", all(Duplicate)},   // in a beacon without an id
		{"b1", want},           // b1 once more: its verdicts, not b2's
	} {
		if got := deliver(f, step.beacon); !slices.Equal(got, step.want) {
			t.Fatalf("delivery %d (beacon %q): %v, want %v", i, step.beacon, got, step.want)
		}
	}
	if st := f.TakeStats(); st.Redelivered != 3*uint64(len(events)) {
		t.Errorf("Redelivered %d, want %d", st.Redelivered, 3*len(events))
	}
	// An event twice in one delivery is a duplicate, on the retry too.
	f.Beacon("b1")
	if _, why := f.Check(&events[0]); why != OK {
		t.Fatalf("c0 redelivered: %v, want ok", why)
	}
	if _, why := f.Check(&events[0]); why != Duplicate {
		t.Fatalf("c0 twice in one delivery: %v, want duplicate", why)
	}
	// Off (the default): a retry is a duplicate.
	off := mustNew(t, cfg).NewFilter()
	if got := deliver(off, "b1"); !slices.Equal(got, want) {
		t.Fatalf("first delivery without the option: %v, want %v", got, want)
	}
	if got := deliver(off, "b1"); !slices.Equal(got, all(Duplicate)) {
		t.Fatalf("retry without the option: %v, want duplicates", got)
	}
}

// Property: Judge.Step gives an event it already judged (the same time
// and id hash, still among the key's kept events) its first verdict again
// and changes no state, whatever came in between: a counted event stays
// counted at the cap, a repeat stays a repeat, a capped one capped, and an
// out-of-order earlier event that would make it a repeat now does not.
func TestJudgeSameEventAgain(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Cap, cfg.RepeatGap = 2, 30*time.Second
	j := cfg.Judge()
	var k KeyState
	ms := func(s int) int64 { return t0.Add(time.Duration(s) * time.Second).UnixMilli() }
	type step struct {
		at   int
		id   uint64
		want Reason
	}
	for i, s := range []step{
		{100, 1, OK},
		{160, 2, OK},     // the cap (2) reached
		{100, 1, OK},     // again: counted, not capped
		{170, 3, Repeat}, // 10 s after 160
		{170, 3, Repeat}, // again
		{220, 4, Capped}, // past the gap, over the cap
		{220, 4, Capped}, // again
		{150, 5, Capped}, // out of order: 10 s before 160, 50 s after 100
		{160, 2, OK},     // 160 now has 150 before it, 10 s: still its first verdict
		{100, 1, Capped}, // 100 fell off the four kept (220, 170, 160, 150): judged afresh
	} {
		if got := j.Step(&k, ms(s.at), s.id); got != s.want {
			t.Fatalf("step %d (%d s, id %d): %v, want %v", i, s.at, s.id, got, s.want)
		}
	}
	if k.count != 2 {
		t.Fatalf("count %d, want 2", k.count)
	}
}

// Property: with RetriesByBeacon, a retried delivery counts what the first
// did even for events whose event_id the dedupe could not remember (a set
// of one id per bucket here, so most are Unchecked and reach the key state
// again): before Step kept verdicts, a counted event at its key's cap came
// back Capped, an under-count of the retried bundle.
func TestFilterRetryOfUncheckedEvents(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Cap, cfg.MaxIDs, cfg.RepeatGap = 2, 1, 5*time.Second
	// All in one dedupe bucket (30 s), which remembers only c0: past the
	// repeat gap, 0, 10, 20 and 25 s (the cap drops the last two), then a
	// repeat 2 s after the last.
	var events []schemas.Event
	for i, at := range []int{0, 10, 20, 25, 27} {
		id := fmt.Sprint("c", i)
		if i == 4 {
			id = "r"
		}
		events = append(events, ev(id, "video", "v_1", "u_1", t0.Add(time.Duration(at)*time.Second)))
	}
	want := []Reason{OK, OK, Capped, Capped, Repeat}
	f := mustNew(t, cfg).NewFilter()
	f.RetriesByBeacon(true)
	for d := range 3 {
		f.Advance(t0.Add(2 * time.Minute))
		f.Beacon("b1")
		var got []Reason
		for i := range events {
			_, why := f.Check(&events[i])
			got = append(got, why)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("delivery %d: %v, want %v", d, got, want)
		}
	}
	st := f.TakeStats()
	if st.Unchecked == 0 || st.Redelivered == 0 {
		t.Fatalf("stats %+v: the test needs both unchecked and redelivered events", st)
	}
}

// Property: the exact-key table never matches two different keys, even
// when every key has the same hash.
func TestTableNoFalseMatch(t *testing.T) {
	tb := newTable[int](1000, 1000*16)
	for i := range 1000 {
		v, found, ok := tb.getString(fmt.Sprint("k", i), 42)
		if found || !ok {
			t.Fatalf("key %d: found %v ok %v", i, found, ok)
		}
		*v = i
	}
	for i := range 1000 {
		v, found, _ := tb.getString(fmt.Sprint("k", i), 42)
		if !found || *v != i {
			t.Fatalf("key %d: found %v value %v", i, found, v)
		}
	}
	if _, _, ok := tb.getString("one more", 42); ok {
		t.Fatal("a full table took a key")
	}
}

// Property: a full table makes the Filter count (an over-count it
// reports as unchecked/untracked), never drop.
func TestFullTablesOverCount(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxIDs, cfg.MaxKeys = 100, 100
	f := mustNew(t, cfg).NewFilter()
	for i := range 300 {
		e := ev(fmt.Sprint("e_", i), "video", "v_1", fmt.Sprint("u_", i), t0)
		if _, why := f.Check(&e); why != OK {
			t.Fatalf("event %d: %v", i, why)
		}
	}
	for i := range 300 { // the same events again: 100 remembered
		e := ev(fmt.Sprint("e_", i), "video", "v_1", fmt.Sprint("u_", i), t0)
		f.Check(&e)
	}
	st := f.TakeStats()
	if st.Events[Duplicate] != 100 || st.Unchecked != 400 || st.Events[OK] != 500 {
		t.Fatalf("stats %+v", st)
	}
}

// Property: a Filter's memory is flat under a spam wave: 1M junk items
// and 1M junk accounts grow it by nothing once its tables exist, and it
// stays under MaxBytes.
func TestMemoryFlatUnderSpam(t *testing.T) {
	if testing.Short() {
		t.Skip("spam wave")
	}
	cfg := DefaultConfig()
	cfg.MaxIDs, cfg.MaxKeys = 1<<16, 1<<16
	f := mustNew(t, cfg).NewFilter()
	e := ev("", "video", "", "", t0)
	id := make([]byte, 0, 32)
	wave := func(from, n int) {
		for i := from; i < from+n; i++ {
			id = fmt.Appendf(id[:0], "e_%d", i)
			e.EventID = string(id)
			e.Item = e.EventID[1:]                                          // junk key
			e.User = e.EventID[2:]                                          // junk account
			e.TS = t0.Add(time.Duration(i*7919%660_000) * time.Millisecond) // 11 dedupe buckets
			f.Check(&e)
		}
	}
	wave(0, 200_000) // allocates the tables that event time reaches
	before := memtest.LiveHeap()
	wave(200_000, 2_000_000) // 1M junk keys and 1M junk accounts, twice over
	after := memtest.LiveHeap()
	if grown := int64(after) - int64(before); grown > 1<<20 {
		t.Fatalf("heap grew by %d bytes under the spam wave", grown)
	}
	if b := f.Bytes(); b > f.MaxBytes() {
		t.Fatalf("tables %d bytes, over MaxBytes %d", b, f.MaxBytes())
	}
	st := f.TakeStats()
	t.Logf("heap %+d bytes over the wave; tables %d bytes (max %d); stats %+v", int64(after)-int64(before), f.Bytes(), f.MaxBytes(), st)
	if st.Unchecked == 0 || st.Forgotten == 0 {
		t.Fatalf("the wave did not fill the tables: %+v", st)
	}
}

// Property: a flood of one-off (user, item) keys, 20 times what the
// window holds, does not switch the rules off for an active account: one
// posting an item every 3 s through the flood is capped at exactly the
// cap, and its repeats inside the gap are dropped, as the definition says;
// the one-off keys age out (Stats.Forgotten), each still counted.
func TestActiveKeysSurviveAFlood(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxKeys = 1 << 12
	cfg.RepeatGap = 2 * time.Second
	f := mustNew(t, cfg).NewFilter()
	counted := map[string]int{}
	n := 0
	for i := range 80_000 {
		at := t0.Add(time.Duration(i) * 10 * time.Millisecond) // 800 s
		e := ev(fmt.Sprint("f_", i), "video", fmt.Sprint("v_", i), fmt.Sprint("u_", i), at)
		if _, why := f.Check(&e); why != OK {
			t.Fatalf("one-off event %d: %v", i, why)
		}
		// The account starts once the flood has filled the window twice
		// over (a table keeping its first keys would never track it).
		if i >= 10_000 && i%300 == 0 { // every 3 s
			e := ev(fmt.Sprint("s_", i), "video", "v_spam", "u_spam", at)
			if _, why := f.Check(&e); why == OK {
				counted["spam"]++
			}
			n++
		}
		if i >= 10_000 && i%300 == 1 { // 10 ms after its post: a repeat
			e := ev(fmt.Sprint("r_", i), "video", "v_spam", "u_spam", at)
			if _, why := f.Check(&e); why == OK {
				counted["repeat"]++
			}
		}
	}
	st := f.TakeStats()
	t.Logf("%d spam posts; stats %+v", n, st)
	if counted["spam"] != cfg.Cap || counted["repeat"] != 0 {
		t.Errorf("the active account counted %d posts and %d repeats through the flood, want the cap %d and 0", counted["spam"], counted["repeat"], cfg.Cap)
	}
	if st.Forgotten < 60_000 || st.Untracked != 0 {
		t.Errorf("forgotten %d, untracked %d: want the flood's one-off keys forgotten, none untracked", st.Forgotten, st.Untracked)
	}
}

// Property: Check allocates nothing per event once its tables exist.
func TestCheckAllocatesNothing(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxIDs, cfg.MaxKeys = 1<<12, 1<<12
	dir := t.TempDir()
	cfg.Trust = writeFile(t, dir, "trust", "u_1,0.5\n")
	cfg.Blocklist = writeFile(t, dir, "block", "video,v_x\n")
	f := mustNew(t, cfg).NewFilter()
	events := make([]schemas.Event, 1000)
	for i := range events {
		events[i] = ev(fmt.Sprint("e_", i), "video", fmt.Sprint("v_", i%7), fmt.Sprint("u_", i%3), t0.Add(time.Duration(i)*time.Second))
	}
	for i := range events {
		f.Check(&events[i])
	}
	i := 0
	allocs := testing.AllocsPerRun(5000, func() {
		f.Check(&events[i%len(events)])
		i++
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per Check", allocs)
	}
}

// Property: once Advance is called, an event dated far ahead (a client
// clock) neither evicts event_ids inside the horizon nor is remembered;
// without Advance it evicts one bucket (an over-count, never a drop).
func TestFutureEventsDoNotEvict(t *testing.T) {
	for _, advance := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.Off = true
		cfg.MaxIDs = 1 << 10
		f := mustNew(t, cfg).NewFilter()
		now := t0.Add(3 * time.Minute)
		if advance {
			f.Advance(now)
		}
		var past []schemas.Event
		for i := range 6 { // one event per 30 s bucket over the last 3 minutes
			past = append(past, ev(fmt.Sprint("p", i), "video", "v", "u", now.Add(-time.Duration(i)*30*time.Second)))
			f.Check(&past[i])
		}
		for i := range 20 { // a skewed client: up to 10 minutes ahead
			e := ev(fmt.Sprint("f", i), "video", "v", "u", now.Add(time.Duration(i+1)*30*time.Second))
			if _, why := f.Check(&e); why != OK {
				t.Fatalf("future event %d: %v", i, why)
			}
		}
		dups := 0
		for i := range past {
			if _, why := f.Check(&past[i]); why == Duplicate {
				dups++
			}
		}
		if advance && dups != len(past) {
			t.Fatalf("with Advance: %d of %d duplicates caught", dups, len(past))
		}
		if !advance && dups == len(past) {
			t.Fatalf("without Advance the future events evicted nothing: the test does not test")
		}
	}
}
