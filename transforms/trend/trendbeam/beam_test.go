package trendbeam

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/passert"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/teststream"

	"github.com/topk-dev/topk/internal/prismopt/prismtest"
	"github.com/topk-dev/topk/internal/redisx"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/publish"
	"github.com/topk-dev/topk/transforms/publish/liststore"
	"github.com/topk-dev/topk/transforms/trend"
	"github.com/topk-dev/topk/transforms/users"
)

// Pipelines in these tests run on Prism in-process (ptest's default runner).
func TestMain(m *testing.M) { prismtest.Main(m) }

func init() {
	register.Function2x0[string, func(beam.EventTime, string, []byte)](unpackFn)
	register.Function2x0[[]byte, func(beam.EventTime, string, []byte)](unpackBytesFn)
	register.Function2x2[string, []byte, string, error](formatFn)
}

// unpackFn turns "ms\x00key\x00blob" into KV<key, blob> at event time ms-1,
// as merge.Lists' panes are stamped inside their window.
func unpackFn(s string, emit func(beam.EventTime, string, []byte)) {
	parts := strings.SplitN(s, "\x00", 3)
	var ms int64
	fmt.Sscan(parts[0], &ms)
	emit(beam.EventTime(ms-1), parts[1], []byte(parts[2]))
}

func formatFn(k string, v []byte) (string, error) { return k + " " + string(v), nil }

var t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

// lists5m builds the 5-minute lists of two scopes every 10 s for 40
// minutes: a steady set of items, and in IN an item that jumps at minute 25.
func lists5m() map[string][]*schemas.List { return listsFrom(t0, 240, 10*time.Second) }

// listsFrom builds n lists of two scopes every step from start + step:
// lists5m's items, the jump at start + 25 minutes.
func listsFrom(start time.Time, n int, step time.Duration) map[string][]*schemas.List {
	out := map[string][]*schemas.List{}
	for i := 1; i <= n; i++ {
		at := start.Add(time.Duration(i) * step)
		for _, scope := range []string{"global", "IN"} {
			l := &schemas.List{Type: "hashtag", Scope: scope, Window: schemas.Window5m, AsOf: at, Version: at.Unix(), Complete: true, Rules: "rules-test-1"}
			counts := map[string]uint64{}
			for j := 0; j < 30; j++ {
				counts[fmt.Sprintf("s%02d", j)] = uint64(3000/(j+1) + (i*7+j*13)%11)
			}
			if scope == "IN" && at.After(start.Add(25*time.Minute)) {
				counts["jump"] = uint64(math.Min(float64(at.Sub(start.Add(25*time.Minute))/time.Second)*4, 1200))
			}
			names := make([]string, 0, len(counts))
			for it := range counts {
				names = append(names, it)
			}
			slices.SortFunc(names, func(a, b string) int {
				if counts[a] != counts[b] {
					if counts[a] > counts[b] {
						return -1
					}
					return 1
				}
				return strings.Compare(a, b)
			})
			for r, it := range names {
				l.Items = append(l.Items, schemas.Entry{Rank: r + 1, Item: it, Count: counts[it], Lower: counts[it]})
				l.Total += counts[it]
			}
			l.Total += 5000 // events of items below the list
			l.CertifiedK = len(l.Items)
			out[scope] = append(out[scope], l)
		}
	}
	return out
}

// TestTrendingOnPrism: the stateful wrapper, fed every 10 s list of two
// scopes in reverse order, emits exactly the lists the pure scorer gives
// for the on-cadence (whole-minute) lists in as_of order, under
// "type:scope:trending"; through publish.Lists they land in Redis (REDIS_ADDR
// or miniredis) behind the list's pointer and in the file sink as
// DIR/{type}/{scope}/trending/{as_of ms}.json.
func TestTrendingOnPrism(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Trend.WarmUp = 10 * time.Minute
	all := lists5m()
	var packed, want []string
	var lastAsOf time.Time
	for _, scope := range []string{"global", "IN"} {
		sc := trend.New("hashtag", scope, cfg.Trend)
		for _, l := range all[scope] {
			blob, err := schemas.MarshalList(l)
			if err != nil {
				t.Fatal(err)
			}
			packed = append(packed, fmt.Sprintf("%d\x00%s\x00%s", l.AsOf.UnixMilli(), l.Key(), blob))
			if l.AsOf.UnixMilli()%cfg.Every.Milliseconds() != 0 {
				continue
			}
			out, err := sc.Step(context.Background(), trend.InputFromList(l), nil)
			if err != nil {
				t.Fatal(err)
			}
			out.Rules = "rules-test-1" // the step carries the 5m lists' rules version
			js, _ := schemas.MarshalTrending(out)
			want = append(want, out.Key().String()+" "+string(js))
			lastAsOf = l.AsOf
			if scope == "IN" && l.AsOf.Equal(t0.Add(40*time.Minute)) && (len(out.Items) == 0 || out.Items[0].Item != "jump") {
				t.Fatalf("the reference run does not list the jump: %+v", out.Items)
			}
		}
	}
	slices.Reverse(packed)

	conn, err := redisx.Connect(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	prefix := fmt.Sprintf("topktest:trend:%d", time.Now().UnixNano())
	defer func() { // never a FLUSH: the test's keys only
		ctx := context.Background()
		iter := conn.Client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			conn.Client.Del(ctx, iter.Val())
		}
	}()
	dir := t.TempDir()

	p, s := beam.NewPipelineWithRoot()
	in := beam.ParDo(s, unpackFn, beam.CreateList(s, packed))
	got := Trending(s, in, beam.PCollection{}, cfg)
	passert.Equals(s, beam.ParDo(s, formatFn, got), beam.CreateList(s, want))
	publish.Lists(s, got, publish.Config{RedisAddr: conn.Addr, RedisPrefix: prefix, ListsOut: dir})
	if err := ptest.Run(p); err != nil {
		t.Fatal(err)
	}

	st := liststore.New(conn.Client, liststore.Options{Prefix: prefix})
	for _, scope := range []string{"global", "IN"} {
		k := schemas.ListKey{Type: "hashtag", Scope: scope, Window: schemas.WindowTrending}
		raw, v, err := st.Current(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		tl, err := schemas.UnmarshalTrending(raw)
		if err != nil || v != lastAsOf.Unix() || !tl.AsOf.Equal(lastAsOf) {
			t.Fatalf("%s: current v%d %v (%v), want v%d", k, v, tl, err, lastAsOf.Unix())
		}
		f := filepath.Join(dir, "hashtag", scope, "trending", fmt.Sprint(lastAsOf.UnixMilli())+".json")
		if b, err := os.ReadFile(f); err != nil || string(b) != string(raw) {
			t.Fatalf("file sink %s: %v", f, err)
		}
		files, _ := os.ReadDir(filepath.Dir(f))
		if len(files) != 40 {
			t.Errorf("%s: %d files, want 40 (one a minute)", filepath.Dir(f), len(files))
		}
	}
}

// TestTrendingAcrossHoursOnPrism: fed a list a minute per scope through a
// TestStream whose watermark passes each minute before the next (so each
// minute is a timer firing of its own, the scorer's state read and
// written each time), from 10:40 over 11:00 and 12:00, the stateful
// wrapper emits exactly the lists of a scorer kept in memory: the minute
// state within an hour and the rings read at each hour's first score
// (trend.Scorer.MarshalSplit) lose nothing. An item that returns at 12:00
// after an hour away does not trend only because its 10:00 hour is read
// back from the rings.
func TestTrendingAcrossHoursOnPrism(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Trend.WarmUp = 10 * time.Minute
	start := t0.Add(40 * time.Minute)
	const minutes = 90
	all := listsFrom(start, minutes, time.Minute)
	// An item big before 11:00, gone until 12:00 and back: back, it is at
	// its usual share only if its 10:00 hour is still in its history (the
	// rings value); with the cut's history instead it would trend.
	for _, l := range all["IN"] {
		if l.AsOf.Hour() != 11 {
			l.Items = append(l.Items, schemas.Entry{Item: "back", Count: 1500, Lower: 1500})
			l.Total += 1500
			slices.SortStableFunc(l.Items, func(a, b schemas.Entry) int { return int(b.Count) - int(a.Count) })
			for r := range l.Items {
				l.Items[r].Rank = r + 1
			}
			l.CertifiedK = len(l.Items)
		}
	}
	ts := teststream.NewConfig()
	var want []string
	scorers := map[string]*trend.Scorer{}
	jumped := false
	for i := 0; i < minutes; i++ {
		var at time.Time
		for _, scope := range []string{"global", "IN"} {
			l := all[scope][i]
			at = l.AsOf
			blob, err := schemas.MarshalList(l)
			if err != nil {
				t.Fatal(err)
			}
			if err := ts.AddElements(at.UnixMilli()-1, []byte(fmt.Sprintf("%d\x00%s\x00%s", at.UnixMilli(), l.Key(), blob))); err != nil {
				t.Fatal(err)
			}
			sc := scorers[scope]
			if sc == nil {
				sc = trend.New("hashtag", scope, cfg.Trend)
				scorers[scope] = sc
			}
			out, err := sc.Step(context.Background(), trend.InputFromList(l), nil)
			if err != nil {
				t.Fatal(err)
			}
			out.Rules = "rules-test-1"
			js, _ := schemas.MarshalTrending(out)
			want = append(want, out.Key().String()+" "+string(js))
			jumped = jumped || (scope == "IN" && len(out.Items) > 0 && out.Items[0].Item == "jump")
		}
		if err := ts.AdvanceWatermark(at.Add(time.Second).UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}
	if !jumped {
		t.Fatal("the reference run never lists the jump first")
	}
	for _, w := range want {
		if strings.Contains(w, `"back"`) {
			t.Fatalf("the reference run lists the returning item: %s", w)
		}
	}
	if err := ts.AdvanceWatermarkToInfinity(); err != nil {
		t.Fatal(err)
	}
	p, s := beam.NewPipelineWithRoot()
	in := beam.ParDo(s, unpackBytesFn, teststream.Create(s, ts))
	got := Trending(s, in, beam.PCollection{}, cfg)
	passert.Equals(s, beam.ParDo(s, formatFn, got), beam.CreateList(s, want))
	if err := ptest.Run(p); err != nil {
		t.Fatal(err)
	}
}

func unpackBytesFn(b []byte, emit func(beam.EventTime, string, []byte)) { unpackFn(string(b), emit) }

// TestPane: the scorer's users panes divide both the cadence and 5
// minutes and hold whole buckets.
func TestPane(t *testing.T) {
	for _, tc := range []struct{ every, bucket, want time.Duration }{
		{time.Minute, 0, time.Minute},
		{10 * time.Second, 0, 10 * time.Second},
		{40 * time.Second, 0, 20 * time.Second},
		{70 * time.Second, 0, 10 * time.Second},
		{5 * time.Minute, 0, 5 * time.Minute},
		{time.Minute, 15 * time.Second, time.Minute},
		{time.Minute, 7 * time.Second, 7 * time.Second},
	} {
		c := DefaultConfig()
		c.Every, c.Bucket = tc.every, tc.bucket
		if got := c.pane(); got != tc.want {
			t.Errorf("every %v, bucket %v: pane %v, want %v", tc.every, tc.bucket, got, tc.want)
		}
	}
}

// TestUsersInputPanesInRange: the 5 minutes' input unites every pane that
// starts in [as_of - 5m, as_of), and no other, also when the panes are not
// aligned to as_of - 5m (a 7 s bucket under a 1-minute cadence: panes of
// 7 s, as TestPane says).
func TestUsersInputPanesInRange(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Trend.Counts = schemas.CountsUsers
	cfg.Trend.MinTrack = 1 // one user per item: TestUsersInputMinTrack has the default
	cfg.Bucket = 7 * time.Second
	fn := newScoreFn(cfg)
	if fn.PaneMs != 7000 {
		t.Fatalf("pane %d ms, want 7000", fn.PaneMs)
	}
	asOf := t0.Add(10 * time.Minute)
	to := asOf.UnixMilli()
	panes := map[int64][]byte{}
	want := map[string]bool{}
	for p := (to - window5m - 2*fn.PaneMs) / fn.PaneMs * fn.PaneMs; p < to+2*fn.PaneMs; p += fn.PaneMs {
		tl := users.NewTally()
		item := "#p" + strconv.FormatInt(p, 10)
		addEvent(tl, item, "u"+item)
		b, err := tl.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		panes[p] = b
		if p >= to-window5m && p < to {
			want[item] = true
		}
	}
	in := fn.usersInput(context.Background(), asOf, panes, nil)
	got := map[string]bool{}
	for _, c := range in.Items {
		got[c.Item] = true
	}
	if len(want) < 40 || !maps.Equal(got, want) {
		t.Fatalf("items of the panes united: %d %v, want the %d panes in range %v", len(got), got, len(want), want)
	}
	if in.Total != uint64(len(want)) {
		t.Fatalf("total %d pairs, want %d", in.Total, len(want))
	}
}

// TestUsersInputMinTrack: the scorer's input by users holds the items of
// at least MinTrack distinct users over the 5 minutes' panes (an item's
// users in two panes are one union, not a sum: the same user twice is
// one), and for the others one entry (maybe without a name) with the
// largest count among them, which the scorer takes as its cut; the total
// is every pair's, as with every item in.
func TestUsersInputMinTrack(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Trend.Counts = schemas.CountsUsers
	fn := newScoreFn(cfg)
	if fn.Trend.MinTrack != 2 {
		t.Fatalf("default min track %d, want 2", fn.Trend.MinTrack)
	}
	asOf := t0.Add(10 * time.Minute)
	to := asOf.UnixMilli()
	panes := map[int64][]byte{}
	for k, p := range []int64{to - window5m, to - fn.PaneMs} {
		tl := users.NewTally()
		addEvent(tl, "#same-user", "u1")                // one user in both panes: 1
		addEvent(tl, "#two-users", "u"+strconv.Itoa(k)) // two users: 2
		for j := range 3 {
			addEvent(tl, "#three", "v"+strconv.Itoa(k*3+j)) // 6
		}
		addEvent(tl, "#once-"+strconv.Itoa(k), "w") // one user, one pane each
		b, err := tl.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		panes[p] = b
	}
	in := fn.usersInput(context.Background(), asOf, panes, nil)
	got := map[string]uint64{}
	for _, c := range in.Items {
		got[c.Item] = c.Count
	}
	if got["#two-users"] != 2 || got["#three"] != 6 || len(got) != 3 {
		t.Fatalf("input %v: want #two-users 2, #three 6 and one item of 1 user", got)
	}
	below := 0
	for it, n := range got {
		if n == 1 && (it == "" || it == "#same-user" || strings.HasPrefix(it, "#once-")) {
			below++
		}
	}
	if below != 1 {
		t.Fatalf("input %v: want one of the one-user items", got)
	}
	// Pairs: #same-user 1, #two-users 2, #three 6, #once-0 1, #once-1 1.
	if in.Total != 11 {
		t.Fatalf("total %d pairs, want 11", in.Total)
	}
}

// TestUsersInputMinTrackSameScore: over random panes (Zipf items, users
// repeating), the input with MinTrack 2 holds exactly the items of two
// users or more that the input observing every item holds, with the same
// counts and the same largest count under 2. Its total is the same while
// the items fit in MaxItems; beyond, it also counts the one-user items the
// cut to MaxItems left out (the pairs' estimate, at least the items'
// sum: a tighter lower bound), never more than the exact number of
// (user, item) pairs, recounted here, or the estimate.
func TestUsersInputMinTrackSameScore(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	z := rand.NewZipf(r, 1.1, 1, 20_000)
	asOf := t0.Add(10 * time.Minute)
	to := asOf.UnixMilli()
	for trial := range 6 {
		all := newScoreFn(DefaultConfig())
		all.Trend.Counts, all.Trend.MinTrack = schemas.CountsUsers, 1
		two := newScoreFn(DefaultConfig())
		two.Trend.Counts = schemas.CountsUsers
		panes := map[int64][]byte{}
		fresh, freshAll := map[int64]*users.Tally{}, map[int64]*users.Tally{}
		pairs, items := map[[2]string]bool{}, map[string]bool{}
		for p := to - window5m; p < to; p += all.PaneMs {
			tl := users.NewTally()
			for range 500 + trial*700 {
				it, u := "#i"+strconv.FormatUint(z.Uint64(), 10), "u"+strconv.Itoa(r.IntN(3000))
				addEvent(tl, it, u)
				pairs[[2]string{it, u}], items[it] = true, true
			}
			b, err := tl.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			panes[p] = b
			if p == to-all.PaneMs && trial%2 == 1 {
				// The pane just united, decoded, as unitePieces returns
				// it: one each, as usersInput uses it up.
				for _, m := range []map[int64]*users.Tally{fresh, freshAll} {
					if m[p], err = users.UnmarshalTally(b); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		inAll := all.usersInput(context.Background(), asOf, panes, freshAll)
		inTwo := two.usersInput(context.Background(), asOf, panes, fresh)
		split := func(in trend.Input) (map[string]uint64, uint64) {
			m, below := map[string]uint64{}, uint64(0)
			for _, c := range in.Items {
				if c.Count >= 2 {
					m[c.Item] = c.Count
				} else {
					below = max(below, c.Count)
				}
			}
			return m, below
		}
		mAll, bAll := split(inAll)
		mTwo, bTwo := split(inTwo)
		if !maps.Equal(mAll, mTwo) || bAll != bTwo {
			t.Fatalf("trial %d: min track 2 gives %d items, below %d; every item %d, %d", trial, len(mTwo), bTwo, len(mAll), bAll)
		}
		exact := uint64(len(pairs))
		fits := len(items) <= all.Trend.MaxItems
		if fits && inTwo.Total != inAll.Total || inTwo.Total < inAll.Total || inTwo.Total > max(exact, inAll.Total) {
			t.Fatalf("trial %d (%d items): total %d with min track 2, %d with every item, %d pairs exactly", trial, len(items), inTwo.Total, inAll.Total, exact)
		}
		t.Logf("trial %d: %d items, totals %d (min track 2) and %d (every item), %d pairs exactly", trial, len(items), inTwo.Total, inAll.Total, exact)
		if len(inAll.Items) <= len(inTwo.Items) {
			t.Fatalf("trial %d: no item under 2 users (%d items)", trial, len(inAll.Items))
		}
	}
}
