package fastpath

import (
	"context"
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
	"github.com/topk-dev/topk/transforms/source"
)

const campaignTag = "#campaign"

// campaignRun replays 30 minutes of organic hashtags (40 events/s, Zipf
// 1.1 over 2,000 tags, 20,000 established accounts) plus extra, through
// the whole fast path with the default rules, the trust table trust and
// the 5m window, and returns the trending and 5m lists of hashtag/global.
func campaignRun(t *testing.T, extra []schemas.Event, trust, counts string) (trending []*schemas.Trending, top []*schemas.List) {
	t.Helper()
	events := streams.ZipfStream(11, 1.1, 2000, 30*60*40, start, 40, "hashtag")
	r := rand.New(rand.NewPCG(11, 1))
	for i := range events {
		events[i].Item = "#" + events[i].Item
		events[i].User = fmt.Sprintf("est_%d", r.IntN(20_000))
	}
	events = append(events, extra...)
	slices.SortStableFunc(events, func(a, b schemas.Event) int { return a.TS.Compare(b.TS) })
	spec, err := source.ParseSpec("file:" + writeNDJSON(t, events))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cfg := DefaultConfig()
	cfg.Source = spec
	cfg.Windows = []schemas.Window{schemas.Window5m}
	cfg.Publish.ListsOut = out
	cfg.Trend.Trend.WarmUp = 10 * time.Minute
	cfg.Trend.Trend.Counts = counts
	// The fast path's default rule state: 2^15 (user, item) keys per hour
	// and instance, in two generations. The background's 72,000 mostly
	// one-off keys age out; the campaign's accounts, posting every 3 s,
	// stay tracked, so the repeat gap and cap apply to them.
	rc := preagg.DefaultRules()
	rc.Trust = trust
	cfg.Preagg.Rules = &rc
	if _, err := Run(context.Background(), cfg, BeamRunner, nil); err != nil {
		t.Fatal(err)
	}
	read := func(window schemas.Window, f func([]byte) error) {
		dir := filepath.Join(out, "hashtag", "global", string(window))
		files, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, fi := range files {
			b, err := os.ReadFile(filepath.Join(dir, fi.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if err := f(b); err != nil {
				t.Fatalf("%s: %v", fi.Name(), err)
			}
		}
	}
	read(schemas.WindowTrending, func(b []byte) error {
		tl, err := schemas.UnmarshalTrending(b)
		trending = append(trending, tl)
		return err
	})
	read(schemas.Window5m, func(b []byte) error {
		l, err := schemas.UnmarshalList(b)
		top = append(top, l)
		return err
	})
	slices.SortFunc(trending, func(a, b *schemas.Trending) int { return a.AsOf.Compare(b.AsOf) })
	return trending, top
}

// rankIn is item's rank in tl's first k entries, 0 if absent.
func rankIn(tl *schemas.Trending, item string, k int) int {
	for _, e := range tl.Items[:min(k, len(tl.Items))] {
		if e.Item == item {
			return e.Rank
		}
	}
	return 0
}

// TestCampaignDoesNotTrend (issues 11 and 12): 3,000 new accounts (trust
// 0.002) each posting one hashtag 100 times in 5 minutes (minutes 20-25)
// over an organic background: by events it is the biggest hashtag, but it
// never enters trending's top 20 (trending ranks by distinct trusted
// users), and its count in the top lists is capped (the repeat gap and the
// per-account cap: at most 10 an account; with a post every 3 s, less than
// the 30 s gap apart, each account counts once). The same 3,000 accounts as
// established users (trust 1) posting it once each do reach trending: the
// rules weigh accounts, they do not simply block volume. A control run
// scoring events lists the campaign.
func TestCampaignDoesNotTrend(t *testing.T) {
	from := start.Add(20 * time.Minute)
	var trustRows strings.Builder
	var spam, once []schemas.Event
	for a := range 3000 {
		user := fmt.Sprintf("new_%d", a)
		fmt.Fprintf(&trustRows, "%s,0.002\n", user)
		off := time.Duration(a) * time.Millisecond
		for i := range 100 {
			spam = append(spam, schemas.Event{EventID: fmt.Sprintf("c%d-%d", a, i), Type: "hashtag", Item: campaignTag,
				User: user, TS: from.Add(off + time.Duration(i)*3*time.Second)})
		}
		once = append(once, schemas.Event{EventID: fmt.Sprintf("o%d", a), Type: "hashtag", Item: campaignTag,
			User: user, TS: from.Add(time.Duration(a) * 100 * time.Millisecond)})
	}
	trust := filepath.Join(t.TempDir(), "trust.csv")
	if err := os.WriteFile(trust, []byte(trustRows.String()), 0o644); err != nil {
		t.Fatal(err)
	}

	t.Run("new accounts", func(t *testing.T) {
		trending, top := campaignRun(t, spam, trust, schemas.CountsUsers)
		biggest := false
		for _, l := range top {
			for i, e := range l.Items {
				if e.Item != campaignTag {
					continue
				}
				if e.Lower > 3000*10 {
					t.Fatalf("5m@%s: %s counts at least %d, more than 3,000 accounts x the cap 10", l.AsOf, e.Item, e.Lower)
				}
				biggest = biggest || i == 0
			}
		}
		most := uint64(0)
		for _, l := range top {
			for _, e := range l.Items {
				if e.Item == campaignTag {
					most = max(most, e.Lower)
				}
			}
		}
		t.Logf("new accounts: the campaign counts at most %d in a 5m list", most)
		if !biggest {
			t.Fatal("the campaign is never the biggest hashtag by events: the test does not exercise the rules")
		}
		seen := 0
		for _, tl := range trending {
			if tl.Counts != schemas.CountsUsers {
				t.Fatalf("%s: counts %q, want users", tl.AsOf, tl.Counts)
			}
			if tl.AsOf.After(from) && tl.AsOf.Before(start.Add(31*time.Minute)) {
				seen++
				if r := rankIn(tl, campaignTag, 20); r > 0 {
					t.Errorf("%s: the campaign of new accounts trends at rank %d: %+v", tl.AsOf, r, tl.Items[r-1])
				}
			}
		}
		if seen < 9 {
			t.Fatalf("%d trending lists during the campaign, want one a minute", seen)
		}
	})

	t.Run("control: by events", func(t *testing.T) {
		// The same campaign trends when trending counts events: what keeps
		// it out above is the users count, not the stream's shape.
		trending, _ := campaignRun(t, spam, trust, schemas.CountsEvents)
		for _, tl := range trending {
			if tl.AsOf.After(from) && tl.AsOf.Before(start.Add(27*time.Minute)) && rankIn(tl, campaignTag, 20) > 0 {
				return
			}
		}
		t.Fatal("by events the campaign never trends either: the test does not show what counting users does")
	})

	t.Run("established accounts", func(t *testing.T) {
		// No trust table: every account weighs 1.
		trending, _ := campaignRun(t, once, "", schemas.CountsUsers)
		best := 0
		for _, tl := range trending {
			if tl.AsOf.After(from) && tl.AsOf.Before(start.Add(27*time.Minute)) {
				if r := rankIn(tl, campaignTag, 20); r > 0 && (best == 0 || r < best) {
					best = r
				}
			}
		}
		if best == 0 {
			t.Fatal("3,000 established accounts posting the tag once each never reach trending's top 20")
		}
		t.Logf("established accounts: best rank %d", best)
	})
}
