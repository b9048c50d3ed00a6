package preagg

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/rules"
)

// retryStream is a stream that exercises every stateful rule: beacons of
// 20 events by 30 accounts over 6 items and 4 minutes (repeats inside the
// 30 s gap, accounts past the cap of 10), a few events twice in one beacon,
// and some beacons sent again by their client under a new beacon_id (their
// events are duplicates).
func retryStream() []schemas.Beacon {
	rng := rand.New(rand.NewPCG(3, 4))
	var out []schemas.Beacon
	at := t0
	for b := range 120 {
		bc := schemas.Beacon{BeaconID: fmt.Sprintf("b%d", b)}
		for i := range 20 {
			at = at.Add(time.Duration(rng.IntN(250)) * time.Millisecond)
			bc.Events = append(bc.Events, ev(fmt.Sprintf("e%d-%d", b, i), fmt.Sprintf("v_%d", rng.IntN(6)), fmt.Sprintf("u_%d", rng.IntN(30)), at))
		}
		if b%7 == 3 {
			bc.Events = append(bc.Events, bc.Events[4]) // the same event twice in a beacon
		}
		out = append(out, bc)
		if b%9 == 5 { // the client sends it again with a new id
			again := bc
			again.BeaconID += "-again"
			out = append(out, again)
		}
	}
	return out
}

// runRetried pushes beacons through a preaggFn in bundles of 5 beacons;
// when retried, every third bundle is first processed and finished, once
// or twice, into a sink that is thrown away (the runner discarded it, as
// Dataflow does after a failed commit) and then processed again on the
// same instance. It returns the counts that reached the kept sink, and
// its users tallies (trending's input) as text: each list's distinct
// pairs and each item's distinct users (a tally's encoding is not
// canonical: its items are in map order).
func runRetried(t *testing.T, beaconsOnce, retried bool, beacons []schemas.Beacon) (map[string]uint64, map[string]string) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Scopes = false
	rc := DefaultRules()
	cfg.Rules = &rc
	cfg.BeaconsOnce = beaconsOnce
	cfg.UsersTop = 4 // distinct-users tallies too (trending's input)
	h := newHarness(t, cfg)
	discard := func(beam.EventTime, string, []byte) {}
	bundle := func(bs []schemas.Beacon, emit, tally func(beam.EventTime, string, []byte)) {
		for _, b := range bs {
			raw, err := schemas.MarshalBeacon(&b)
			if err != nil {
				t.Fatal(err)
			}
			at := b.Events[len(b.Events)-1].TS
			if err := h.fn.ProcessElement(context.Background(), mtime.FromTime(at), raw, emit, tally, func(schemas.DeadLetter) { h.dead++ }); err != nil {
				t.Fatal(err)
			}
		}
		h.fn.FinishBundle(context.Background(), emit, tally, func(schemas.DeadLetter) {})
	}
	for i, n := 0, 0; i < len(beacons); i, n = i+5, n+1 {
		bs := beacons[i:min(i+5, len(beacons))]
		if retried && n%3 == 1 {
			for range 1 + n%2 {
				bundle(bs, discard, discard)
			}
		}
		bundle(bs, h.emit, h.tally)
	}
	tallies := map[string]string{}
	for k, tl := range h.tallies {
		items := slices.Sorted(maps.Keys(tl.Items))
		text := fmt.Sprintf("pairs %d", tl.Pairs.Estimate())
		for _, it := range items {
			text += fmt.Sprintf(" %s:%d", it, tl.Items[it].Users.Estimate())
		}
		tallies[k] = text
	}
	return h.counts, tallies
}

// Property: a bundle the runner discards after the pre-aggregation finished
// it, retried on the same instance, counts what it would have counted had
// it committed the first time, when the source delivers a beacon_id once
// (BeaconsOnce: Dataflow's read with the beacon_id id attribute, or the
// recovery log): its events get their first verdicts again rather than
// being taken for duplicates, while a beacon its client sent twice, and an
// event twice in one beacon, are still duplicates. Without BeaconsOnce the
// retried bundles count (nearly) nothing: the under-count the option fixes.
func TestRetriedBundleCountsOnce(t *testing.T) {
	beacons := retryStream()
	clean, cleanUsers := runRetried(t, false, false, beacons)
	// The reference is the rules' definition, recounted exactly; the
	// stream arrives in canonical order, so the filter must match it.
	if want := recountRules(t, beacons); !maps.Equal(clean, want) {
		t.Fatalf("without retries counted %v, the definition %v", clean, want)
	}
	if got, _ := runRetried(t, true, false, beacons); !maps.Equal(got, clean) {
		t.Fatalf("BeaconsOnce without retries counted %v, want %v (as without it)", got, clean)
	}
	if len(cleanUsers) == 0 {
		t.Fatal("no users tallies: trending's input is not checked")
	}
	var total uint64
	for _, c := range clean {
		total += c
	}
	var events int
	for _, b := range beacons {
		events += len(b.Events)
	}
	// The stream must exercise the rules: many events dropped, not all.
	if total == 0 || int(total) > events*3/4 {
		t.Fatalf("the clean run counted %d of %d events: the stream does not exercise the rules", total, events)
	}
	got, gotUsers := runRetried(t, true, true, beacons)
	if !maps.Equal(got, clean) {
		t.Errorf("retried bundles with BeaconsOnce counted %v, want %v (no retries)", got, clean)
	}
	if !maps.Equal(gotUsers, cleanUsers) {
		t.Errorf("retried bundles with BeaconsOnce: users tallies %v, want %v (no retries)", gotUsers, cleanUsers)
	}
	lost, _ := runRetried(t, false, true, beacons)
	var lostTotal uint64
	for _, c := range lost {
		lostTotal += c
	}
	if lostTotal >= total {
		t.Errorf("retried bundles without BeaconsOnce counted %d, want fewer than %d (the under-count the option exists for)", lostTotal, total)
	}
	t.Logf("%d beacons, %d events: %d counted without retries and with retried bundles (BeaconsOnce); %d with retried bundles without it", len(beacons), events, total, lostTotal)
}

// recountRules counts beacons' events by the rules' definition, as the
// exact recount does (rules package doc): duplicates by event_id dropped,
// Rules.Check, then Judge.Step on each (user, type, item, rule window)'s
// events in canonical order (event time in ms, then IDHash). Counts are
// keyed as the harness keys them.
func recountRules(t *testing.T, beacons []schemas.Beacon) map[string]uint64 {
	t.Helper()
	rc := DefaultRules()
	r, err := rules.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var events []schemas.Event
	for _, b := range beacons {
		for _, e := range b.Events {
			if !seen[e.EventID] {
				seen[e.EventID] = true
				events = append(events, e)
			}
		}
	}
	slices.SortFunc(events, func(a, b schemas.Event) int {
		if c := cmp.Compare(a.TS.UnixMilli(), b.TS.UnixMilli()); c != 0 {
			return c
		}
		return cmp.Compare(rules.IDHash(a.EventID), rules.IDHash(b.EventID))
	})
	judge := rc.Judge()
	keys := map[string]*rules.KeyState{}
	out := map[string]uint64{}
	for i := range events {
		e := &events[i]
		if _, why := r.Check(e); why != rules.OK {
			continue
		}
		ms := e.TS.UnixMilli()
		k := fmt.Sprint(e.User, "/", e.Type, "/", e.Item, "/", rc.WindowStart(ms))
		if keys[k] == nil {
			keys[k] = &rules.KeyState{}
		}
		if judge.Step(keys[k], ms, rules.IDHash(e.EventID)) == rules.OK {
			out[e.Type+"/global/"+e.Item]++
		}
	}
	return out
}
