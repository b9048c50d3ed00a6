package preagg

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/topk-dev/topk/schemas"
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
			users := func(item string) uint64 {
				e := tl.Items[item]
				if e == nil {
					t.Fatalf("%s: not in the tally (%d items)", item, len(tl.Items))
				}
				return e.Users.Estimate()
			}
			if got := users("v_spam"); got != 1 {
				t.Errorf("v_spam: %d users, want 1", got)
			}
			if got := h.counts["video/global/v_spam"]; got != uint64(rc.Cap) {
				t.Errorf("v_spam: %d counted events, want the cap %d", got, rc.Cap)
			}
			if got := users("v_organic"); got != 60 {
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
