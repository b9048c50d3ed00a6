package fastpath

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/exact/store/storetest"
	"github.com/topk-dev/topk/transforms/stitch"
)

// TestLongWindowsReplay replays 27 hours of events through the fast path
// with the long windows on, against exact tables holding the recount of
// hours 0..24 (written from the events fed, as the exact path writes them:
// store.WriteHour, Recompute24h, MarkHourDone, AdvanceExactUntil), so
// exact_until E = hour 25. Small data: the open part tracks every item, so
// every list is exact. Property: no long list is published before E; from
// the first minute of open data on, a 24h and an all list is published
// every minute, and each equals, item by item, the exact recount of the hours
// before E in its window ([E-24h, E) for 24h, every hour for all) plus the
// events of [E, as_of), with max_overcount 0, exact_until E, and complete
// (the exact side holds every item, the open part tracks every item).
func TestLongWindowsReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("replays 27 hours on Prism")
	}
	ctx := context.Background()
	st := storetest.New(t)
	stCfg := stitch.StoreConfig{Project: st.Project, Instance: st.Instance, EmulatorAddr: st.EmulatorAddr}
	s := newStream(t)
	r := rand.New(rand.NewPCG(27, 24))
	const hours, k = 27, 1000
	var last time.Time
	for m := 0; m < hours*60; m += 9 {
		ts := at(time.Duration(m)*time.Minute + 17*time.Second)
		var evs []schemas.Event
		for range 1 + r.IntN(3) {
			evs = append(evs, s.ev(fmt.Sprintf("v%02d", r.IntN(1+r.IntN(15))), ts))
		}
		s.add(ts, evs...)
		s.advance(ts)
		last = ts
	}
	hourly := map[time.Time]map[string]int64{}
	for _, f := range s.fed {
		h := f.ev.TS.Truncate(time.Hour)
		if hourly[h] == nil {
			hourly[h] = map[string]int64{}
		}
		hourly[h][f.ev.Item]++
	}
	e := at(25 * time.Hour)
	for h := at(0); h.Before(e); h = h.Add(time.Hour) {
		var counts []schemas.ExactCount
		for _, item := range slices.Sorted(maps.Keys(hourly[h])) {
			counts = append(counts, schemas.ExactCount{Hour: h, Type: "video", Scope: schemas.ScopeGlobal, Item: item, Count: hourly[h][item]})
		}
		if err := st.WriteHour(ctx, h, counts, k); err != nil {
			t.Fatal(err)
		}
		if err := st.MarkHourDone(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Recompute24h(ctx, e, k); err != nil {
		t.Fatal(err)
	}
	if eu, err := st.AdvanceExactUntil(ctx); err != nil || !eu.Equal(e) {
		t.Fatalf("exact_until %v (%v), want %v", eu, err, e)
	}

	// LongIdle: a partition whose last data is in hour 25 must still report
	// it until the last list checked (12:52, hour 26); an hour after its
	// hour's end covers that, and ends the run's timers an hour after the
	// data instead of 26.
	run := s.run(func(c *Config) {
		c.Windows = []schemas.Window{schemas.Window1h}
		c.Long, c.Exact, c.LongIdle = true, stCfg, time.Hour
	})

	// want is the truth of a long window as of asOf: exact hours before E
	// from first, plus the events fed in [E, asOf).
	want := func(first, asOf time.Time) map[string]uint64 {
		out := map[string]uint64{}
		for h, m := range hourly {
			if !h.Before(first) && h.Before(e) {
				for it, n := range m {
					out[it] += uint64(n)
				}
			}
		}
		for _, f := range s.fed {
			if !f.ev.TS.Before(e) && f.ev.TS.Before(asOf) {
				out[f.ev.Item]++
			}
		}
		return out
	}
	// The open part's first data: OpenParts reports a list's open hours from
	// the minute they first have data.
	var firstOpen time.Time
	for _, f := range s.fed {
		if !f.ev.TS.Before(e) && (firstOpen.IsZero() || f.ev.TS.Before(firstOpen)) {
			firstOpen = f.ev.TS
		}
	}
	for _, w := range []schemas.Window{schemas.Window24h, schemas.WindowAll} {
		first := at(0)
		if w == schemas.Window24h {
			first = e.Add(-24 * time.Hour)
		}
		lists := run.lists[w]
		for asOf := range lists {
			if asOf.Before(e) {
				t.Fatalf("%s list as of %v, before exact_until %v", w, asOf, e)
			}
		}
		for asOf := firstOpen.Truncate(time.Minute).Add(time.Minute); !asOf.After(last.Truncate(time.Minute).Add(time.Minute)); asOf = asOf.Add(time.Minute) {
			l := lists[asOf]
			if l == nil {
				have := slices.SortedFunc(maps.Keys(lists), time.Time.Compare)
				t.Fatalf("%s: no list as of %v; %d lists as of %v", w, asOf, len(have), have)
			}
			name := fmt.Sprintf("%s@%s", w, asOf.Format(time.TimeOnly))
			if l.ExactUntil == nil || !l.ExactUntil.Equal(e) || l.MaxOvercount != 0 || !l.Complete || l.CertifiedK != len(l.Items) {
				t.Fatalf("%s: exact_until %v max_overcount %d complete %v certified %d of %d, want %v, 0, true, all",
					name, l.ExactUntil, l.MaxOvercount, l.Complete, l.CertifiedK, len(l.Items), e)
			}
			got := map[string]uint64{}
			for i, it := range l.Items {
				if it.Count != it.Lower || (i > 0 && it.Count > l.Items[i-1].Count) {
					t.Fatalf("%s: entry %d %+v: not exact or out of rank order", name, i, it)
				}
				got[it.Item] = it.Count
			}
			if wt := want(first, asOf); !maps.Equal(got, wt) {
				t.Fatalf("%s:\n got %v\nwant %v", name, got, wt)
			}
		}
		t.Logf("%s: %d lists checked", w, len(lists))
	}
}
