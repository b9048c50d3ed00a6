package store

import (
	"context"
	"testing"
	"time"

	"github.com/topk-dev/topk/schemas"
)

// TestHistoryReads checks the trend scorer's reads: an hour's list total is
// the sum of the hour's counts of that list (a rerun replaces it), and
// ItemHours returns exactly the written cells of [from, to).
func TestHistoryReads(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		must(t, s.WriteHour(ctx, hr(0), []schemas.ExactCount{
			ec(hr(0), "video", "IN", "a", 5), ec(hr(0), "video", "IN", "b", 7), ec(hr(0), "video", "global", "a", 9),
		}, 10))
		must(t, s.WriteHour(ctx, hr(1), []schemas.ExactCount{ec(hr(1), "video", "IN", "a", 3)}, 10))
		// A rerun of hour 1 with other counts replaces its total.
		must(t, s.WriteHour(ctx, hr(1), []schemas.ExactCount{ec(hr(1), "video", "IN", "a", 4), ec(hr(1), "video", "IN", "c", 6)}, 10))

		tot, err := s.HourTotals(ctx, "video", "IN", []time.Time{hr(0), hr(1), hr(2)})
		must(t, err)
		if len(tot) != 2 || tot[hr(0)] != 12 || tot[hr(1)] != 10 {
			t.Errorf("HourTotals = %v, want {h0: 12, h1: 10}", tot)
		}
		got, err := s.ItemHours(ctx, "video", "IN", []string{"a", "b", "c", "zz"}, hr(0), hr(2))
		must(t, err)
		want := map[string]map[time.Time]int64{"a": {hr(0): 5, hr(1): 4}, "b": {hr(0): 7}, "c": {hr(1): 6}}
		if len(got) != len(want) {
			t.Fatalf("ItemHours = %v, want %v", got, want)
		}
		for it, m := range want {
			for h, n := range m {
				if got[it][h] != n || len(got[it]) != len(m) {
					t.Errorf("ItemHours[%s] = %v, want %v", it, got[it], m)
				}
			}
		}
		only1, err := s.ItemHours(ctx, "video", "IN", []string{"a"}, hr(1), hr(2))
		must(t, err)
		if len(only1["a"]) != 1 || only1["a"][hr(1)] != 4 {
			t.Errorf("ItemHours [h1, h2) = %v", only1)
		}
	})
}
