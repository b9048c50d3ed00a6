package summary

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestUnionKeysEqualsPairwise: the one-pass union of partitions equals
// folding MergeKeys pair by pair (entries, Theta, Total), with and without a
// limit that drops entries, when counts are distinct (no ties at the cut).
func TestUnionKeysEqualsPairwise(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, limit := range []int{0, 50, 500} {
		var parts []*Summary
		next := uint64(1)
		for p := range 8 {
			c := NewCounter(0)
			for i := range 40 + rng.IntN(80) {
				item := fmt.Sprintf("p%d-i%d", p, i)
				c.Add(item, Hash(item), next)
				next++
			}
			parts = append(parts, c.Summary(Config{N: 60}))
		}
		got := UnionKeys(parts, limit)
		want := parts[0]
		for _, p := range parts[1:] {
			var err error
			if want, err = MergeKeys(want, p, limit); err != nil {
				t.Fatal(err)
			}
		}
		want.Sketch = nil
		if got.Theta != want.Theta || got.Total != want.Total || len(got.Entries) != len(want.Entries) {
			t.Fatalf("limit %d: union theta %d total %d entries %d; pairwise %d %d %d", limit, got.Theta, got.Total, len(got.Entries), want.Theta, want.Total, len(want.Entries))
		}
		for i := range got.Entries {
			if got.Entries[i] != want.Entries[i] {
				t.Fatalf("limit %d: entry %d: %+v, pairwise %+v", limit, i, got.Entries[i], want.Entries[i])
			}
		}
	}
}
