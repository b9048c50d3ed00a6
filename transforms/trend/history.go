package trend

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/topk-dev/topk/transforms/exact/store"
)

// StoreHistory is History over the exact tables (transforms/exact/store): an
// item's share of an hour is its exact count (the a# row's l:{hour} cell,
// one point read per item for all hours) over the list's exact total of that
// hour (the t# row's c:total). The list totals are cached per list for TTL;
// item reads are not cached here because the scorer asks once per item, when
// it starts tracking it, and keeps the answer in its state. Safe for
// concurrent use.
type StoreHistory struct {
	Store *store.Store
	// TTL is how long a list's hourly totals are reused (an hour recounted
	// later appears after at most TTL). Zero: 10 minutes.
	TTL time.Duration
	// Now is the wall clock for the TTL. Zero: time.Now.
	Now func() time.Time

	mu     sync.Mutex
	totals map[[2]string]*cachedTotals
}

type cachedTotals struct {
	from, to time.Time
	at       time.Time
	totals   map[time.Time]int64
}

// maxCachedLists bounds the cache; past it the cache starts over.
const maxCachedLists = 10_000

func (h *StoreHistory) hourTotals(ctx context.Context, typ, scope string, from, to time.Time) (map[time.Time]int64, error) {
	now := time.Now
	if h.Now != nil {
		now = h.Now
	}
	ttl := h.TTL
	if ttl == 0 {
		ttl = 10 * time.Minute
	}
	key := [2]string{typ, scope}
	h.mu.Lock()
	c := h.totals[key]
	h.mu.Unlock()
	if c != nil && c.from.Equal(from) && c.to.Equal(to) && now().Sub(c.at) < ttl {
		return c.totals, nil
	}
	var hours []time.Time
	for t := from; t.Before(to); t = t.Add(time.Hour) {
		hours = append(hours, t)
	}
	totals := map[time.Time]int64{}
	if len(hours) > 0 {
		var err error
		if totals, err = h.Store.HourTotals(ctx, typ, scope, hours); err != nil {
			return nil, err
		}
	}
	h.mu.Lock()
	if h.totals == nil || len(h.totals) >= maxCachedLists {
		h.totals = map[[2]string]*cachedTotals{}
	}
	h.totals[key] = &cachedTotals{from: from, to: to, at: now(), totals: totals}
	h.mu.Unlock()
	return totals, nil
}

// HourlyShares implements History.
func (h *StoreHistory) HourlyShares(ctx context.Context, typ, scope string, items []string, from, to time.Time) (map[string]map[time.Time]float64, []time.Time, error) {
	totals, err := h.hourTotals(ctx, typ, scope, from, to)
	if err != nil {
		return nil, nil, err
	}
	hours := make([]time.Time, 0, len(totals))
	for t := range totals {
		hours = append(hours, t)
	}
	slices.SortFunc(hours, func(a, b time.Time) int { return a.Compare(b) })
	out := map[string]map[time.Time]float64{}
	if len(items) == 0 || len(hours) == 0 {
		return out, hours, nil
	}
	counts, err := h.Store.ItemHours(ctx, typ, scope, items, from, to)
	if err != nil {
		return nil, nil, err
	}
	for it, m := range counts {
		sh := make(map[time.Time]float64, len(m))
		for t, n := range m {
			if tot := totals[t]; tot > 0 {
				sh[t] = float64(n) / float64(tot)
			}
		}
		if len(sh) > 0 {
			out[it] = sh
		}
	}
	return out, hours, nil
}
