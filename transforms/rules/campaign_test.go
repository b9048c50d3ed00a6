package rules_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/rules"
	"github.com/topk-dev/topk/transforms/users"
)

var start = time.Date(2026, 11, 30, 19, 0, 0, 0, time.UTC)

// score is what a trending list would rank a hashtag by: its counted
// events, their trust-weighted sum, and its distinct trusted users.
type score struct {
	count    int
	weighted float64
	trusted  *users.Sketch
}

func run(t *testing.T, cfg rules.Config, events []schemas.Event) map[string]*score {
	t.Helper()
	r, err := rules.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := r.NewFilter()
	out := map[string]*score{}
	for i := range events {
		e := &events[i]
		w, why := f.Check(e)
		if why != rules.OK {
			continue
		}
		s := out[e.Item]
		if s == nil {
			s = &score{trusted: users.New()}
			out[e.Item] = s
		}
		s.count++
		s.weighted += w
		s.trusted.AddWeighted(users.Hash(e.User), w)
	}
	return out
}

// rank is the items ordered by distinct trusted users, then weighted count.
func rank(s map[string]*score) []string {
	var items []string
	for it := range s {
		items = append(items, it)
	}
	slices.SortFunc(items, func(a, b string) int {
		ua, ub := s[a].trusted.Estimate(), s[b].trusted.Estimate()
		if ua != ub {
			return int(int64(ub) - int64(ua))
		}
		return strings.Compare(a, b)
	})
	return items
}

// organic is a background of 40 hashtags, h_i used once by 4,000 - 80 i
// established users each, over 5 minutes.
func organic(r *rand.Rand) []schemas.Event {
	var out []schemas.Event
	for i := range 40 {
		for u := range 4000 - 80*i {
			out = append(out, schemas.Event{
				EventID: fmt.Sprintf("o_%d_%d", i, u), Type: "hashtag", Item: fmt.Sprintf("h_%d", i),
				User: fmt.Sprintf("est_%d", u), TS: start.Add(time.Duration(r.Int64N(int64(5 * time.Minute)))),
			})
		}
	}
	return out
}

// campaign is 3,000 accounts posting #campaign `posts` times each over 5
// minutes.
func campaign(r *rand.Rand, posts int) []schemas.Event {
	var out []schemas.Event
	for a := range 3000 {
		for p := range posts {
			out = append(out, schemas.Event{
				EventID: fmt.Sprintf("c_%d_%d", a, p), Type: "hashtag", Item: "campaign",
				User: fmt.Sprintf("new_%d", a), TS: start.Add(time.Duration(r.Int64N(int64(5 * time.Minute)))),
			})
		}
	}
	return out
}

func trustFile(t *testing.T, weight string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("user,weight\n")
	for a := range 3000 {
		fmt.Fprintf(&b, "new_%d,%s\n", a, weight)
	}
	p := filepath.Join(t.TempDir(), "trust.csv")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// arrival is the events in the order a stream delivers them: by event
// time, give or take the few seconds a client batches events for.
func arrival(r *rand.Rand, parts ...[]schemas.Event) []schemas.Event {
	all := slices.Concat(parts...)
	at := make(map[string]time.Time, len(all))
	for _, e := range all {
		at[e.EventID] = e.TS.Add(time.Duration(r.Int64N(int64(5 * time.Second))))
	}
	slices.SortFunc(all, func(a, b schemas.Event) int { return at[a.EventID].Compare(at[b.EventID]) })
	return all
}

// Property (issue 12): 3,000 new low-trust accounts posting one hashtag
// 100 times each in 5 minutes over an organic background are capped (at
// most cap events per account, exactly cap when the repeat rule is off)
// and weighted down, out of the top 20 by distinct trusted users; the same
// 3,000 accounts as established users posting once each are not blocked:
// every post counts and the hashtag ranks in the top 20.
func TestCoordinatedCampaign(t *testing.T) {
	if testing.Short() {
		t.Skip("900,000 events, three times")
	}
	r := rand.New(rand.NewPCG(12, 12))
	bg := organic(r)
	cfg := rules.DefaultConfig() // cap 10 per hour, repeat gap 30 s
	cfg.MaxIDs = 1 << 20         // the whole test stream is remembered
	cfg.Trust = trustFile(t, "0.05")
	cfg.TrustUnknown = 1

	spam := arrival(r, bg, campaign(r, 100))
	got := run(t, cfg, spam)
	c := got["campaign"]
	if c.count > 2*3000 { // posts every 3 s on average: the repeat rule keeps about one per account
		t.Fatalf("campaign counted %d events, want at most 2 per account", c.count)
	}
	if pos := slices.Index(rank(got), "campaign"); pos < 20 {
		t.Fatalf("low-trust campaign ranks %d (trusted users %d, weighted %.0f, count %d)", pos+1, c.trusted.Estimate(), c.weighted, c.count)
	}
	t.Logf("low-trust campaign: %d of 300,000 posts counted, weighted %.0f, trusted users %d, rank %d",
		c.count, c.weighted, c.trusted.Estimate(), slices.Index(rank(got), "campaign")+1)

	noRepeat := cfg
	noRepeat.RepeatGap = 0
	got = run(t, noRepeat, spam)
	if n := got["campaign"].count; n != 3000*cfg.Cap {
		t.Fatalf("without the repeat rule the campaign counted %d, want exactly 3,000 x cap = %d", n, 3000*cfg.Cap)
	}
	if pos := slices.Index(rank(got), "campaign"); pos < 20 {
		t.Fatalf("capped low-trust campaign ranks %d", pos+1)
	}

	trusted := cfg
	trusted.Trust = trustFile(t, "1")
	got = run(t, trusted, arrival(r, bg, campaign(r, 1)))
	c = got["campaign"]
	if c.count != 3000 {
		t.Fatalf("3,000 trusted accounts posting once: %d counted", c.count)
	}
	if pos := slices.Index(rank(got), "campaign"); pos >= 20 {
		t.Fatalf("trusted campaign ranks %d, want top 20 (trusted users %d)", pos+1, c.trusted.Estimate())
	}
}

// Property (issue 12): one account posting an item 500 times counts once
// in distinct users and at most the cap in counts.
func TestOneAccount500Posts(t *testing.T) {
	for _, gap := range []time.Duration{0, 30 * time.Second} {
		cfg := rules.DefaultConfig()
		cfg.RepeatGap = gap
		cfg.MaxIDs, cfg.MaxKeys = 1024, 1024
		var events []schemas.Event
		for p := range 500 {
			events = append(events, schemas.Event{EventID: fmt.Sprint("p_", p), Type: "video", Item: "v_1", User: "u_spam",
				TS: start.Add(time.Duration(p) * 7 * time.Second)}) // 500 posts in 58 minutes
		}
		got := run(t, cfg, events)["v_1"]
		if got.count > cfg.Cap || got.trusted.Estimate() != 1 {
			t.Fatalf("gap %v: count %d (cap %d), distinct users %d", gap, got.count, cfg.Cap, got.trusted.Estimate())
		}
	}
}

// Property (issue 12): every event sent twice (same event_id, in another
// beacon up to the allowed lateness later) changes no count.
func TestDuplicatesChangeNoCount(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	once := arrival(r, organic(r)[:20_000], campaign(r, 3)[:3000])
	var twice []schemas.Event
	for i := range once {
		twice = append(twice, once[i])
		if j := i - r.IntN(2000); j >= 0 { // an earlier event's second copy
			twice = append(twice, once[j])
		}
	}
	cfg := rules.DefaultConfig()
	cfg.MaxIDs = 1 << 16
	a, b := run(t, cfg, once), run(t, cfg, twice)
	for it, s := range a {
		if b[it].count != s.count || b[it].weighted != s.weighted {
			t.Fatalf("%s: %d once, %d twice", it, s.count, b[it].count)
		}
	}
}
