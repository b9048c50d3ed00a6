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
	"github.com/prometheus/client_golang/prometheus"

	"github.com/topk-dev/topk/internal/memtest"
	"github.com/topk-dev/topk/internal/stagemetrics"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/summary"
	"github.com/topk-dev/topk/transforms/users"
)

// Property (issue 12): the users tallies count each item's distinct
// trusted users, not its events: one account posting an item 500 times is
// one user (and at most the cap in counts); 60 accounts posting twice are
// 60; accounts of trust weight 0 are none; and Pairs sums the distinct
// users over every item, the tracked or not. Bundles flushed early (a
// small MaxPairs) change nothing: tallies unite.
func TestUsersTallies(t *testing.T) {
	dir := t.TempDir()
	trust := filepath.Join(dir, "trust.csv")
	var tb strings.Builder
	for u := range 40 {
		fmt.Fprintf(&tb, "new_%d,0\n", u)
	}
	must(t, os.WriteFile(trust, []byte(tb.String()), 0o644))

	var events []schemas.Event
	add := func(item, user string, at time.Duration) {
		events = append(events, ev(fmt.Sprintf("e%d", len(events)), item, user, t0.Add(at)))
	}
	for i := range 500 {
		add("v_spam", "u_spam", time.Duration(i)*100*time.Millisecond)
	}
	for u := range 60 {
		add("v_organic", fmt.Sprintf("u_%d", u), time.Duration(u)*time.Second)
		add("v_organic", fmt.Sprintf("u_%d", u), time.Duration(u)*time.Second+time.Minute)
	}
	for u := range 40 {
		add("v_campaign", fmt.Sprintf("new_%d", u), time.Duration(u)*time.Second)
	}
	for i := range 300 { // the tail: one user each, not tracked with UsersTop 3
		add(fmt.Sprintf("v_tail%d", i), fmt.Sprintf("t_%d", i), time.Duration(i)*100*time.Millisecond)
	}

	for _, maxPairs := range []int{0, 7} {
		t.Run(fmt.Sprintf("max_pairs=%d", maxPairs), func(t *testing.T) {
			rc := DefaultRules()
			rc.RepeatGap = 0
			rc.Trust = trust
			cfg := DefaultConfig()
			cfg.Rules = &rc
			cfg.UsersTop = 3
			cfg.MaxPairs = maxPairs
			h := newHarness(t, cfg)
			for i := 0; i < len(events); i += 50 {
				j := min(i+50, len(events))
				h.send(t, events[j-1].TS, events[i:j]...)
			}
			h.finish()
			tl := h.tallies["video/global"]
			if tl == nil {
				t.Fatalf("no tally for video/global: %v", h.tallies)
			}
			usersOf := func(item string) uint64 {
				e := tl.Items[item]
				if e == nil {
					t.Fatalf("%s: not in the tally (%d items)", item, len(tl.Items))
				}
				return e.Users.Estimate()
			}
			if got := usersOf("v_spam"); got != 1 {
				t.Errorf("v_spam: %d users, want 1", got)
			}
			if got := h.counts["video/global/v_spam"]; got != uint64(rc.Cap) {
				t.Errorf("v_spam: %d counted events, want the cap %d", got, rc.Cap)
			}
			if got := usersOf("v_organic"); got != 60 {
				t.Errorf("v_organic: %d users, want 60", got)
			}
			if e := tl.Items["v_campaign"]; e != nil && e.Users.Estimate() != 0 {
				t.Errorf("v_campaign: %d trusted users, want 0 (trust 0)", e.Users.Estimate())
			}
			// 1 + 60 + 300 distinct (user, item) pairs; the campaign's are
			// not trusted.
			if got := tl.Pairs.Estimate(); got < 355 || got > 367 {
				t.Errorf("pairs %d, want 361 within the sketch's error", got)
			}
			if _, ok := h.counts["video/global/v_campaign"]; !ok {
				t.Error("v_campaign is not counted: trust must weigh users, not drop events")
			}
		})
	}
}

// Property (issue 12): the users tallies' memory is flat under a spam
// wave: 1.2M events, each of a new junk item from a new junk account, add
// nothing to the live heap once the per-bundle buffers exist (the pairs
// are bounded by MaxPairs, then flushed), and every tally holds at most
// UsersTop items per partition.
func TestUsersMemoryFlatUnderSpam(t *testing.T) {
	if testing.Short() {
		t.Skip("spam wave")
	}
	cfg := DefaultConfig()
	cfg.UsersTop = 64
	cfg.MaxPairs = 1 << 16
	cfg.MaxDistinct = 1 << 16
	h := newHarness(t, cfg)
	most := 0
	tallies := func(_ beam.EventTime, _ string, b []byte) {
		tl, err := users.UnmarshalTally(b)
		if err != nil {
			panic(err)
		}
		most = max(most, len(tl.Items))
	}
	batch := make([]schemas.Event, 500)
	wave := func(from, n int) {
		for i := from; i < from+n; i += len(batch) {
			for j := range batch {
				k := i + j
				batch[j] = ev(fmt.Sprint("e", k), fmt.Sprint("junk", k), fmt.Sprint("acct", k), t0.Add(time.Duration(k%60_000)*time.Millisecond))
			}
			b, err := schemas.MarshalBeacon(&schemas.Beacon{BeaconID: "b", Events: batch})
			if err != nil {
				t.Fatal(err)
			}
			if err := h.fn.ProcessElement(context.Background(), mtime.FromTime(t0.Add(time.Minute)), b, nopEmit, tallies, nopDead); err != nil {
				t.Fatal(err)
			}
		}
	}
	wave(0, 200_000)
	before := memtest.LiveHeap()
	wave(200_000, 1_000_000)
	after := memtest.LiveHeap()
	h.fn.FinishBundle(context.Background(), nopEmit, tallies, nopDead)
	t.Logf("heap %+d bytes over 1M junk items and accounts; largest tally %d items", int64(after)-int64(before), most)
	if grown := int64(after) - int64(before); grown > 4<<20 {
		t.Errorf("live heap grew by %d bytes under the spam wave", grown)
	}
	if most == 0 || most > 64*cfg.Partitions {
		t.Errorf("largest tally %d items, want 1..%d (64 per partition)", most, 64*cfg.Partitions)
	}
}

// Property: the pair slices kept for reuse between flushes stay within 2
// x MaxPairs of capacity however the bundles' lists and sizes vary (a
// slice grown by a big list is not kept forever by every small one).
func TestPairPoolBounded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.UsersTop = 4
	cfg.MaxPairs = 2000
	h := newHarness(t, cfg)
	k := 0
	for round := range 40 {
		// Bundles alternate between a few busy lists and many quiet ones.
		lists := 3
		if round%2 == 1 {
			lists = 300
		}
		batch := make([]schemas.Event, 0, 500)
		for i := range 1500 {
			e := ev(fmt.Sprint("e", k), fmt.Sprint("v", i%97), fmt.Sprint("u", k), t0.Add(time.Duration(k%50_000)*time.Millisecond))
			e.Type = fmt.Sprint("t", i%lists)
			k++
			batch = append(batch, e)
			if len(batch) == cap(batch) {
				sendBeacon(t, h.fn, t0.Add(time.Minute), batch, nopEmit, nopEmit)
				batch = batch[:0]
			}
		}
		h.fn.FinishBundle(context.Background(), nopEmit, nopEmit, nopDead)
		held := 0
		for _, ps := range h.fn.freePairs {
			held += cap(ps)
		}
		if held != h.fn.freeCap || held > 2*cfg.MaxPairs {
			t.Fatalf("round %d: free pair slices hold %d pairs (tracked %d), want <= %d", round, held, h.fn.freeCap, 2*cfg.MaxPairs)
		}
	}
	if len(h.fn.freePairs) == 0 {
		t.Fatal("no pair slice kept for reuse")
	}
}

// Property: summary flushes for MaxDistinct in the middle of a bundle do
// not split its users tally: one tally per (list, bucket) and bundle,
// whose biggest items carry every user they had in the bundle and their
// events summed over the flushes; the summaries still count every event.
func TestTalliesAcrossSummaryFlushes(t *testing.T) {
	cfg := DefaultConfig()
	cfg.UsersTop = 2
	cfg.MaxDistinct = 16 // a summary flush every few beacons
	h := newHarness(t, cfg)
	n, bytes := 0, 0
	tally := func(et beam.EventTime, list string, b []byte) {
		n++
		bytes += len(b)
		h.tally(et, list, b)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(stagemetrics.Collector())
	gather := func() map[string]float64 {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		return stagemetrics.Values(fams)
	}
	before := gather()
	sets, setBytes := 0, 0
	emit := func(et beam.EventTime, key string, set []byte) {
		sets++
		setBytes += len(set)
		h.emit(et, key, set)
	}
	var events []schemas.Event
	for i := range 300 {
		at := t0.Add(time.Duration(i) * 10 * time.Millisecond) // one 10 s bucket
		events = append(events, ev(fmt.Sprint("h", i), "hot", fmt.Sprint("u", i%100), at))
		if i%3 == 0 {
			events = append(events, ev(fmt.Sprint("w", i), "warm", fmt.Sprint("w", (i/3)%30), at))
		}
		events = append(events, ev(fmt.Sprint("t", i), fmt.Sprint("tail", i), fmt.Sprint("t", i), at))
	}
	for i := 0; i < len(events); i += 20 {
		j := min(i+20, len(events))
		sendBeacon(t, h.fn, events[j-1].TS, events[i:j], emit, tally)
		for _, g := range h.fn.groups {
			for p, m := range g.cands {
				if len(m) > 4*cfg.UsersTop {
					t.Fatalf("partition %d holds %d candidates, want <= %d", p, len(m), 4*cfg.UsersTop)
				}
			}
		}
	}
	if n != 0 {
		t.Fatalf("%d tallies before the bundle ended, want 0 (pairs stay until the bundle's end)", n)
	}
	if got := gather()["topk_stream_preagg_summary_sets_total"] - before["topk_stream_preagg_summary_sets_total"]; got != 0 {
		t.Fatalf("summary sets counted %v before the bundle ended, want 0 (added once per bundle)", got)
	}
	h.fn.FinishBundle(context.Background(), emit, tally, nopDead)
	if n != 1 {
		t.Fatalf("%d tallies for one list and bucket, want 1", n)
	}
	if sets < 2 {
		t.Fatalf("%d summary sets, want several (a flush every few beacons)", sets)
	}
	// The volume counters the scorer's cost follows (the tally and its
	// bytes) and the shuffle's (every flush's summary sets and their
	// bytes), added at the bundle's end.
	after := gather()
	for k, want := range map[string]float64{
		"topk_stream_trend_tallies_total": 1, "topk_stream_trend_tally_bytes_total": float64(bytes),
		"topk_stream_preagg_summary_sets_total": float64(sets), "topk_stream_preagg_summary_bytes_total": float64(setBytes),
	} {
		if got := after[k] - before[k]; got != want {
			t.Errorf("%s grew by %v, want %v", k, got, want)
		}
	}
	tl := h.tallies["video/global"]
	for _, c := range []struct {
		item          string
		users, events uint64
	}{{"hot", 100, 300}, {"warm", 30, 100}} {
		e := tl.Items[c.item]
		if e == nil {
			t.Fatalf("%s not in the tally (%d items)", c.item, len(tl.Items))
		}
		if got := e.Users.Estimate(); got != c.users {
			t.Errorf("%s: %d users, want %d", c.item, got, c.users)
		}
		if e.Count != c.events {
			t.Errorf("%s: count %d, want %d (summed over the summary flushes)", c.item, e.Count, c.events)
		}
		if got := h.counts["video/global/"+c.item]; got != c.events {
			t.Errorf("%s: summaries counted %d, want %d", c.item, got, c.events)
		}
	}
	if got := tl.Pairs.Estimate(); got < 420 || got > 440 {
		t.Errorf("pairs %d, want 430 (100 + 30 + 300) within the sketch's error", got)
	}
}

// Property: a flood of distinct scopes (regions are checked for their
// form only) does not make the groups held between tallies grow with the
// flood: each new region is a group of its own with one pair, and
// keeping such groups for the bundle's tally would hold up to MaxPairs of
// them. The groups stay within about MaxDistinct, as before tallies were
// per bundle, and the tallies go out early instead.
func TestScopeFloodBoundsGroups(t *testing.T) {
	cfg := DefaultConfig()
	cfg.UsersTop = 4
	cfg.Scopes = true
	cfg.MaxDistinct = 256
	h := newHarness(t, cfg)
	most, tallies := 0, 0
	tally := func(beam.EventTime, string, []byte) { tallies++ }
	batch := make([]schemas.Event, 0, 50)
	for k := range 20_000 {
		e := ev(fmt.Sprint("e", k), fmt.Sprint("v", k%7), fmt.Sprint("u", k), t0.Add(time.Duration(k%9_000)*time.Millisecond))
		e.Country, e.Region = "IN", "IN-"+strings.ToUpper(strconv.FormatInt(int64(k), 36))
		batch = append(batch, e)
		if len(batch) < cap(batch) {
			continue
		}
		sendBeacon(t, h.fn, t0.Add(time.Minute), batch, nopEmit, tally)
		batch = batch[:0]
		most = max(most, len(h.fn.groups))
	}
	t.Logf("at most %d groups held; %d tallies before the bundle's end", most, tallies)
	if most > 2*cfg.MaxDistinct {
		t.Errorf("%d groups held, want <= %d (2 x MaxDistinct)", most, 2*cfg.MaxDistinct)
	}
	if tallies == 0 {
		t.Error("no tally before the bundle's end: the flood's groups were all held")
	}
}

// sendBeacon processes events as one beacon at element time at, the
// summary sets to emit and the tallies to tally.
func sendBeacon(t testing.TB, fn *preaggFn, at time.Time, events []schemas.Event, emit, tally func(beam.EventTime, string, []byte)) {
	t.Helper()
	b, err := schemas.MarshalBeacon(&schemas.Beacon{BeaconID: "b", Events: events})
	if err != nil {
		t.Fatal(err)
	}
	if err := fn.ProcessElement(context.Background(), mtime.FromTime(at), b, emit, tally, nopDead); err != nil {
		t.Fatal(err)
	}
}

// Property: topIndex finds every top item at its index and nothing else,
// for tops of 0 to 300 items, including hashes that share their first
// slot (the table probes past them).
func TestTopIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	var ti topIndex
	for n := 0; n <= 300; n += 13 {
		top := make([]summary.Counted, n)
		ti.reset(top) // sets the table's size for n items
		in := map[uint64]int{}
		for i := range top {
			h := rng.Uint64()
			for i%3 == 1 && ti.slot(h) != ti.slot(top[i-1].Hash) {
				h = rng.Uint64() // the previous item's slot
			}
			for _, dup := in[h]; dup; _, dup = in[h] {
				h = rng.Uint64()
			}
			top[i].Hash = h
			in[h] = i
		}
		ti.reset(top)
		for h, i := range in {
			if got := ti.get(h); got != int32(i) {
				t.Fatalf("n=%d: get(%x) = %d, want %d", n, h, got, i)
			}
		}
		for k := 0; k < 1000; k++ {
			h := rng.Uint64()
			if _, ok := in[h]; !ok && ti.get(h) != -1 {
				t.Fatalf("n=%d: get(%x) found an item not in top", n, h)
			}
		}
	}
}

// BenchmarkAddTally is the users tally of one (list, partition) and
// bundle, built and encoded: 20,000 (item, user) pairs (a 1 s bundle at
// 1M events/s over 3 types and 16 partitions, one scope), Zipf(1.1) over
// 2^20 items and users, with the UsersTop 64 biggest items' users
// sketched. ns/pair is the per-event cost trending adds here.
func BenchmarkAddTally(b *testing.B) {
	const n = 20_000
	r := rand.New(rand.NewPCG(3, 3))
	iz := rand.NewZipf(r, 1.1, 1, 1<<20)
	uz := rand.NewZipf(r, 1.1, 1, 1<<20)
	c := summary.NewCounter(1 << 16)
	ps := make([]pair, n)
	for i := range ps {
		item := "v" + strconv.FormatUint(iz.Uint64(), 10)
		h := summary.Hash(item)
		c.Add(item, h, 1)
		ps[i] = pair{item: h, user: users.Hash(strconv.FormatUint(uz.Uint64(), 10)) | 1}
	}
	top := c.TopInto(nil, 64)
	fn := &preaggFn{}
	tw := users.NewTallyWriter()
	var out []byte
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tw.Reset()
		fn.addTally(tw, top, ps)
		var err error
		if out, err = tw.AppendBinary(out[:0]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/pair")
}

// TestSummaryTopIsCounterTop checks that the tallies' top items taken
// from a counter's summary are the counter's own Top: the same items with
// the same counts, whether the counter holds fewer items than the
// summary's N or many more, with ties at the cut (broken by hash in
// both), and that the names outlive the counter's reset.
func TestSummaryTopIsCounterTop(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	cfg := summary.Config{N: 256}
	for _, distinct := range []int{1, 50, 256, 257, 3000} {
		for _, n := range []int{1, 64, 256} {
			c := summary.NewCounter(1 << 16)
			for i := 0; i < 4*distinct; i++ {
				// Few distinct counts: many ties at every cut.
				k := r.IntN(distinct)
				item := fmt.Sprintf("item-%d", k)
				c.Add(item, summary.Hash(item), uint64(1+k%3))
			}
			want := map[string]uint64{}
			for _, it := range c.Top(n) {
				want[strings.Clone(it.Item)] = it.Count
			}
			sm := c.Summary(cfg)
			got := summaryTop(nil, sm, n)
			c.Reset()
			c.Add("overwrites-the-arena", 1, 1)
			if len(got) != len(want) {
				t.Fatalf("distinct %d, n %d: %d items, want %d", distinct, n, len(got), len(want))
			}
			for _, it := range got {
				if w, ok := want[it.Item]; !ok || w != it.Count || it.Hash != summary.Hash(it.Item) {
					t.Fatalf("distinct %d, n %d: %q count %d: not the counter's top (%d, %v)", distinct, n, it.Item, it.Count, w, ok)
				}
			}
		}
	}
}

// TestTallyTopBeyondSummaryN: when a partition's tally wants more items
// (UsersTop x P / its partitions) than a bucket's summary keeps (N), the
// tally still holds the counter's UsersTop biggest items with their exact
// users, not only the summary's N (flush's fallback to Counter.TopInto),
// also when they were stashed at a summary flush (MaxDistinct) before
// the counter was reset and reused: their names are clones, not the
// counter's.
func TestTallyTopBeyondSummaryN(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Partitions, cfg.Scopes, cfg.Rules = 1, false, nil
	cfg.Summary.N, cfg.PartialN = 8, 8 // flushes cut to 8 too
	cfg.UsersTop = 20
	cfg.MaxDistinct = 30 // a summary flush after items i00-i29
	h := newHarness(t, cfg)
	var events []schemas.Event
	for k := range 50 { // item k: 50 - k events, each from a user of its own
		for j := range 50 - k {
			events = append(events, ev(fmt.Sprintf("e%d-%d", k, j), fmt.Sprintf("i%02d", k), fmt.Sprintf("u%d-%d", k, j), t0))
		}
	}
	h.send(t, t0, events...)
	h.finish()
	tl := h.tallies["video/global"]
	if tl == nil {
		t.Fatalf("no tally for video/global: %v", h.tallies)
	}
	if len(tl.Items) != cfg.UsersTop {
		t.Fatalf("%d items in the tally, want UsersTop %d (the summary keeps %d)", len(tl.Items), cfg.UsersTop, cfg.Summary.N)
	}
	for k := range cfg.UsersTop {
		it := fmt.Sprintf("i%02d", k)
		e := tl.Items[it]
		if e == nil || e.Count != uint64(50-k) || e.Users.Estimate() != uint64(50-k) {
			t.Errorf("%s: %+v, want %d events and users", it, e, 50-k)
		}
	}
}
