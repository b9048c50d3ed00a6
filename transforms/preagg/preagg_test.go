package preagg

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/rules"
	"github.com/topk-dev/topk/transforms/summary"
	"github.com/topk-dev/topk/transforms/users"
)

var t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

// harness drives a preaggFn without a runner: Setup, beacons, FinishBundle,
// and sums the emitted summaries' counts per "type/scope/item".
type harness struct {
	fn      *preaggFn
	counts  map[string]uint64
	tallies map[string]*users.Tally // by "type/scope", merged over buckets
	dead    int
}

func newHarness(t testing.TB, cfg Config) *harness {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	fn, err := newPreaggFn(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := fn.Setup(); err != nil {
		t.Fatal(err)
	}
	return &harness{fn: fn, counts: map[string]uint64{}, tallies: map[string]*users.Tally{}}
}

func (h *harness) tally(_ beam.EventTime, list string, b []byte) {
	t, err := users.UnmarshalTally(b)
	if err != nil {
		panic(err)
	}
	k := strings.ReplaceAll(list, "\x00", "/")
	if h.tallies[k] == nil {
		h.tallies[k] = users.NewTally()
	}
	if err := h.tallies[k].Merge(t); err != nil {
		panic(err)
	}
}

func (h *harness) emit(_ beam.EventTime, _ string, set []byte) {
	err := summary.EachInSet(set, func(list string, b []byte) error {
		sm, err := summary.Unmarshal(b)
		if err != nil {
			return err
		}
		for _, e := range sm.Entries {
			if e.Lo != e.Hi {
				return fmt.Errorf("inexact entry %+v", e)
			}
			h.counts[strings.ReplaceAll(list, "\x00", "/")+"/"+e.Item] += e.Lo
		}
		return nil
	})
	if err != nil {
		panic(err)
	}
}

// send processes events as one beacon at element time at.
func (h *harness) send(t testing.TB, at time.Time, events ...schemas.Event) {
	t.Helper()
	b, err := schemas.MarshalBeacon(&schemas.Beacon{BeaconID: "b", Events: events})
	if err != nil {
		t.Fatal(err)
	}
	err = h.fn.ProcessElement(context.Background(), mtime.FromTime(at), b, h.emit, h.tally, func(schemas.DeadLetter) { h.dead++ })
	if err != nil {
		t.Fatal(err)
	}
}

func (h *harness) finish() {
	h.fn.FinishBundle(context.Background(), h.emit, h.tally, func(schemas.DeadLetter) {})
}

func ev(id, item, user string, at time.Time) schemas.Event {
	return schemas.Event{EventID: id, Type: "video", Item: item, User: user, TS: at}
}

// Property: with rules, an event counts only when the rule definition
// counts it (duplicates in later beacons, bots, blocklisted items, repeats
// and events past the cap do not); without rules (nil) every valid event
// counts; with --rules=none only duplicates are dropped.
func TestRules(t *testing.T) {
	dir := t.TempDir()
	bots, block := filepath.Join(dir, "bots"), filepath.Join(dir, "block")
	must(t, os.WriteFile(bots, []byte("u_bot\n"), 0o644))
	must(t, os.WriteFile(block, []byte("video,v_bad\n"), 0o644))

	var first, second []schemas.Event
	first = append(first,
		ev("a1", "v_1", "u_1", t0),
		ev("a2", "v_1", "u_2", t0.Add(time.Second)),
		ev("b1", "v_1", "u_bot", t0.Add(2*time.Second)),
		ev("k1", "v_bad", "u_1", t0.Add(3*time.Second)),
		ev("r1", "v_2", "u_1", t0.Add(4*time.Second)),
		ev("r2", "v_2", "u_1", t0.Add(9*time.Second)), // repeat (5 s < 30 s)
		ev("n1", "v_2", "", t0.Add(9*time.Second)),    // no account: no account rules
	)
	// One account posts v_spam 500 times, 1 s apart, with no repeat gap:
	// the cap (10) stops it.
	for i := range 500 {
		first = append(first, ev(fmt.Sprintf("s%d", i), "v_spam", "u_spam", t0.Add(time.Duration(i)*time.Second)))
	}
	// Every event again, in later beacons seconds apart.
	second = append(second, first...)

	all := DefaultRules()
	all.Bots, all.Blocklist = bots, block
	none := rules.None()
	for _, tc := range []struct {
		name  string
		rules *rules.Config
		gap   time.Duration
		want  map[string]uint64
	}{
		{"nil", nil, 0, map[string]uint64{"v_1": 6, "v_bad": 2, "v_2": 6, "v_spam": 1000}},
		{"none", &none, 0, map[string]uint64{"v_1": 3, "v_bad": 1, "v_2": 3, "v_spam": 500}},
		{"all", &all, 30 * time.Second, map[string]uint64{"v_1": 2, "v_2": 2, "v_spam": 1}},
		{"all-no-gap", &all, 0, map[string]uint64{"v_1": 2, "v_2": 3, "v_spam": 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Scopes = false
			if tc.rules != nil {
				rc := *tc.rules
				if !rc.Off {
					rc.RepeatGap = tc.gap
				}
				cfg.Rules = &rc
			}
			h := newHarness(t, cfg)
			// Element time is each beacon's last event time (the source's
			// clock; an event more than a dedupe bucket ahead of it would
			// be neither deduped nor judged); the copies arrive 10 s later.
			for i := 0; i < len(first); i += 50 {
				j := min(i+50, len(first))
				h.send(t, first[j-1].TS, first[i:j]...)
				h.send(t, first[j-1].TS.Add(10*time.Second), second[i:j]...)
			}
			h.finish()
			got := map[string]uint64{}
			for k, c := range h.counts {
				got[k[strings.LastIndex(k, "/")+1:]] = c
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("counts %v, want %v", got, tc.want)
			}
		})
	}
}

// Property: the hot path allocates nothing per event with rules on, once
// the filter's tables for the events' time are allocated.
func TestRulesNoAllocs(t *testing.T) {
	off := allocsPerBeacon(t, nil)
	rc := DefaultRules()
	on := allocsPerBeacon(t, &rc)
	t.Logf("allocations per 500-event beacon: %.1f without rules, %.1f with", off, on)
	if on > off {
		t.Errorf("the rules add %.1f allocations per 500-event beacon", on-off)
	}
}

// allocsPerBeacon is the allocations of one 500-event beacon (fresh
// events in warmed-up groups and tables) with rules rc.
func allocsPerBeacon(t *testing.T, rc *rules.Config) float64 {
	cfg := DefaultConfig()
	cfg.Rules = rc
	h := newHarness(t, cfg)
	beacons := benchBeacons(t, 4, 500, time.Minute)
	for _, b := range beacons { // warm up: tables, groups, counters
		h.fn.ProcessElement(context.Background(), mtime.FromTime(t0), b, nopEmit, nopEmit, nopDead)
	}
	// Fresh events (another seed) over the same minute.
	fresh := benchBeaconsSeed(t, 9, 4, 500, time.Minute)
	i := 0
	allocs := testing.AllocsPerRun(len(fresh), func() {
		h.fn.ProcessElement(context.Background(), mtime.FromTime(t0), fresh[i%len(fresh)], nopEmit, nopEmit, nopDead)
		i++
	})
	return allocs
}

func nopEmit(beam.EventTime, string, []byte) {}
func nopDead(schemas.DeadLetter)             {}

// benchBeacons is n beacons of size events each, spread over span of event
// time from t0, with Zipf(1.1) items and Zipf(1.1) users over 1M each.
func benchBeacons(tb testing.TB, n, size int, span time.Duration) [][]byte {
	return benchBeaconsSeed(tb, 42, n, size, span)
}

func benchBeaconsSeed(tb testing.TB, seed uint64, n, size int, span time.Duration) [][]byte {
	tb.Helper()
	r := rand.New(rand.NewPCG(seed, seed))
	items := rand.NewZipf(r, 1.1, 1, 1<<20)
	users := rand.NewZipf(r, 1.1, 1, 1<<20)
	countries := []string{"US", "IN", "BR", "DE"}
	out := make([][]byte, n)
	total := n * size
	for i := range out {
		b := schemas.Beacon{BeaconID: fmt.Sprintf("b%d-%d", seed, i), Events: make([]schemas.Event, size)}
		for j := range b.Events {
			k := i*size + j
			b.Events[j] = schemas.Event{
				EventID: fmt.Sprintf("%016x%016x", r.Uint64(), r.Uint64()),
				Type:    "video",
				Item:    fmt.Sprintf("v_%d", items.Uint64()),
				User:    fmt.Sprintf("u_%d", users.Uint64()),
				Country: countries[k%len(countries)],
				TS:      t0.Add(time.Duration(k) * span / time.Duration(total)),
			}
		}
		var err error
		if out[i], err = schemas.MarshalBeacon(&b); err != nil {
			tb.Fatal(err)
		}
	}
	return out
}

// BenchmarkPreagg is the pre-aggregation's cost per event with the rules
// off (nil), with only the dedupe (none) and with every rule (all, the
// fast path's defaults), and with every rule and the distinct-users
// tallies trending reads (all+users: UsersTop 64, the streaming default),
// and that again flushed every 100,000 events as the streaming job's 1 s
// bundles at 100k events/s do (all+users/1s: the per-flush work, each
// list's tally built and encoded, counts 2.6 times per pass):
// 2^18 events over 5 minutes of event time in beacons of 500, Zipf(1.1)
// items and users, with scopes. One op is one beacon; ns/event is the
// per-event cost. A pass over the beacons ends the bundle (flush, timed:
// the tallies' sort and sketches happen there) and starts a fresh DoFn
// outside the timer, so no event is a duplicate.
func BenchmarkPreagg(b *testing.B) {
	const size = 500
	beacons := benchBeacons(b, (1<<18)/size, size, 5*time.Minute)
	// all+users/summaries: a cap on distinct keys (MaxDistinct) small
	// enough that a bundle flushes its summaries many times before its
	// tallies, as at 400k events/s with every scope.
	for _, name := range []string{"off", "none", "all", "all+users", "all+users/1s", "all+users/summaries"} {
		b.Run(name, func(b *testing.B) {
			cfg := DefaultConfig()
			switch name {
			case "none":
				rc := rules.None()
				rc.MaxIDs = DefaultRules().MaxIDs
				cfg.Rules = &rc
			case "all":
				rc := DefaultRules()
				cfg.Rules = &rc
			case "all+users", "all+users/1s", "all+users/summaries":
				rc := DefaultRules()
				cfg.Rules = &rc
				cfg.UsersTop = 64
				if name == "all+users/summaries" {
					cfg.MaxDistinct = 1 << 14
				}
			}
			flushEvery := len(beacons) // beacons per flush
			if name == "all+users/1s" {
				flushEvery = 100_000 / size
			}
			h := benchLoop(b, cfg, beacons, flushEvery, t0)
			var st rules.Stats
			if h.fn.filter != nil {
				st = h.fn.filter.TakeStats()
				b.ReportMetric(float64(cfg.Rules.FilterMaxBytes())/(1<<20), "MiB/filter")
				var n uint64
				for _, c := range st.Events {
					n += c
				}
				b.ReportMetric(float64(st.Untracked)/float64(max(n, 1)), "untracked/event")
				b.ReportMetric(float64(st.Forgotten)/float64(max(n, 1)), "forgotten-keys/event")
			}
			events := float64(b.N) * size
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/events, "ns/event")
			b.ReportMetric(events/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// benchLoop processes b.N of beacons, in turn, at element time at, with a
// flush every flushEvery beacons and a fresh pre-aggregation (outside the
// timer) each time the beacons come round again (the same events again
// would be duplicates). It returns the last one.
func benchLoop(b *testing.B, cfg Config, beacons [][]byte, flushEvery int, at time.Time) *harness {
	h := newHarness(b, cfg)
	ctx := context.Background()
	et := mtime.FromTime(at)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := i % len(beacons)
		if k == 0 && i > 0 {
			h.fn.flush(nopEmit, nopEmit, true)
			b.StopTimer()
			h = newHarness(b, cfg)
			b.StartTimer()
		} else if k > 0 && k%flushEvery == 0 {
			h.fn.flush(nopEmit, nopEmit, true)
		}
		h.fn.ProcessElement(ctx, et, beacons[k], nopEmit, nopEmit, nopDead)
	}
	h.fn.flush(nopEmit, nopEmit, true)
	b.StopTimer()
	return h
}

// Property: the fast path's default rules state is bounded as the package
// doc says (28.4 MiB), and FilterMaxBytes agrees with a built Filter.
func TestDefaultRulesBound(t *testing.T) {
	rc := DefaultRules()
	r, err := rules.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rc.FilterMaxBytes(), r.NewFilter().MaxBytes(); got != want {
		t.Fatalf("FilterMaxBytes %d, Filter.MaxBytes %d", got, want)
	}
	if got := rc.FilterMaxBytes(); got != 29_753_344 {
		t.Errorf("default filter bound %d bytes, the package doc says 29,753,344 (28.4 MiB)", got)
	}
	cfg := DefaultConfig()
	short := DefaultRules()
	short.DedupeHorizon = time.Minute
	cfg.Rules = &short
	if err := cfg.Validate(); err == nil {
		t.Error("a dedupe horizon shorter than the allowed lateness validated")
	}
}

// TestPartialSize: flushes keep 8N per (list, partition) by default, never
// more than MaxDistinct nor fewer than N, and PartialN may not cut them
// below the bucket's N.
func TestPartialSize(t *testing.T) {
	cfg := DefaultConfig()
	if got, want := cfg.PartialSize(), DefaultPartialFactor*cfg.Summary.N; got != want || want > cfg.MaxDistinct {
		t.Errorf("default partial size %d, want %d x N = %d (MaxDistinct %d)", got, DefaultPartialFactor, want, cfg.MaxDistinct)
	}
	cfg.MaxDistinct = cfg.Summary.N * 2 // a flush holds no more
	if got := cfg.PartialSize(); got != cfg.MaxDistinct {
		t.Errorf("partial size %d with MaxDistinct %d, want MaxDistinct", got, cfg.MaxDistinct)
	}
	cfg.MaxDistinct = 100 // below N: a partial still holds N
	if got := cfg.PartialSize(); got != cfg.Summary.N {
		t.Errorf("partial size %d with MaxDistinct 100, want N %d", got, cfg.Summary.N)
	}
	cfg.PartialN = cfg.Summary.N * 3
	if got := cfg.PartialSize(); got != cfg.PartialN {
		t.Errorf("partial size %d, want PartialN %d", got, cfg.PartialN)
	}
	cfg.PartialN = cfg.Summary.N - 1
	if err := cfg.Validate(); err == nil {
		t.Error("PartialN below the summaries' N validated")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Property: a region's list counts its items in RegionPartitions
// consecutive partitions (mod P) and a country's in CountryPartitions,
// each item in one of them and the same one in every bucket, while the
// global lists use all P; the counts are those of the events either way,
// and the lists of different scopes or types start at different
// partitions. A list's users tally has room for as many items (UsersTop
// per partition of 16, 2 x UsersTop per partition of 8, 4 x UsersTop per
// partition of 4).
func TestRegionPartitions(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Partitions, cfg.RegionPartitions, cfg.CountryPartitions, cfg.UsersTop = 16, 4, 8, 8
	h := newHarness(t, cfg)
	parts := map[string]map[int]bool{}   // list -> partitions it appeared in
	where := map[string]map[string]int{} // list -> item -> its partition
	emit := func(et beam.EventTime, key string, set []byte) {
		p, err := strconv.Atoi(key)
		if err != nil {
			t.Fatal(err)
		}
		must(t, summary.EachInSet(set, func(list string, b []byte) error {
			sm, err := summary.Unmarshal(b)
			if err != nil {
				return err
			}
			l := strings.ReplaceAll(list, "\x00", "/")
			if parts[l] == nil {
				parts[l], where[l] = map[int]bool{}, map[string]int{}
			}
			parts[l][p] = true
			for _, e := range sm.Entries {
				if q, ok := where[l][e.Item]; ok && q != p {
					t.Errorf("%s: %s in partitions %d and %d", l, e.Item, q, p)
				}
				where[l][e.Item] = p
			}
			return nil
		}))
		h.emit(et, key, set)
	}
	bucketTallies := map[string]map[beam.EventTime]int{} // list -> bucket -> items
	tally := func(et beam.EventTime, list string, b []byte) {
		tl, err := users.UnmarshalTally(b)
		must(t, err)
		if bucketTallies[list] == nil {
			bucketTallies[list] = map[beam.EventTime]int{}
		}
		bucketTallies[list][et] += len(tl.Items)
	}
	want := map[string]uint64{}
	var events []schemas.Event
	for i := range 4000 {
		e := ev(fmt.Sprintf("e%d", i), fmt.Sprintf("v%d", i%500), fmt.Sprintf("u%d", i), t0.Add(time.Duration(i)*10*time.Millisecond))
		e.Country, e.Region = "IN", []string{"IN-MH", "IN-KA"}[i%2]
		if i%3 == 0 {
			e.Type, e.Item = "hashtag", "#"+e.Item
		}
		events = append(events, e)
		for _, sc := range []string{"global", e.Country, e.Region} {
			want[e.Type+"/"+sc+"/"+e.Item]++
		}
	}
	b, err := schemas.MarshalBeacon(&schemas.Beacon{BeaconID: "b", Events: events})
	must(t, err)
	must(t, h.fn.ProcessElement(context.Background(), mtime.FromTime(t0.Add(time.Minute)), b, emit, tally, nopDead))
	h.fn.FinishBundle(context.Background(), emit, tally, nopDead)
	h.checkCounts(t, want)
	starts := map[int]bool{}
	for l, ps := range parts {
		typ, scope, _ := strings.Cut(l, "/")
		np := 16
		switch {
		case schemas.IsRegion(scope):
			np = 4
		case schemas.IsCountry(scope):
			np = 8
		}
		if len(ps) != np {
			t.Errorf("%s in %d partitions %v, want %d", l, len(ps), ps, np)
		}
		if np == 16 {
			continue
		}
		off := summary.Partition(summary.Hash(typ+"\x00"+scope), 16)
		for i := range np {
			if !ps[(off+i)%16] {
				t.Errorf("%s: partitions %v, want the %d from %d", l, ps, np, off)
			}
		}
		starts[off] = true
	}
	if len(starts) < 2 {
		t.Errorf("the six region and country lists all start at the same partition: %v", starts)
	}
	// Each 10 s bucket: about 470 video items globally (29 a partition of
	// 16) and in IN (59 a partition of 8), 230 in IN-MH (58 a partition
	// of 4): every partition's top is full, so a bucket's tally has 16 x
	// UsersTop items in all three.
	for _, l := range []string{"video\x00global", "video\x00IN", "video\x00IN-MH"} {
		if len(bucketTallies[l]) < 4 {
			t.Errorf("%q: %d buckets' tallies, want 4", l, len(bucketTallies[l]))
		}
		for b, n := range bucketTallies[l] {
			if n != 16*8 {
				t.Errorf("%q, bucket %d: a tally of %d items, want %d", l, b, n, 16*8)
			}
		}
	}
}
