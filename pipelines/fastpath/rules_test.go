package fastpath

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/topk-dev/topk/internal/streams"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/preagg"
	"github.com/topk-dev/topk/transforms/rules"
)

const spamItem = "i_spam"

// ruleStream is 20 minutes of one type's events in time order, every
// event at its own millisecond: Zipf(1.1) users over 2,000 (heavy users
// watch the same items again and again, so repeats and caps bite) and
// Zipf(1.1) items over 300; one account posting spamItem 500 times in 25
// bursts (20 posts 0.5 s apart, then a pause longer than the repeat gap);
// two known bots; a blocklisted item; some events without a user.
func ruleStream(seed uint64) []schemas.Event {
	r := rand.New(rand.NewPCG(seed, 7))
	users := rand.NewZipf(r, 1.1, 1, 1999)
	items := rand.NewZipf(r, 1.1, 1, 299)
	span := 20 * time.Minute
	var out []schemas.Event
	add := func(item, user string, at time.Duration) {
		out = append(out, schemas.Event{
			EventID: fmt.Sprintf("r%d-%d", seed, len(out)), Type: "video",
			Item: item, User: user, TS: start.Add(at),
		})
	}
	for range 48_000 {
		user := fmt.Sprintf("u_%d", users.Uint64())
		if r.IntN(50) == 0 {
			user = ""
		}
		add(fmt.Sprintf("i_%d", items.Uint64()), user, time.Duration(r.Int64N(int64(span))))
	}
	for b := range 25 {
		for p := range 20 {
			add(spamItem, "u_spammer", time.Duration(b)*48*time.Second+time.Duration(p)*500*time.Millisecond)
		}
	}
	for i := range 400 {
		add(fmt.Sprintf("i_%d", i%5), fmt.Sprintf("u_bot%d", i%2), time.Duration(r.Int64N(int64(span))))
		add("i_blocked", fmt.Sprintf("u_%d", i), time.Duration(r.Int64N(int64(span))))
	}
	slices.SortStableFunc(out, func(a, b schemas.Event) int { return a.TS.Compare(b.TS) })
	for i := 1; i < len(out); i++ { // one event per millisecond: no ties in canonical order
		if min := out[i-1].TS.Add(time.Millisecond); out[i].TS.Before(min) {
			out[i].TS = min
		}
		out[i].TS = out[i].TS.Truncate(time.Millisecond)
	}
	return out
}

// twice sends every event again, same event_id, 10 s after it (in another
// beacon: 500 events later at this rate).
func twice(events []schemas.Event) []schemas.Event {
	type arrival struct {
		at time.Time
		e  schemas.Event
	}
	var as []arrival
	for _, e := range events {
		as = append(as, arrival{e.TS, e}, arrival{e.TS.Add(10 * time.Second), e})
	}
	slices.SortStableFunc(as, func(a, b arrival) int { return a.at.Compare(b.at) })
	out := make([]schemas.Event, len(as))
	for i := range as {
		out[i] = as[i].e
	}
	return out
}

// rulesOracle is the definition of a countable event (the transforms/rules
// package doc), computed with its reference semantics rather than a
// Filter: duplicates by event_id, Rules.Check (blocklist, bots), then each
// (user, type, item, rule window)'s events through Judge.Step in canonical
// order (event time in ms, IDHash). It returns the counted events.
func rulesOracle(t *testing.T, cfg rules.Config, events []schemas.Event) []schemas.Event {
	t.Helper()
	r, err := rules.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	groups := map[string][]schemas.Event{}
	var out []schemas.Event
	for _, e := range events {
		if seen[e.EventID] {
			continue
		}
		seen[e.EventID] = true
		if _, why := r.Check(&e); why != rules.OK {
			continue
		}
		if e.User == "" || !cfg.Stateful() {
			out = append(out, e)
			continue
		}
		k := fmt.Sprintf("%s\x00%s\x00%s\x00%d", e.User, e.Type, e.Item, cfg.WindowStart(e.TS.UnixMilli()))
		groups[k] = append(groups[k], e)
	}
	j := cfg.Judge()
	for _, g := range groups {
		slices.SortFunc(g, func(a, b schemas.Event) int {
			if c := a.TS.Compare(b.TS); c != 0 {
				return c
			}
			ha, hb := rules.IDHash(a.EventID), rules.IDHash(b.EventID)
			if ha < hb {
				return -1
			} else if ha > hb {
				return 1
			}
			return 0
		})
		var st rules.KeyState
		for _, e := range g {
			if j.Step(&st, e.TS.UnixMilli(), rules.IDHash(e.EventID)) == rules.OK {
				out = append(out, e)
			}
		}
	}
	return out
}

// ruleConfig is the fast path's default rules (preagg.DefaultRules) with a
// bots file, a blocklist and a trust table: every rule on.
func ruleConfig(t *testing.T) rules.Config {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rc := preagg.DefaultRules()
	rc.Bots = write("bots", "u_bot0\nu_bot1\nua:crawler\n")
	rc.Blocklist = write("blocklist", "video,i_blocked\n")
	rc.Trust = write("trust", "user,weight\nu_1,0.2\nu_2,0.5\nu_spammer,0.1\n")
	return rc
}

// listCounts keys every list version's entries (item=count/lower) and
// total by list key and as_of.
func listCounts(lists []*schemas.List) map[string]string {
	out := map[string]string{}
	for _, l := range lists {
		var b strings.Builder
		fmt.Fprintf(&b, "total=%d", l.Total)
		for _, e := range l.Items {
			fmt.Fprintf(&b, " %s=%d/%d", e.Item, e.Count, e.Lower)
		}
		out[l.Key().String()+"@"+l.AsOf.Format(time.RFC3339)] = b.String()
	}
	return out
}

// Properties (issue 12), on the fast path with every rule on:
//   - lists carry the rules' version;
//   - against the rule definition's exact recount of the same stream, no
//     list under-counts (every count is an upper bound, every lower bound
//     holds: with one pre-aggregation instance, events in order and the
//     filter's tables not full, the stated bound is zero), certified
//     prefixes are right, and recall@100 is 1;
//   - one account posting an item 500 times counts at most the cap (10)
//     in every list, and exactly the cap where its hour is covered;
//   - every event sent twice (same event_id, another beacon 10 s later)
//     changes no count in any list.
func TestReplayRules(t *testing.T) {
	rc := ruleConfig(t)
	r, err := rules.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	events := ruleStream(5)
	withRules := func(cfg *Config) {
		c := rc
		cfg.Preagg.Rules = &c
		cfg.Source.File.Beacon = 100
	}
	rep, lists := replay(t, events, withRules)
	counted := rulesOracle(t, rc, events)
	t.Logf("%d events, %d count by the rules; fast path counted %d; %d lists", len(events), len(counted), rep.Events, len(lists))
	if rep.Events != int64(len(counted)) {
		t.Errorf("fast path counted %d events, the definition %d", rep.Events, len(counted))
	}
	if len(counted) > len(events)*9/10 {
		t.Fatalf("the rules drop only %d of %d events: the stream does not exercise them", len(events)-len(counted), len(events))
	}
	for _, l := range lists {
		if l.Rules != r.Version() {
			t.Fatalf("%s@%s: rules %q, want %q", l.Key(), l.AsOf, l.Rules, r.Version())
		}
	}
	x := newExactIndex(counted, 10*time.Second)
	checkSlides(t, lists, x, DefaultConfig().Windows)
	r100, r1000 := checkLists(t, lists, x, 1000)
	t.Logf("rules: min recall@100=%.4f @1000=%.4f", r100, r1000)
	if r100 < 1 {
		t.Errorf("min recall@100 = %.4f, want 1", r100)
	}

	// The spammer: at most the cap anywhere, the cap where the window
	// holds the whole campaign.
	capped := false
	for _, l := range lists {
		for _, e := range l.Items {
			if e.Item != spamItem {
				continue
			}
			if e.Lower > uint64(rc.Cap) || e.Count > uint64(rc.Cap)+l.MaxOvercount {
				t.Fatalf("%s@%s: %s counts %d (lower %d), cap %d", l.Key(), l.AsOf, e.Item, e.Count, e.Lower, rc.Cap)
			}
			capped = capped || e.Lower == uint64(rc.Cap)
		}
	}
	if !capped {
		t.Error("no list shows the spammer's item at the cap: the cap is not what stops it")
	}

	// Duplicates: the same stream with every event twice.
	rep2, lists2 := replay(t, twice(events), withRules)
	if rep2.Events != rep.Events {
		t.Errorf("sent twice: counted %d events, once %d", rep2.Events, rep.Events)
	}
	once, dup := listCounts(lists), listCounts(lists2)
	if len(once) != len(dup) {
		t.Errorf("sent twice: %d list versions, once %d", len(dup), len(once))
	}
	for k, want := range once {
		if got := dup[k]; got != want {
			t.Fatalf("%s sent twice:\n got %s\nwant %s", k, got, want)
		}
	}
}

// Property (issue 12, the stated bound): with events arriving out of order
// (each up to 20 s late, well inside the allowed lateness), a pre-
// aggregation filter judges them in arrival order, so where an account's
// cap bites it may keep later events than the definition does. Then a list
// whose window covers only part of the rule window can under-count an item,
// but only by events of accounts that posted it more than the cap in that
// rule window, at most the cap per such account (an event the definition
// counts and the stream does not was capped in the stream: a repeat in the
// stream is a repeat by the definition too). A list whose window covers
// the whole rule window never under-counts.
func TestReplayRulesOutOfOrder(t *testing.T) {
	rc := ruleConfig(t)
	events := ruleStream(5)
	r := rand.New(rand.NewPCG(3, 3))
	type arrival struct {
		at time.Time
		e  schemas.Event
	}
	as := make([]arrival, len(events))
	for i, e := range events {
		as[i] = arrival{e.TS.Add(time.Duration(r.Int64N(int64(20 * time.Second)))), e}
	}
	slices.SortStableFunc(as, func(a, b arrival) int { return a.at.Compare(b.at) })
	shuffled := make([]schemas.Event, len(as))
	for i := range as {
		shuffled[i] = as[i].e
	}
	_, lists := replay(t, shuffled, func(cfg *Config) {
		c := rc
		cfg.Preagg.Rules = &c
		cfg.Source.File.Beacon = 100
	})

	// The definition's counted events, and per item the counted events of
	// accounts with more than the cap of candidates (not duplicates,
	// blocked or bots) in the rule window: the only ones the stream may
	// miss.
	counted := rulesOracle(t, rc, events)
	noCap := rc
	noCap.Cap, noCap.RepeatGap = 0, 0
	candidates := map[string]int{}
	for _, e := range rulesOracle(t, noCap, events) {
		if e.User != "" {
			candidates[e.User+"\x00"+e.Item]++
		}
	}
	var risky []schemas.Event // counted events of over-cap accounts
	for _, e := range counted {
		if e.User != "" && candidates[e.User+"\x00"+e.Item] > rc.Cap {
			risky = append(risky, e)
		}
	}
	x := newExactIndex(counted, 10*time.Second)
	rx := newExactIndex(risky, 10*time.Second)
	last := events[len(events)-1].TS
	under, worst := 0, uint64(0)
	for _, l := range lists {
		from := l.AsOf.Add(-l.Window.Length())
		exact, slack := x.window(from, l.AsOf), rx.window(from, l.AsOf)
		whole := !from.After(start) && l.AsOf.After(last) // covers the stream's whole rule window
		for _, e := range l.Items {
			k := "video\x00" + e.Item
			if exact[k] <= e.Count {
				continue
			}
			d := exact[k] - e.Count
			under++
			worst = max(worst, d)
			if whole || d > slack[k] {
				t.Fatalf("%s@%s: %s counts %d, the definition %d: under by %d, allowed %d (whole rule window: %v)",
					l.Key(), l.AsOf.Format(time.TimeOnly), e.Item, e.Count, exact[k], d, slack[k], whole)
			}
		}
	}
	r100, _ := recallOnly(lists, x)
	// Not asserted: out of order, the stream's counts differ from the
	// definition's both ways (more repeats let through, other events kept
	// under the cap), and items near rank 100 swap (measured: 0.97).
	t.Logf("out of order: %d list entries under-count (within the bound), worst by %d; min recall@100=%.4f", under, worst, r100)
}

// recallOnly is checkLists' recall without its bounds checks.
func recallOnly(lists []*schemas.List, x *exactIndex) (r100, r1000 float64) {
	r100, r1000 = 1, 1
	for _, l := range lists {
		counts := x.window(l.AsOf.Add(-l.Window.Length()), l.AsOf)
		var ranking []streams.KV
		for k, c := range counts {
			if typ, item := streams.SplitKey(k); typ == l.Type {
				ranking = append(ranking, streams.KV{Key: item, Count: c})
			}
		}
		slices.SortFunc(ranking, func(a, b streams.KV) int {
			if a.Count != b.Count {
				if a.Count > b.Count {
					return -1
				}
				return 1
			}
			return strings.Compare(a.Key, b.Key)
		})
		got := make([]string, len(l.Items))
		for i, e := range l.Items {
			got[i] = e.Item
		}
		r100 = min(r100, streams.Recall(got, ranking, 100))
		r1000 = min(r1000, streams.Recall(got, ranking, 1000))
	}
	return r100, r1000
}
