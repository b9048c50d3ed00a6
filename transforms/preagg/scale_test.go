package preagg

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/source"
)

// BenchmarkPreaggScale is the pre-aggregation's cost per event on the
// streaming job's default workload rather than BenchmarkPreagg's small one:
// the synthetic source's beacons (3 types, 20 countries with their regions,
// 10M items Zipf 1.1), every scope, every rule, users tallies of the 64
// biggest items (the job's defaults), flushed every 200,000 events (a 1 s
// call at 200k events/s). Each flush touches a few thousand counters, so
// an event's three counter probes mostly miss the caches, as in the job
// (BENCHMARKS.md, "Counter probes made in batches").
func BenchmarkPreaggScale(b *testing.B) {
	const perFlush = 200_000
	g, err := source.NewGenerator(source.SyntheticSpec{Items: 10_000_000, Zipf: 1.1, Seed: 1, Countries: 20})
	if err != nil {
		b.Fatal(err)
	}
	// Three flushes' worth of beacons, all stamped within one 10 s bucket
	// (a 1 s call's events span one or two buckets).
	var beacons [][]byte
	events := 0
	for k := int64(0); events < 3*perFlush; k++ {
		data, n, err := g.Beacon(k, t0.Add(time.Duration(events)*time.Second/perFlush%(10*time.Second)))
		if err != nil {
			b.Fatal(err)
		}
		beacons = append(beacons, append([]byte(nil), data...))
		events += n
	}
	perBeacon := events / len(beacons)
	cfg := DefaultConfig()
	rc := DefaultRules()
	cfg.Rules = &rc
	cfg.UsersTop = 64
	benchLoop(b, cfg, beacons, perFlush/perBeacon, t0.Add(10*time.Second))
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*perBeacon), "ns/event")
}

// Property: a wave of distinct items (every event a new item, in every
// scope) holds at most MaxDistinct keys plus one batch of Adds
// (applyAdds) in the counters between beacons, and every event is still
// counted exactly once in the summaries the flushes emit, those for
// MaxDistinct and those for MaxPairs (users tallies) alike.
func TestDistinctBoundBatched(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxDistinct = 1000
	cfg.UsersTop, cfg.MaxPairs = 4, 700
	h := newHarness(t, cfg)
	want := map[string]uint64{}
	regions := []string{"US-CA", "US-TX", "IN-MH", "DE-BE"}
	for b := range 40 {
		var evs []schemas.Event
		for j := range 300 {
			k := b*300 + j
			e := ev(fmt.Sprintf("e%d", k), fmt.Sprintf("v_%d", k/2), "u_1", t0.Add(time.Duration(k)*time.Millisecond))
			e.Region = regions[k%len(regions)]
			e.Country = e.Region[:2]
			evs = append(evs, e)
			for _, sc := range []string{"global", e.Country, e.Region} {
				want["video/"+sc+"/"+e.Item]++
			}
		}
		h.send(t, t0.Add(time.Minute), evs...)
		held := 0
		for _, g := range h.fn.groups {
			for _, c := range g.counters {
				if c != nil {
					held += c.Len()
				}
			}
		}
		if held > cfg.MaxDistinct+addBatch || len(h.fn.adds) != 0 {
			t.Fatalf("after beacon %d: %d keys held, %d Adds pending; want at most MaxDistinct + addBatch = %d, none pending", b, held, len(h.fn.adds), cfg.MaxDistinct+addBatch)
		}
	}
	h.finish()
	h.checkCounts(t, want)
}

// Property: a counter keeps the size its list needs, flush after flush.
// Lists of very different sizes (a type's global list, its regions'
// lists) flush their counters every 50,000 events; the counters' slots
// per key counted after the eighth flush stay within 1.5 times those
// after the first. (With one free list shared by every list, each
// counter grew to the largest size any list needed: 3.2 slots a key after
// the first flush, 10.1 after the eighth.)
func TestCountersKeepTheirSize(t *testing.T) {
	const perFlush = 50_000
	g, err := source.NewGenerator(source.SyntheticSpec{Items: 10_000_000, Zipf: 1.1, Seed: 1, Countries: 20})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, DefaultConfig())
	var first, last float64
	events := 0
	for k, flushes := int64(0), 0; flushes < 8; k++ {
		at := t0.Add(time.Duration(events) * 10 * time.Second / perFlush) // a bucket a flush
		data, n, err := g.Beacon(k, at)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.fn.ProcessElement(context.Background(), mtime.FromTime(at), data, h.emit, h.tally, nopDead); err != nil {
			t.Fatal(err)
		}
		events += n
		if events < (flushes+1)*perFlush {
			continue
		}
		h.fn.applyAdds()
		slots, keys := 0, 0
		for _, g := range h.fn.groups {
			for _, c := range g.counters {
				if c != nil {
					slots, keys = slots+c.Slots(), keys+c.Len()
				}
			}
		}
		h.fn.flush(nopEmit, nopEmit, true)
		flushes++
		perKey := float64(slots) / float64(keys)
		t.Logf("flush %d: %d keys, %.1f slots a key", flushes, keys, perKey)
		if flushes == 1 {
			first = perKey
		}
		last = perKey
	}
	if last > 1.5*first {
		t.Errorf("counters hold %.1f slots a key after 8 flushes, %.1f after the first", last, first)
	}
}

// Property: groups whose keys share a slot of group's cache (groupSlot)
// are still counted apart. Region codes are tried until four share a
// slot with a first one in t0's bucket, as many scopes per slot as the
// cache ever meets, and more; events alternating between them, most in
// that bucket and type, some in another type or the next bucket, are
// counted exactly per (type, scope, item).
func TestGroupCacheCollisions(t *testing.T) {
	bucketMs := DefaultConfig().Bucket.Milliseconds()
	b0 := t0.UnixMilli() - t0.UnixMilli()%bucketMs
	slot := groupSlot("video", "US-CA", b0)
	regions := []string{"US-CA"}
	for i := 0; len(regions) < 5; i++ {
		r := fmt.Sprintf("US-%c%c%c", 'A'+i/676, 'A'+i/26%26, 'A'+i%26)
		if groupSlot("video", r, b0) == slot {
			regions = append(regions, r)
		}
		if i == 26*26*26-1 {
			t.Fatalf("found %d regions in slot %d, want 5", len(regions), slot)
		}
	}
	h := newHarness(t, DefaultConfig())
	want := map[string]uint64{}
	var evs []schemas.Event
	for k := range 4000 {
		at := t0.Add(time.Duration(k) * time.Millisecond) // 4 s: one bucket
		if k%7 == 0 {
			at = at.Add(time.Duration(bucketMs) * time.Millisecond)
		}
		e := ev(fmt.Sprintf("e%d", k), fmt.Sprintf("v_%d", k%11), fmt.Sprintf("u_%d", k), at)
		e.Region = regions[k%len(regions)]
		e.Country = e.Region[:2]
		if k%5 == 3 {
			e.Type = "search"
		}
		evs = append(evs, e)
		for _, sc := range []string{"global", e.Country, e.Region} {
			want[e.Type+"/"+sc+"/"+e.Item]++
		}
	}
	h.send(t, t0.Add(time.Minute), evs...)
	h.finish()
	h.checkCounts(t, want)
}

// checkCounts fails t unless the harness counted exactly want, by
// "type/scope/item".
func (h *harness) checkCounts(t *testing.T, want map[string]uint64) {
	t.Helper()
	if len(h.counts) != len(want) {
		t.Errorf("%d (list, item) counts, want %d", len(h.counts), len(want))
	}
	for k, n := range want {
		if h.counts[k] != n {
			t.Errorf("%s: counted %d, want %d", k, h.counts[k], n)
		}
	}
}
