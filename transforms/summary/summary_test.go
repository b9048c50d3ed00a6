package summary

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

func counted(cfg Config, counts map[string]uint64) *Summary {
	c := NewCounter(0)
	for it, n := range counts {
		c.Add(it, Hash(it), n)
	}
	return c.Summary(cfg)
}

// A hand-checked merge: bounds follow the rules of the package doc.
func TestMergeEventsByHand(t *testing.T) {
	cfg := Config{N: 2}
	a := counted(cfg, map[string]uint64{"x": 10, "y": 7, "z": 3}) // tracks x, y; theta 3, z dropped
	b := counted(cfg, map[string]uint64{"x": 4, "z": 6, "w": 1})  // tracks z, x; theta 1, w dropped
	if a.Theta != 3 || b.Theta != 1 {
		t.Fatalf("theta a=%d b=%d, want 3 and 1", a.Theta, b.Theta)
	}
	// Theta alone (no Drops): an item one side did not track gets that
	// side's Theta. x: tracked both: [14,14]. y: a only: [7, 7+1]. z: b
	// only: [6, 6+3]. Keep 2 by hi: x(14), z(9); y (hi 8) dropped: theta =
	// max(3+1, 8) = 8.
	thetaOnly := func(sm *Summary) *Summary { c := sm.WithN(sm.N); c.Dropped = nil; return c }
	m0, err := MergeEvents(thetaOnly(a), thetaOnly(b))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]uint64{"x": {14, 14}, "z": {6, 9}}
	if len(m0.Entries) != 2 || m0.Theta != 8 || m0.Total != 31 {
		t.Fatalf("theta only: got %+v theta %d total %d", m0.Entries, m0.Theta, m0.Total)
	}
	for _, e := range m0.Entries {
		if w := want[e.Item]; e.Lo != w[0] || e.Hi != w[1] {
			t.Errorf("theta only: %s: [%d,%d], want %v", e.Item, e.Lo, e.Hi, w)
		}
	}
	// With Drops: b dropped only w, so y (never in b) gets 0 from b:
	// [7,7]; a dropped z with count 3, so z gets 3: [6,9]. y (hi 7) is
	// dropped: theta = max(3+1, 7) = 7, and y's cells hold 7.
	m, err := MergeEvents(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Entries) != 2 || m.Theta != 7 || m.Total != 31 {
		t.Fatalf("got %+v theta %d total %d", m.Entries, m.Theta, m.Total)
	}
	for _, e := range m.Entries {
		if w := want[e.Item]; e.Lo != w[0] || e.Hi != w[1] {
			t.Errorf("%s: [%d,%d], want %v", e.Item, e.Lo, e.Hi, w)
		}
	}
	if got := m.Upper("y"); got != 7 {
		t.Errorf("dropped y's bound %d, want 7", got)
	}
	ans := m.Answer(2)
	// x's lo 14 >= max(z's hi 9, theta 7): certified at 1; z's lo 6 < theta 7.
	if ans.CertifiedK != 1 || ans.MaxOvercount != 3 || ans.Entries[0].Item != "x" {
		t.Errorf("answer %+v, want x first, certified_k 1, max_overcount 3", ans)
	}
}

func TestMergeKeysUnion(t *testing.T) {
	cfg := Config{N: 2}
	a := counted(cfg, map[string]uint64{"a1": 9, "a2": 5, "a3": 2})
	b := counted(cfg, map[string]uint64{"b1": 7, "b2": 6, "b3": 4})
	m, err := MergeKeys(a, b, 3)
	if err != nil {
		t.Fatal(err)
	}
	ans := m.Answer(3)
	got := []string{ans.Entries[0].Item, ans.Entries[1].Item, ans.Entries[2].Item}
	if got[0] != "a1" || got[1] != "b1" || got[2] != "b2" {
		t.Fatalf("got %v, want a1 b1 b2", got)
	}
	// theta = max(2, 4, dropped a2's 5) = 5; b2's 6 >= 5: all 3 certified.
	if m.Theta != 5 || ans.CertifiedK != 3 {
		t.Errorf("theta %d certified %d, want 5 and 3", m.Theta, ans.CertifiedK)
	}
}

// Merging with the empty summary changes nothing.
func TestIdentity(t *testing.T) {
	cfg := DefaultConfig()
	a := counted(cfg, map[string]uint64{"p": 3, "q": 1})
	for _, m := range []func() (*Summary, error){
		func() (*Summary, error) { return MergeEvents(New(cfg), a) },
		func() (*Summary, error) { return MergeEvents(a, New(cfg)) },
		func() (*Summary, error) { return MergeKeys(New(cfg), a, cfg.N) },
	} {
		got, err := m()
		if err != nil {
			t.Fatal(err)
		}
		if !Equal(got, a) {
			t.Errorf("merge with identity changed the summary: %+v vs %+v", got.Entries, a.Entries)
		}
	}
}

func sampleSummaries(t testing.TB) []*Summary {
	sc := simConfig{cfg: Config{N: 64, SketchWidth: 64, SketchDepth: 3}, partitions: 2, bundle: 7000, maxDistinct: 500}
	return slices.Concat(sc.bucketSummaries(t, zipfStream(3, 1.1, 50_000, 60_000, 3))...)
}

// Round trip is lossless, and merging decoded summaries equals merging the
// originals in memory.
func TestEncodeRoundTripAndMerge(t *testing.T) {
	sms := sampleSummaries(t)
	dec := make([]*Summary, len(sms))
	for i, sm := range sms {
		b, err := sm.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if dec[i], err = Unmarshal(b); err != nil {
			t.Fatalf("summary %d: %v", i, err)
		}
		if !Equal(dec[i], sm) {
			t.Fatalf("summary %d changed in a round trip", i)
		}
		// Decoded without copying the items: the same summary, its items
		// over b's bytes.
		al, err := UnmarshalAliased(b)
		if err != nil || !Equal(al, sm) {
			t.Fatalf("summary %d: aliased decode differs (%v)", i, err)
		}
		for _, e := range al.Entries {
			if p := unsafe.StringData(e.Item); len(e.Item) > 0 && (uintptr(unsafe.Pointer(p)) < uintptr(unsafe.Pointer(&b[0])) || uintptr(unsafe.Pointer(p)) >= uintptr(unsafe.Pointer(&b[0]))+uintptr(len(b))) {
				t.Fatalf("summary %d: item %q not over the encoding's bytes", i, e.Item)
			}
		}
	}
	for i := 1; i < len(sms); i++ {
		m1, err1 := MergeEvents(sms[i-1], sms[i])
		m2, err2 := MergeEvents(dec[i-1], dec[i])
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if !Equal(m1, m2) {
			t.Fatalf("merge of decoded %d differs from merge in memory", i)
		}
	}
}

func TestUnmarshalRejects(t *testing.T) {
	good, _ := sampleSummaries(t)[0].MarshalBinary()
	for name, b := range map[string][]byte{
		"empty":       nil,
		"magic":       []byte("XX\x01"),
		"version":     []byte("TS\x09"),
		"truncated":   good[:len(good)/2],
		"trailing":    append(append([]byte{}, good...), 0),
		"N zero":      []byte("TS\x01\x00\x00\x00\x00\x00"),
		"E over N":    []byte("TS\x01\x01\x00\x00\x02\x00"),
		"huge sketch": []byte("TS\x01\x01\x00\x00\x00\x80\x80\x80\x02\x04"),
		"dup item":    []byte("TS\x01\x04\x02\x00\x02\x01a\x01\x00\x01a\x01\x00\x00"),
	} {
		if _, err := Unmarshal(b); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
		if _, err := UnmarshalAliased(b); err == nil {
			t.Errorf("%s: decoded without error (aliased)", name)
		}
	}
}

// FuzzUnmarshal: any input either fails to decode or decodes to a summary
// whose encoding is canonical and lossless, and that merges with itself
// keeping lo <= hi. Its seeds are small (a few hundred bytes: summaries
// whose Drops are sparse): the fuzzer minimizes every input that finds
// new code, and seeds of 19 KB (a dense Drops) kept it minimizing, at
// about 0 execs/s; the dense and planes encodings are mutated instead by
// TestUnmarshalMutations.
func FuzzUnmarshal(f *testing.F) {
	for _, sm := range smallSummaries(f) {
		b, _ := sm.MarshalBinary()
		f.Add(b)
	}
	f.Add([]byte("TS\x01\x01\x00\x00\x00\x00"))
	f.Fuzz(checkDecoded)
}

// smallSummaries are a few bucket summaries of a short stream: entries,
// a sketch and a sparse Drops, each under a kilobyte encoded.
func smallSummaries(t testing.TB) []*Summary {
	sc := simConfig{cfg: Config{N: 8, SketchWidth: 8, SketchDepth: 2}, partitions: 1, bundle: 100, maxDistinct: 40}
	return slices.Concat(sc.bucketSummaries(t, zipfStream(5, 1.1, 400, 600, 3))...)
}

// checkDecoded is FuzzUnmarshal's property for one input.
func checkDecoded(t *testing.T, data []byte) {
	sm, err := Unmarshal(data)
	if err != nil {
		return
	}
	b, err := sm.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	sm2, err := Unmarshal(b)
	if err != nil || !Equal(sm, sm2) {
		t.Fatalf("re-encoding is not lossless: %v", err)
	}
	if b2, _ := sm2.MarshalBinary(); !bytes.Equal(b, b2) {
		t.Fatal("encoding is not canonical")
	}
	// Merging a decoded summary with itself never panics and keeps lo <= hi.
	if m, err := MergeEvents(sm, sm2); err == nil {
		for _, e := range m.Entries {
			if e.Lo > e.Hi {
				t.Fatalf("merge produced lo %d > hi %d", e.Lo, e.Hi)
			}
		}
	}
}

// TestUnmarshalMutations runs FuzzUnmarshal's property over random
// mutations of the large encodings its seeds leave out: Drops as planes
// (a sample summary's, with entries and a sketch, and a busy bucket's)
// and as the whole array (every cell random). Each mutation flips,
// overwrites, inserts or deletes a few bytes, or truncates, at positions
// spread over the whole encoding, so the Drops' bytes at the end are hit
// as often as the header.
func TestUnmarshalMutations(t *testing.T) {
	x := uint64(0x9e3779b97f4a7c15)
	bases := []*Summary{
		sampleSummaries(t)[0],
		{N: 1, Theta: 1, Dropped: busyBucketDrops()},
		{N: 1, Theta: 1, Dropped: randomDrops(&x, -1)},
	}
	next := rand.New(rand.NewPCG(11, 12)).IntN
	decoded := 0
	for bi, base := range bases {
		good, err := base.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		for i := range 1500 {
			b := bytes.Clone(good)
			for range 1 + next(3) {
				at := next(len(b))
				switch next(5) {
				case 0:
					b[at] ^= 1 << next(8)
				case 1:
					b[at] = byte(next(256))
				case 2:
					b = slices.Insert(b, at, byte(next(256)))
				case 3:
					b = slices.Delete(b, at, min(len(b), at+1+next(4)))
				case 4:
					b = b[:at]
				}
				if len(b) == 0 {
					b = []byte{0}
				}
			}
			if _, err := Unmarshal(b); err == nil {
				decoded++
			}
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("base %d, mutation %d: panic %v", bi, i, r)
					}
					if t.Failed() {
						t.Logf("base %d, mutation %d (%d bytes)", bi, i, len(b))
					}
				}()
				checkDecoded(t, b)
			}()
		}
	}
	t.Logf("%d of %d mutations decoded", decoded, len(bases)*1500)
}

// Counting an item already in the counter allocates nothing.
func TestCounterAddNoAlloc(t *testing.T) {
	c := NewCounter(0)
	items := make([]string, 1000)
	hashes := make([]uint64, len(items))
	for i := range items {
		items[i] = "item_" + strconv.Itoa(i)
		hashes[i] = Hash(items[i])
		c.Add(items[i], hashes[i], 1)
	}
	allocs := testing.AllocsPerRun(100, func() {
		for i := range items {
			c.Add(items[i], hashes[i], 1)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per 1,000 adds", allocs)
	}
	if c.Total() != 1000*102 { // 1,000 warm-up adds plus AllocsPerRun's 101 runs
		t.Fatalf("total %d", c.Total())
	}
}

// TestCounterCounts: exact counts, Full at the cap, Reset empties; Peek
// (the pre-aggregation's read ahead) changes nothing.
func TestCounterCounts(t *testing.T) {
	c := NewCounter(10)
	want := map[string]uint64{}
	for i := range 5000 {
		it := "k" + strconv.Itoa(i%9)
		c.Peek(Hash(it)) // reads only: the counts below are unchanged by it
		c.Peek(uint64(i))
		c.Add(it, Hash(it), uint64(i%3))
		want[it] += uint64(i % 3)
	}
	if c.Full() || c.Len() != 9 {
		t.Fatalf("len %d full %v", c.Len(), c.Full())
	}
	c.Each(func(item string, h, n uint64) {
		if want[item] != n || Hash(item) != h {
			t.Errorf("%s: %d, want %d", item, n, want[item])
		}
	})
	c.Add("k9", Hash("k9"), 1)
	if !c.Full() {
		t.Error("not full at the cap")
	}
	c.Reset()
	if c.Len() != 0 || c.Total() != 0 {
		t.Error("reset left counts")
	}
}

// TestCounterSummaryKeyOrder: a counter's summary lists min(N, distinct)
// entries in key order (cmpKey: hash, then item), each with its exact
// count, below and above N, also where hashes share their high bits or
// are equal (hashes given by hand: Summary orders by the high bits first
// and must mend the rest).
func TestCounterSummaryKeyOrder(t *testing.T) {
	for _, n := range []int{64, 300} {
		c := NewCounter(0)
		want := map[string]uint64{}
		add := func(item string, h uint64, k uint64) {
			c.Add(item, h, k)
			want[item] += k
		}
		for i := range 200 {
			it := "r" + strconv.Itoa(i)
			add(it, Hash(it), uint64(1+i%7))
		}
		// 40 items whose hashes differ only in their low 8 bits, in
		// descending order; and 10 pairs of items with one hash each.
		for i := range 40 {
			add("low"+strconv.Itoa(i), 0x5a5a_0000_0000_0000|uint64(255-i), uint64(3+i%5))
		}
		for i := range 10 {
			h := uint64(0x7000_0000_0000_0000) + uint64(i)<<40
			add("same-b"+strconv.Itoa(i), h, 4)
			add("same-a"+strconv.Itoa(i), h, 4)
		}
		sm := c.Summary(Config{N: n})
		if !slices.IsSortedFunc(sm.Entries, cmpKey) {
			t.Fatalf("N=%d: entries not in key order", n)
		}
		if len(sm.Entries) != min(n, len(want)) {
			t.Fatalf("N=%d: %d entries, want %d", n, len(sm.Entries), min(n, len(want)))
		}
		for _, e := range sm.Entries {
			if e.Lo != want[e.Item] || e.Hi != want[e.Item] {
				t.Errorf("N=%d: %s counted [%d, %d], want %d", n, e.Item, e.Lo, e.Hi, want[e.Item])
			}
		}
	}
}

func TestPartitionSpread(t *testing.T) {
	const p = 16
	var n [p]int
	for i := range 160_000 {
		n[Partition(Hash("v_"+strconv.Itoa(i)), p)]++
	}
	for i, c := range n {
		if c < 9000 || c > 11000 {
			t.Errorf("partition %d has %d of 160000 keys", i, c)
		}
	}
}

// The in-place Merger gives exactly what pairwise MergeEvents gives.
func TestMergerEqualsMergeEvents(t *testing.T) {
	sms := sampleSummaries(t)
	var m Merger
	want := sms[0]
	for i, sm := range sms {
		b, _ := sm.MarshalBinary()
		if err := m.AddEncoded(b); err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			var err error
			if want, err = MergeEvents(want, sm); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !Equal(m.Result(), want) {
		t.Fatal("Merger result differs from pairwise MergeEvents")
	}
}

// Property: TopInto gives Top's items whatever its buffer held before,
// and reuses the buffer when it is big enough; the items are the n
// largest counts, ties by the smaller hash, as an exact sort says.
func TestCounterTopInto(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	buf := make([]Counted, 5, 4096)
	for i := range buf {
		buf[i] = Counted{Item: "stale", Hash: uint64(i), Count: 1 << 40}
	}
	for round := range 20 {
		c := NewCounter(1 << 12)
		all := map[string]uint64{}
		for range 1000 + 50*round {
			it := fmt.Sprintf("i%d", rng.IntN(300))
			c.Add(it, Hash(it), 1)
			all[it]++
		}
		var want []Counted
		for it, n := range all {
			want = append(want, Counted{it, Hash(it), n})
		}
		// The expected order, written out (not CompareCounted).
		byRank := func(a, b Counted) int {
			if a.Count != b.Count {
				return cmp.Compare(b.Count, a.Count)
			}
			return cmp.Compare(a.Hash, b.Hash)
		}
		slices.SortFunc(want, byRank)
		n := 1 + round*3
		got := c.TopInto(buf, n)
		if &got[0] != &buf[:1][0] {
			t.Fatalf("round %d: TopInto did not reuse a buffer of capacity %d", round, cap(buf))
		}
		slices.SortFunc(got, byRank)
		if !slices.Equal(got, want[:n]) {
			t.Fatalf("round %d: TopInto(%d) = %v, want %v", round, n, got, want[:n])
		}
	}
}

// MergeEventsN and WithN by hand: the same merge as TestMergeEventsByHand
// kept to one entry, and a copy of a summary cut to one entry: N and the
// entries' capacity are the new n, the bounds stay valid (the dropped
// items' hi becomes Theta), and the inputs do not change.
func TestMergeEventsNAndWithN(t *testing.T) {
	cfg := Config{N: 2}
	a := counted(cfg, map[string]uint64{"x": 10, "y": 7, "z": 3}) // x [10,10], y [7,7], theta 3
	b := counted(cfg, map[string]uint64{"x": 4, "z": 6, "w": 1})  // z [6,6], x [4,4], theta 1
	m, err := MergeEventsN(a, b, 1)
	if err != nil {
		t.Fatal(err)
	}
	// x [14,14] kept; z [6,9] and y [7,8] dropped: theta = max(3+1, 9).
	if m.N != 1 || len(m.Entries) != 1 || m.Entries[0].Item != "x" || m.Entries[0].Lo != 14 || m.Theta != 9 || m.Total != 31 {
		t.Fatalf("got N %d %+v theta %d total %d", m.N, m.Entries, m.Theta, m.Total)
	}
	if len(a.Entries) != 2 || a.N != 2 || len(b.Entries) != 2 {
		t.Fatalf("inputs changed: %+v %+v", a, b)
	}
	w := a.WithN(1)
	if w.N != 1 || len(w.Entries) != 1 || cap(w.Entries) != 1 || w.Entries[0].Item != "x" || w.Theta != 7 || w.Total != a.Total {
		t.Fatalf("WithN(1): N %d %+v (cap %d) theta %d", w.N, w.Entries, cap(w.Entries), w.Theta)
	}
	// A merge into the cut copy keeps its N.
	if m2, err := MergeEvents(w, b); err != nil || m2.N != 1 || len(m2.Entries) != 1 {
		t.Fatalf("merge into WithN(1): %+v, %v", m2, err)
	}
	// Against an empty side: the other side cut to n.
	if e, err := MergeEventsN(New(cfg), a, 1); err != nil || e.N != 1 || len(e.Entries) != 1 || e.Theta != 7 {
		t.Fatalf("empty + a to 1: %+v, %v", e, err)
	}
}

// Property: MergeEventsInto is MergeEventsN, whatever dst held before (its
// memory reused), with or without sketches, empty sides and cuts, and
// leaves its inputs as they were.
func TestMergeEventsIntoEqualsN(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	random := func(cfg Config, items int) *Summary { return randomCounted(rng, cfg, items) }
	var dst Summary
	sampled := sampleSummaries(t) // with sketches: the MergeEventsN path
	for round := range 300 {
		var a, b *Summary
		switch round % 4 {
		case 0:
			a, b = sampled[rng.IntN(len(sampled))], sampled[rng.IntN(len(sampled))]
		case 1:
			a, b = New(Config{N: 16}), random(Config{N: 16}, 40)
		default:
			a, b = random(Config{N: 8 + rng.IntN(64)}, rng.IntN(200)), random(Config{N: 8 + rng.IntN(64)}, rng.IntN(200))
		}
		n := 1 + rng.IntN(100)
		unchanged := snapshot(a, b)
		want, err := MergeEventsN(a, b, n)
		if err != nil {
			t.Fatal(err)
		}
		if err := MergeEventsInto(&dst, a, b, n); err != nil {
			t.Fatal(err)
		}
		if !Equal(&dst, want) {
			t.Fatalf("round %d (n %d): MergeEventsInto %+v, MergeEventsN %+v", round, n, dst, *want)
		}
		if !unchanged() {
			t.Fatalf("round %d: an input changed", round)
		}
	}
}

// Property: MergeEventsTopInto equals MergeEventsInto followed by TopInto
// (the two steps a window's answer took before), for sides with and without
// Drops (summaries that overflowed, and merges of them that cut), with
// sketches and empty sides, for cuts below and above n and floors that
// leave all, some or none; its reused output's old contents never leak in,
// and neither input changes.
func TestMergeEventsTopInto(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 6))
	random := func(cfg Config, items int) *Summary { return randomCounted(rng, cfg, items) }
	side := func() *Summary {
		a := random(Config{N: 8 + rng.IntN(64)}, rng.IntN(300))
		if rng.IntN(2) == 0 { // an aggregate: a merge that cut
			b := random(Config{N: 8 + rng.IntN(64)}, rng.IntN(300))
			m, err := MergeEventsN(a, b, 8+rng.IntN(64))
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
		return a
	}
	var got, scratch, want Summary
	sampled := sampleSummaries(t) // with sketches: the two-step path
	drops := 0
	for round := range 600 {
		var a, b *Summary
		switch round % 6 {
		case 0:
			a, b = sampled[rng.IntN(len(sampled))], sampled[rng.IntN(len(sampled))]
		case 1:
			a, b = New(Config{N: 16}), side()
		default:
			a, b = side(), side()
		}
		if a.Dropped != nil && b.Dropped != nil {
			drops++
		}
		n := 1 + rng.IntN(100)
		limit := []int{0, 1 + rng.IntN(2*n)}[rng.IntN(2)]
		floor := []uint64{0, 1 + uint64(rng.IntN(40))}[rng.IntN(2)]
		unchanged := snapshot(a, b)
		if err := MergeEventsInto(&scratch, a, b, n); err != nil {
			t.Fatal(err)
		}
		scratch.TopInto(&want, limit, floor)
		if err := MergeEventsTopInto(&got, a, b, n, limit, floor); err != nil {
			t.Fatal(err)
		}
		if !Equal(&got, &want) {
			t.Fatalf("round %d (n %d, limit %d, floor %d):\n got %+v\nwant %+v", round, n, limit, floor, got, want)
		}
		if !unchanged() {
			t.Fatalf("round %d: an input changed", round)
		}
	}
	if drops < 100 {
		t.Fatalf("only %d rounds merged two sides with Drops: the test does not exercise them", drops)
	}
}

// snapshot encodes sms and returns a check that they still encode the
// same: that a merge left its inputs as they were.
func snapshot(sms ...*Summary) func() bool {
	before := make([][]byte, len(sms))
	for i, sm := range sms {
		before[i], _ = sm.MarshalBinary()
	}
	return func() bool {
		for i, sm := range sms {
			if after, _ := sm.MarshalBinary(); !bytes.Equal(after, before[i]) {
				return false
			}
		}
		return true
	}
}

// randomCounted is the summary (cfg) of items random draws over 3 x items
// names, each adding 1 to 20.
func randomCounted(rng *rand.Rand, cfg Config, items int) *Summary {
	counts := map[string]uint64{}
	for range items {
		counts["i"+strconv.Itoa(rng.IntN(3*items+1))] += 1 + uint64(rng.IntN(20))
	}
	return counted(cfg, counts)
}

// TestOwnItems: a summary decoded over a buffer (UnmarshalAliased) keeps
// its items once OwnItems has copied them, whatever is written over the
// buffer after, and a merge of it with another is unchanged by the copy.
func TestOwnItems(t *testing.T) {
	sms := sampleSummaries(t)
	sms[0].Entries = append(sms[0].Entries, Entry{Item: "", Hash: Hash(""), Lo: 1, Hi: 1})
	sms[0].Total++
	sms[0].N = max(sms[0].N, len(sms[0].Entries))
	sms[0].sortByKey()
	b, err := sms[0].MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	sm, err := UnmarshalAliased(b)
	if err != nil {
		t.Fatal(err)
	}
	want, err := MergeEvents(sm, sms[1])
	if err != nil {
		t.Fatal(err)
	}
	wantBytes, _ := want.MarshalBinary()
	sm.OwnItems()
	for i := range b {
		b[i] = 'x'
	}
	if !Equal(sm, sms[0]) {
		t.Fatal("items changed with the buffer they were decoded over")
	}
	got, err := MergeEvents(sm, sms[1])
	if err != nil {
		t.Fatal(err)
	}
	if gotBytes, _ := got.MarshalBinary(); !bytes.Equal(gotBytes, wantBytes) {
		t.Fatal("a merge changed with OwnItems")
	}
}

// TestUnmarshalKeyOrder: entries written out of key order decode into key
// order, and an item given twice is refused whether or not the two are
// next to each other in the input.
func TestUnmarshalKeyOrder(t *testing.T) {
	enc := func(items ...string) []byte {
		b := binary.AppendUvarint([]byte("TS\x01"), 8)                           // N
		b = binary.AppendUvarint(b, uint64(len(items)))                          // Total
		b = binary.AppendUvarint(binary.AppendUvarint(b, 0), uint64(len(items))) // Theta, E
		for _, it := range items {
			b = append(binary.AppendUvarint(b, uint64(len(it))), it...)
			b = append(b, 1, 0) // lo 1, hi - lo 0
		}
		return append(b, 0) // no sketch
	}
	items := []string{"a", "b", "c", "d"}
	slices.SortFunc(items, func(x, y string) int { return -cmpKey(Entry{Item: x, Hash: Hash(x)}, Entry{Item: y, Hash: Hash(y)}) })
	for _, decode := range []func([]byte) (*Summary, error){Unmarshal, UnmarshalAliased} {
		sm, err := decode(enc(items...))
		if err != nil {
			t.Fatal(err)
		}
		if len(sm.Entries) != 4 || !slices.IsSortedFunc(sm.Entries, cmpKey) {
			t.Fatalf("decoded %+v, not in key order", sm.Entries)
		}
		for _, dup := range [][]string{{items[0], items[0]}, {items[0], items[1], items[0]}, {items[2], items[0], items[1], items[0]}} {
			if _, err := decode(enc(dup...)); err == nil || !strings.Contains(err.Error(), "twice") {
				t.Errorf("%q: decoded with error %v, want an item twice", dup, err)
			}
		}
	}
}
