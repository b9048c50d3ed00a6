package slide

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/summary"
)

var testWindows = []Window{
	{Name: "1m", Length: time.Minute, Period: 10 * time.Second},
	{Name: "5m", Length: 5 * time.Minute, Period: 10 * time.Second},
	{Name: "1h", Length: time.Hour, Period: time.Minute},
}

const bucketMs = 10_000

// exact is the independent oracle: plain per-bucket maps.
type exact map[string]map[int64]map[string]uint64 // list -> bucket -> item -> count

func (x exact) add(list string, b int64, item string, n uint64) {
	if x[list] == nil {
		x[list] = map[int64]map[string]uint64{}
	}
	if x[list][b] == nil {
		x[list][b] = map[string]uint64{}
	}
	x[list][b][item] += n
}

func (x exact) window(list string, from, to int64) map[string]uint64 {
	out := map[string]uint64{}
	for b, m := range x[list] {
		if b >= from && b < to {
			for k, c := range m {
				out[k] += c
			}
		}
	}
	return out
}

func summarize(m map[string]uint64, n int) *summary.Summary {
	c := summary.NewCounter(0)
	for k, v := range m {
		c.Add(k, summary.Hash(k), v)
	}
	return c.Summary(summary.Config{N: n})
}

// checkBounds: every entry brackets its exact count, every untracked item is
// within Theta, and Total is the window's event count.
func checkBounds(t *testing.T, name string, sm *summary.Summary, want map[string]uint64) {
	t.Helper()
	var total uint64
	for _, c := range want {
		total += c
	}
	if sm.Total != total {
		t.Fatalf("%s: total %d, want %d", name, sm.Total, total)
	}
	tracked := map[string]bool{}
	for _, e := range sm.Entries {
		tracked[e.Item] = true
		c := want[e.Item]
		if c < e.Lo || c > e.Hi {
			t.Fatalf("%s: %s exact %d outside [%d, %d]", name, e.Item, c, e.Lo, e.Hi)
		}
	}
	for k, c := range want {
		if !tracked[k] && c > sm.Theta {
			t.Fatalf("%s: untracked %s exact %d above theta %d", name, k, c, sm.Theta)
		}
	}
}

// TestStateMatchesRecount drives a state through three hours of random
// buckets for a few lists, with some late buckets, and checks every window
// result against an exact recount of the buckets added before the slide:
// bounds hold (with N small enough to truncate, and with whole buckets but
// minutes and aggregates cut small), totals match, and a window reports
// exactly when it holds data.
func TestStateMatchesRecount(t *testing.T) {
	for _, c := range []struct{ n, upperN, aggN int }{{1000, 0, 0}, {8, 0, 0}, {1000, 4, 6}} {
		n := c.n
		t.Run(fmt.Sprintf("N=%d,upper=%d,agg=%d", n, c.upperN, c.aggN), func(t *testing.T) {
			st := NewState(Config{Bucket: 10 * time.Second, Windows: testWindows, UpperN: c.upperN, AggN: c.aggN})
			x := exact{}
			rng := rand.New(rand.NewPCG(1, uint64(n)))
			lists := []string{"video\x00global", "video\x00IN", "hashtag\x00IN-MH"}
			t0 := int64(1_780_000_000_000) - int64(1_780_000_000_000)%3_600_000
			// added[end] is the oracle as of each slide: late buckets count
			// only from the slide after they arrive.
			results := 0
			for k := int64(0); k < 3*360; k++ {
				b := t0 + k*bucketMs
				for _, l := range lists {
					if rng.IntN(4) == 0 || (k > 400 && k < 500 && l != lists[0]) {
						continue // gaps: some buckets without data
					}
					m := map[string]uint64{}
					for range 20 + rng.IntN(40) {
						item := fmt.Sprintf("i%d", int(rng.ExpFloat64()*10))
						m[item]++
					}
					for it, c := range m {
						x.add(l, b, it, c)
					}
					if _, err := st.Add(l, b, summarize(m, n)); err != nil {
						t.Fatal(err)
					}
				}
				// A late bucket now and then: 40 s behind the slide.
				if k%37 == 0 && k > 10 {
					lb := b - 40_000
					m := map[string]uint64{"late": 3, "i1": 2}
					for it, c := range m {
						x.add(lists[1], lb, it, c)
					}
					late, err := st.Add(lists[1], lb, summarize(m, n))
					if err != nil {
						t.Fatal(err)
					}
					if minuteClosed := floor(lb, 60_000)+60_000 <= st.Fired(); minuteClosed != (len(late) == 1) {
						t.Fatalf("late bucket %d: %d closed panes reported, minute closed %v", lb, len(late), minuteClosed)
					}
				}
				end := b + bucketMs
				seen := map[string]bool{}
				err := st.Fire(end, func(r Result) error {
					w := testWindows[r.Window]
					name := fmt.Sprintf("%q %s@%d", r.List, w.Name, end)
					seen[r.List+w.Name] = true
					checkBounds(t, name, r.Summary, x.window(r.List, end-w.Length.Milliseconds(), end))
					if c.upperN > 0 && w.Name == "1h" && len(r.Summary.Entries) > c.upperN {
						t.Fatalf("%s: %d entries from minutes of %d", name, len(r.Summary.Entries), c.upperN)
					}
					results++
					return nil
				}, nil)
				if err != nil {
					t.Fatal(err)
				}
				for _, l := range lists {
					for _, w := range testWindows {
						if end%w.Period.Milliseconds() != 0 {
							continue
						}
						has := len(x.window(l, end-w.Length.Milliseconds(), end)) > 0
						if has != seen[l+w.Name] {
							t.Fatalf("%q %s@%d: reported %v, window holds data %v", l, w.Name, end, seen[l+w.Name], has)
						}
					}
				}
			}
			t.Logf("N=%d: %d results, %d merges", n, results, st.Merges)
		})
	}
}

// TestStateMergesPerSlide: the merges a slide costs do not grow with the
// window's length (the point of the two-stacks aggregator): over an hour of
// steady buckets for one list, 1m, 5m and 1h together cost at most ten
// merges per 10 s slide on average, where re-merging every window would cost
// 6 + 30 (+ 60 a minute).
func TestStateMergesPerSlide(t *testing.T) {
	st := NewState(Config{Bucket: 10 * time.Second, Windows: testWindows})
	t0 := int64(1_780_000_000_000) - int64(1_780_000_000_000)%3_600_000
	const slides = 720
	for k := int64(0); k < slides; k++ {
		b := t0 + k*bucketMs
		if _, err := st.Add("video\x00global", b, summarize(map[string]uint64{"a": 1, fmt.Sprint(k): 2}, 100)); err != nil {
			t.Fatal(err)
		}
		if err := st.Fire(b+bucketMs, func(Result) error { return nil }, nil); err != nil {
			t.Fatal(err)
		}
	}
	per := float64(st.Merges) / slides
	t.Logf("%.2f merges per slide", per)
	if per > 10 {
		t.Errorf("%.2f merges per slide, want at most 10", per)
	}
}

// TestStateNextAndDrain: after the last bucket, Next schedules slides until
// every window has emptied, and the state then forgets the list.
func TestStateNextAndDrain(t *testing.T) {
	st := NewState(Config{Bucket: 10 * time.Second, Windows: testWindows})
	t0 := int64(1_780_000_000_000) - int64(1_780_000_000_000)%3_600_000
	if _, err := st.Add("video\x00IN", t0+20_000, summarize(map[string]uint64{"a": 4}, 10)); err != nil {
		t.Fatal(err)
	}
	end := t0 + 30_000
	var last = map[string]int64{}
	for fires := 0; ; fires++ {
		if fires > 1000 {
			t.Fatal("state never drains")
		}
		if err := st.Fire(end, func(r Result) error {
			last[testWindows[r.Window].Name] = end
			if r.Summary.Total != 4 {
				t.Fatalf("window %s at %d: total %d, want 4", testWindows[r.Window].Name, end, r.Summary.Total)
			}
			return nil
		}, nil); err != nil {
			t.Fatal(err)
		}
		next, ok := st.Next(end)
		if !ok {
			break
		}
		end = next
	}
	if !st.Empty() {
		t.Error("state holds panes after draining")
	}
	// The bucket [t0+20s, t0+30s) is in the 1m windows up to t0+80s, the 5m
	// up to t0+320s and the 1h windows (minute t0) up to t0+60m.
	want := map[string]int64{"1m": t0 + 80_000, "5m": t0 + 320_000, "1h": t0 + 3_600_000}
	for w, at := range want {
		if last[w] != at {
			t.Errorf("last %s result at +%d ms, want +%d", w, last[w]-t0, at-t0)
		}
	}
}

// TestStateMinCount: a non-global list keeps entries at or above its
// window's minimum, Theta covers the rest; a global list keeps everything.
func TestStateMinCount(t *testing.T) {
	ws := []Window{{Name: "1m", Length: time.Minute, Period: 10 * time.Second, MinCount: 3}}
	st := NewState(Config{Bucket: 10 * time.Second, Windows: ws})
	m := map[string]uint64{"big": 5, "edge": 3, "small": 2, "one": 1}
	for _, l := range []string{"video\x00global", "video\x00IN-MH"} {
		if _, err := st.Add(l, 0, summarize(m, 10)); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]*summary.Summary{}
	if err := st.Fire(10_000, func(r Result) error { got[r.List] = r.Summary; return nil }, nil); err != nil {
		t.Fatal(err)
	}
	if n := len(got["video\x00global"].Entries); n != 4 {
		t.Errorf("global list: %d entries, want 4", n)
	}
	r := got["video\x00IN-MH"]
	if len(r.Entries) != 2 || r.Find("big") == nil || r.Find("edge") == nil || r.Theta != 2 {
		t.Errorf("regional list: entries %v theta %d, want big and edge, theta 2", r.Entries, r.Theta)
	}
	checkBounds(t, "regional", r, m)
}

// TestTwoStacksOrder: pushing out of order is a programmer error.
func TestTwoStacksOrder(t *testing.T) {
	var ts TwoStacks
	sm := summarize(map[string]uint64{"a": 1}, 4)
	if err := ts.Push(10, sm); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Error("no panic on an out-of-order push")
		}
	}()
	_ = ts.Push(10, sm)
}

// QueryInto answers as MergeEvents of the front's and the back's
// aggregates after every push and eviction, into one scratch summary
// reused throughout.
func TestTwoStacksQueryInto(t *testing.T) {
	var ts TwoStacks
	ts.N = 6
	var scratch summary.Summary
	for start := int64(0); start < 40; start++ {
		m := map[string]uint64{}
		for i := range 12 {
			m[fmt.Sprintf("it%d", (start*7+int64(i)*3)%25)] += uint64(1 + i%4)
		}
		if err := ts.Push(start, summarize(m, 8)); err != nil {
			t.Fatal(err)
		}
		if err := ts.Evict(start - 9); err != nil {
			t.Fatal(err)
		}
		// What Query answered before QueryInto: a new summary, merged
		// from the front's top aggregate and the back's.
		want, err := ts.top()
		if err != nil {
			t.Fatal(err)
		}
		if want == nil {
			want = ts.backAgg
		} else if ts.backAgg != nil {
			if want, err = summary.MergeEvents(want, ts.backAgg); err != nil {
				t.Fatal(err)
			}
		}
		got, err := ts.QueryInto(&scratch)
		if err != nil {
			t.Fatal(err)
		}
		if !summary.Equal(got, want) {
			t.Fatalf("after pane %d: QueryInto %+v, MergeEvents %+v", start, got, want)
		}
	}
}

// TwoStacks over uncut summaries answers every window exactly, through
// flips and evictions of every length, while its front keeps one aggregate
// per block of about sqrt(n) panes (and the block at its top).
func TestTwoStacksSparseFront(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	x := exact{}
	var ts TwoStacks
	length, from := int64(1), int64(0)
	maxFront, maxAggs := 0, 0
	for start := int64(0); start < 400; start++ {
		if start%37 == 0 {
			length = 1 + rng.Int64N(61) // a new window length now and then
		}
		m := map[string]uint64{}
		for range 1 + rng.IntN(6) {
			m[fmt.Sprintf("it%d", rng.IntN(30))] += uint64(1 + rng.IntN(5))
		}
		for k, v := range m {
			x.add("l", start, k, v)
		}
		if err := ts.Push(start, summarize(m, 1000)); err != nil {
			t.Fatal(err)
		}
		// Evicted panes stay out when the window grows.
		from = max(from, start+1-length)
		if err := ts.Evict(from); err != nil {
			t.Fatal(err)
		}
		got, err := ts.Query()
		if err != nil {
			t.Fatal(err)
		}
		want := x.window("l", from, start+1)
		if len(got.Entries) != len(want) || got.Theta != 0 {
			t.Fatalf("pane %d, window %d: %d entries theta %d, want %d exact", start, length, len(got.Entries), got.Theta, len(want))
		}
		for _, e := range got.Entries {
			if e.Lo != want[e.Item] || e.Hi != want[e.Item] {
				t.Fatalf("pane %d, window %d: %s [%d, %d], exact %d", start, length, e.Item, e.Lo, e.Hi, want[e.Item])
			}
		}
		aggs := 0
		for _, nd := range ts.front {
			if nd.agg {
				aggs++
			}
		}
		// Windows of up to 61 panes: blocks of at most 8 panes, so at most
		// 8 blocks' aggregates, the top's, and 7 made again.
		if aggs > 16 {
			t.Fatalf("pane %d: front of %d holds %d aggregates, want at most 16", start, len(ts.front), aggs)
		}
		maxFront, maxAggs = max(maxFront, len(ts.front)), max(maxAggs, aggs)
	}
	t.Logf("fronts of up to %d panes held up to %d aggregates", maxFront, maxAggs)
	if maxFront < 40 {
		t.Fatalf("the longest front had %d panes: the bound above was not exercised", maxFront)
	}
}

// TestStatePacked: a State that holds its closed minutes and its fronts'
// block aggregates packed (see pane) reports the same window summaries and
// closed minutes, field for field (summary.Equal: entries, bounds, Theta,
// Drops), as one that holds everything decoded, through three hours of
// random buckets with late ones, summaries that drop items (N small, so
// every pane carries Drops; a count-min sketch on some), cut minutes and
// aggregates, and a restart from Panes halfway (packed panes come out as
// their encoding).
func TestStatePacked(t *testing.T) {
	for _, c := range []struct {
		n, upperN, aggN int
		sketch          bool
	}{{1000, 0, 0, false}, {12, 0, 0, false}, {12, 6, 8, false}, {12, 0, 0, true}} {
		t.Run(fmt.Sprintf("N=%d,upper=%d,agg=%d,sketch=%v", c.n, c.upperN, c.aggN, c.sketch), func(t *testing.T) {
			cfg := Config{Bucket: 10 * time.Second, Windows: testWindows, UpperN: c.upperN, AggN: c.aggN, Limit: 9}
			newStates := func() [2]*State {
				var sts [2]*State
				for i := range sts {
					sts[i] = NewState(cfg)
				}
				sts[1].noPack = true
				return sts
			}
			sts := newStates()
			scfg := summary.Config{N: c.n}
			if c.sketch {
				scfg.SketchWidth, scfg.SketchDepth = 64, 2
			}
			bucket := func(m map[string]uint64) *summary.Summary {
				ct := summary.NewCounter(0)
				for k, v := range m {
					ct.Add(k, summary.Hash(k), v)
				}
				return ct.Summary(scfg)
			}
			rng := rand.New(rand.NewPCG(7, uint64(c.n)))
			lists := []string{"video\x00global", "video\x00IN", "hashtag\x00IN-MH"}
			t0 := int64(1_780_000_000_000) - int64(1_780_000_000_000)%3_600_000
			add := func(l string, b int64, m map[string]uint64) {
				var late [2][]Late
				for i, st := range sts {
					var err error
					if late[i], err = st.Add(l, b, bucket(m)); err != nil {
						t.Fatal(err)
					}
				}
				if len(late[0]) != len(late[1]) {
					t.Fatalf("bucket %d of %q: %d late panes packed, %d not", b, l, len(late[0]), len(late[1]))
				}
			}
			results, packedPanes := 0, 0
			for k := int64(0); k < 3*360; k++ {
				b := t0 + k*bucketMs
				for _, l := range lists {
					if rng.IntN(4) == 0 {
						continue
					}
					m := map[string]uint64{}
					for range 10 + rng.IntN(60) {
						m[fmt.Sprintf("i%d", int(rng.ExpFloat64()*15))]++
					}
					add(l, b, m)
				}
				if k%29 == 0 && k > 10 { // late: 40 s and 2 minutes behind
					add(lists[1], b-40_000, map[string]uint64{"late": 3, "i1": 2})
					add(lists[2], b-120_000, map[string]uint64{"late2": 5})
				}
				if k == 500 { // a restart: both states rebuilt from their panes
					old := sts
					sts = newStates()
					for i, st := range old {
						for li := range st.Levels() {
							err := st.Panes(li, func(l string, s int64, sm *summary.Summary, packed []byte) {
								if packed != nil {
									packedPanes++
									var err error
									if sm, err = summary.Unmarshal(packed); err != nil {
										t.Fatal(err)
									}
								}
								if err := sts[i].Restore(li, l, s, sm, st.Fired()); err != nil {
									t.Fatal(err)
								}
							})
							if err != nil {
								t.Fatal(err)
							}
						}
					}
				}
				end := b + bucketMs
				var got [2][]Result
				var closed [2][]Closed
				for i, st := range sts {
					err := st.Fire(end, func(r Result) error {
						got[i] = append(got[i], r)
						return nil
					}, func(cl Closed) error {
						closed[i] = append(closed[i], cl)
						return nil
					})
					if err != nil {
						t.Fatal(err)
					}
				}
				if len(got[0]) != len(got[1]) || len(closed[0]) != len(closed[1]) {
					t.Fatalf("slide %d: %d results and %d closed packed, %d and %d not", end, len(got[0]), len(closed[0]), len(got[1]), len(closed[1]))
				}
				for j, r := range got[0] {
					u := got[1][j]
					if r.List != u.List || r.Window != u.Window || !summary.Equal(r.Summary, u.Summary) {
						t.Fatalf("slide %d: %q %s packed %+v, not %+v", end, r.List, testWindows[r.Window].Name, r.Summary, u.Summary)
					}
					results++
				}
				for j, cl := range closed[0] {
					u := closed[1][j]
					if cl.List != u.List || cl.Start != u.Start || !summary.Equal(cl.Summary, u.Summary) {
						t.Fatalf("slide %d: minute %d of %q differs packed", end, cl.Start, cl.List)
					}
				}
			}
			if packedPanes == 0 {
				t.Fatal("no packed pane at the restart")
			}
			t.Logf("%d results equal; %d packed panes restored", results, packedPanes)
		})
	}
}

// TestPartLimit: a list in many partitions keeps PartShares shares of
// Limit per partition, and the list merge's answer (summary.Union over
// the partitions' results, cut to Limit) is the same as from results cut
// to Limit: the same entries in the same order, the same Theta and
// Total. Items are spread over the partitions by their hashes as the
// pre-aggregation spreads them, counts are skewed with many ties, and
// N is small enough that the bounds are wide.
func TestPartLimit(t *testing.T) {
	const limit = 110
	parts := schemas.Partitions{P: 16, Region: 4}
	cfg := Config{Bucket: 10 * time.Second, Windows: testWindows, Limit: limit, Parts: parts}
	for key, want := range map[string]int{
		"video\x00global": PartShares * 7, "video\x00IN": PartShares * 7, "video\x00IN-MH": limit,
	} {
		if got := cfg.PartLimit(key); got != want {
			t.Fatalf("PartLimit(%q) = %d, want %d", key, got, want)
		}
	}
	if got := (Config{Limit: limit}).PartLimit("video\x00global"); got != limit {
		t.Fatalf("no partitions set: PartLimit %d, want %d", got, limit)
	}
	lists := []string{"video\x00global", "video\x00IN", "video\x00IN-MH"}
	cut, full := make([]*State, parts.P), make([]*State, parts.P)
	plain := cfg
	plain.Parts = schemas.Partitions{}
	for p := range parts.P {
		cut[p], full[p] = NewState(cfg), NewState(plain)
		cut[p].ShareResults, full[p].ShareResults = true, true
	}
	rng := rand.New(rand.NewPCG(7, 9))
	t0 := int64(1_780_000_000_000) - int64(1_780_000_000_000)%3_600_000
	var us, uf summary.Union
	trimmed, compared := 0, 0
	for k := int64(0); k < 80; k++ {
		b := t0 + k*bucketMs
		for _, l := range lists {
			_, scope, _ := strings.Cut(l, "\x00")
			np := parts.Of(scope)
			byPart := make([]map[string]uint64, parts.P)
			for range 4000 {
				item := fmt.Sprintf("i%d", int(rng.ExpFloat64()*400))
				p := summary.Partition(summary.Hash(item), np)
				if byPart[p] == nil {
					byPart[p] = map[string]uint64{}
				}
				byPart[p][item]++
			}
			for p, m := range byPart {
				if m == nil {
					continue
				}
				for _, st := range []*State{cut[p], full[p]} {
					if _, err := st.Add(l, b, summarize(m, 48)); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		end := b + bucketMs
		// results[variant][list+window]: the partitions' results, encoded.
		results := [2]map[string][][]byte{{}, {}}
		for v, sts := range [][]*State{cut, full} {
			for p, st := range sts {
				err := st.Fire(end, func(r Result) error {
					if v == 0 && len(r.Summary.Entries) > cfg.PartLimit(r.List) {
						t.Fatalf("%q partition %d: %d entries, limit %d", r.List, p, len(r.Summary.Entries), cfg.PartLimit(r.List))
					}
					if v == 1 && len(r.Summary.Entries) > cfg.PartLimit(r.List) {
						trimmed++ // a result the cut makes shorter
					}
					enc, err := r.Summary.MarshalBinary()
					k := r.List + "/" + testWindows[r.Window].Name
					results[v][k] = append(results[v][k], enc)
					return err
				}, nil)
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		for k, encs := range results[1] {
			us.Reset()
			uf.Reset()
			for _, e := range results[0][k] {
				if err := us.AddEncoded(e); err != nil {
					t.Fatal(err)
				}
			}
			for _, e := range encs {
				if err := uf.AddEncoded(e); err != nil {
					t.Fatal(err)
				}
			}
			as, af := us.Answer(limit), uf.Answer(limit)
			if us.Theta != uf.Theta || us.Total != uf.Total || as.CertifiedK != af.CertifiedK || !slices.Equal(as.Entries, af.Entries) {
				t.Fatalf("%s@%d: the answer from cut results (%d entries, theta %d, total %d, certified %d) differs from the uncut (%d, %d, %d, %d)",
					k, end, len(as.Entries), us.Theta, us.Total, as.CertifiedK, len(af.Entries), uf.Theta, uf.Total, af.CertifiedK)
			}
			compared++
		}
	}
	if trimmed < 100 {
		t.Fatalf("only %d partition results were longer than their cut: the test does not exercise it", trimmed)
	}
	t.Logf("%d list answers compared, %d partition results cut", compared, trimmed)
}

// TestTwoStacksResetKeepsPack: a window rebuilt after a late bucket
// (State.slide resets its aggregator) still packs its front's block
// aggregates and keeps its aggregates' N; Reset once dropped Pack.
func TestTwoStacksResetKeepsPack(t *testing.T) {
	st := NewState(Config{Bucket: 10 * time.Second, Windows: testWindows, AggN: 6})
	const list = "video\x00global"
	t0 := int64(1_780_000_000_000) - int64(1_780_000_000_000)%3_600_000
	for k := int64(0); k < 40; k++ {
		b := t0 + k*bucketMs
		if _, err := st.Add(list, b, summarize(map[string]uint64{fmt.Sprint("i", k%7): 1 + uint64(k)}, 8)); err != nil {
			t.Fatal(err)
		}
		if k == 30 { // a late bucket: every window over it is rebuilt
			if _, err := st.Add(list, b-50_000, summarize(map[string]uint64{"late": 2}, 8)); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.Fire(b+bucketMs, func(Result) error { return nil }, nil); err != nil {
			t.Fatal(err)
		}
	}
	for wi, ts := range st.lists[list].aggs {
		if !ts.Pack || ts.N != 6 {
			t.Fatalf("window %s after its rebuild: Pack %v, N %d", testWindows[wi].Name, ts.Pack, ts.N)
		}
	}
}
