package streams

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/topk-dev/topk/schemas"
)

// Key is the oracle's item key: type, a NUL byte, item. (Neither may contain
// a NUL: schemas.Validator allows printable ASCII only.)
func Key(typ, item string) string { return typ + "\x00" + item }

// SplitKey undoes Key.
func SplitKey(key string) (typ, item string) {
	typ, item, _ = strings.Cut(key, "\x00")
	return typ, item
}

// ExactCounts recounts events exactly, the way the exact path does: events
// with an event_id seen earlier in the slice are dropped (first occurrence
// wins, whatever its ts; events with an empty event_id are never
// duplicates), then each remaining event with from <= ts < to adds one to
// Key(type, item). A zero from or to leaves that side unbounded.
func ExactCounts(events []schemas.Event, from, to time.Time) map[string]uint64 {
	counts := make(map[string]uint64)
	seen := make(map[string]struct{}, len(events))
	for i := range events {
		e := &events[i]
		if e.EventID != "" {
			if _, dup := seen[e.EventID]; dup {
				continue
			}
			seen[e.EventID] = struct{}{}
		}
		if !from.IsZero() && e.TS.Before(from) {
			continue
		}
		if !to.IsZero() && !e.TS.Before(to) {
			continue
		}
		counts[Key(e.Type, e.Item)]++
	}
	return counts
}

// KV is one key and its exact count.
type KV struct {
	Key   string
	Count uint64
}

// TopK returns the k largest counts, by count descending, then key
// ascending, so the order is total and deterministic. k <= 0 or k beyond
// the number of keys returns every key, sorted.
func TopK(counts map[string]uint64, k int) []KV {
	all := make([]KV, 0, len(counts))
	for key, c := range counts {
		all = append(all, KV{key, c})
	}
	slices.SortFunc(all, func(a, b KV) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	if k > 0 && k < len(all) {
		all = all[:k:k]
	}
	return all
}

// Recall grades an answer got (keys, best first) against the exact ranking
// exact (sorted as TopK sorts): the share of the first k keys of got that are
// true top-k items. Ties at the cut are treated fairly: a key is a hit if its
// exact count is at least the k-th exact count, so any of several items tied
// at rank k is a right answer. Each key counts once; keys missing from exact
// are misses. The denominator is min(k, len(exact)), so recall is 1 when got
// holds a full correct answer.
//
// exact must hold every key whose count reaches the k-th count: pass
// TopK(counts, 0), the whole ranking. With fewer than k exact keys every key
// in exact is a hit; k <= 0 or an empty exact gives 1 (nothing to find).
func Recall(got []string, exact []KV, k int) float64 {
	want := min(k, len(exact))
	if want <= 0 {
		return 1
	}
	threshold := exact[want-1].Count
	counts := make(map[string]uint64, len(exact))
	for _, kv := range exact {
		counts[kv.Key] = kv.Count
	}
	hits := 0
	seen := make(map[string]struct{}, min(k, len(got)))
	for _, key := range got[:min(k, len(got))] {
		if _, dup := seen[key]; dup {
			continue
		}
		seen[key] = struct{}{}
		if c, ok := counts[key]; ok && c >= threshold {
			hits++
		}
	}
	return float64(hits) / float64(want)
}
