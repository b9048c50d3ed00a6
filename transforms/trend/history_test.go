package trend

import (
	"context"
	"testing"
	"time"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/exact/store/storetest"
)

// TestBaselineFromExactTables: the exact tables (bttest, or the emulator at
// BIGTABLE_EMULATOR_HOST) hold three days of hourly counts of a list: a
// steady Zipf background, and an item "daily" with 5% of the list every day
// from 20:00 to 21:00; one more hour, a week ago 20:00, holds an item
// "weekly" of the same size. Today the job starts at 19:30 and "daily",
// "weekly" and a never-seen item "newbie" get the same rate from 20:00:
// newbie trends (rank 1 by 20:02 and listed to the end), daily and weekly
// never do, because their baselines are yesterday's and last week's 20:00
// shares. The list reports the exact history's span in
// baseline_hours and is not held back by the warm-up.
func TestBaselineFromExactTables(t *testing.T) {
	st := storetest.New(t)
	ctx := context.Background()
	const rate = 200.0 // background events per second
	today := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	w := newWorld(5, 300, rate)
	hours := []time.Time{today.Add(-7 * 24 * time.Hour).Add(20 * time.Hour)} // a week ago, 20:00
	for h := today.Add(-3 * 24 * time.Hour).Add(19 * time.Hour); h.Before(today.Add(19 * time.Hour)); h = h.Add(time.Hour) {
		hours = append(hours, h)
	}
	for _, h := range hours {
		var counts []schemas.ExactCount
		var bgTotal int64
		for i, it := range w.bg {
			n := int64(w.bgRate[i]*3600 + 0.5)
			bgTotal += n
			counts = append(counts, schemas.ExactCount{Hour: h, Type: "hashtag", Scope: "IN", Item: it, Count: n})
		}
		if h.Hour() == 20 {
			// 5% of the hour's events: d / (bg + d) = 0.05; "weekly" only
			// a week ago (the same hour of the week).
			item := "daily"
			if h.Before(today.Add(-3 * 24 * time.Hour)) {
				item = "weekly"
			}
			counts = append(counts, schemas.ExactCount{Hour: h, Type: "hashtag", Scope: "IN", Item: item, Count: int64(float64(bgTotal) * 0.05 / 0.95)})
		}
		if err := st.WriteHour(ctx, h, counts, 100); err != nil {
			t.Fatal(err)
		}
	}
	at20 := today.Add(20 * time.Hour)
	same := func(t time.Time) float64 {
		if t.Before(at20) {
			return 0
		}
		return rate * 0.05 / 0.95
	}
	w.special["daily"], w.special["weekly"], w.special["newbie"] = same, same, same

	hist := &StoreHistory{Store: st.Store}
	sc := New("hashtag", "IN", DefaultConfig())
	start := today.Add(19*time.Hour + 30*time.Minute)
	for now := start.Add(tick); !now.After(at20.Add(15 * time.Minute)); now = now.Add(tick) {
		w.step(now)
		l, err := sc.Step(ctx, w.input(now, 200), hist)
		if err != nil {
			t.Fatal(err)
		}
		if now.Equal(start.Add(tick)) && l.BaselineHours != 7*24-1 {
			t.Errorf("baseline_hours at the start = %d, want %d (back to the exact hour a week ago)", l.BaselineHours, 7*24-1)
		}
		for _, it := range []string{"daily", "weekly"} {
			if r := rankOf(l, it); r != 0 {
				t.Fatalf("%s: %s trends at rank %d: %+v", now.Format(time.TimeOnly), it, r, l.Items[r-1])
			}
		}
		if now.Before(at20) {
			continue
		}
		r := rankOf(l, "newbie")
		if now.After(at20.Add(2*time.Minute)) && r != 1 {
			t.Fatalf("%s: newbie at rank %d, want 1: %+v", now.Format(time.TimeOnly), r, l.Items)
		}
		if now.Equal(at20.Add(15 * time.Minute)) {
			t.Logf("%s: %d items, newbie %+v", now.Format(time.TimeOnly), len(l.Items), l.Items[0])
		}
	}
}
