package summary

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/topk-dev/topk/internal/topn"
)

// refTop is the cut as it was made before cutTop: drop entries below floor,
// select the first n in rank order, sort back into key order.
func refTop(es []Entry, n int, floor uint64) ([]Entry, uint64) {
	var out []Entry
	var dropped uint64
	for _, e := range es {
		if e.Hi < floor {
			dropped = max(dropped, e.Hi)
			continue
		}
		out = append(out, e)
	}
	if n > 0 && len(out) > n {
		topn.Select(out, n, cmpRank)
		for _, e := range out[n:] {
			dropped = max(dropped, e.Hi)
		}
		out = out[:n]
		slices.SortFunc(out, cmpKey)
	}
	return out, dropped
}

// cutTop keeps exactly the entries and the dropped bound the old
// select-then-sort did, in key order, with heavy ties at the cut.
func TestCutTopEqualsSelectSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	for trial := range 400 {
		size := rng.IntN(300)
		maxHi := uint64(1 + rng.IntN(20)) // few distinct counts: many ties
		var es []Entry
		for i := range size {
			item := fmt.Sprintf("i%d", i)
			hi := 1 + rng.Uint64N(maxHi)
			lo := rng.Uint64N(hi + 1)
			es = append(es, Entry{Item: item, Hash: Hash(item), Lo: lo, Hi: hi})
		}
		slices.SortFunc(es, cmpKey)
		n := rng.IntN(size+5) - 2
		floor := uint64(0)
		if trial%2 == 1 {
			floor = rng.Uint64N(maxHi + 2)
		}
		want, wantDrop := refTop(slices.Clone(es), n, floor)
		got, gotDrop := cutTop(nil, es, n, floor, nil)
		if !slices.Equal(got, want) || gotDrop != wantDrop {
			t.Fatalf("trial %d (size %d n %d floor %d): got %d entries dropped %d, want %d dropped %d", trial, size, n, floor, len(got), gotDrop, len(want), wantDrop)
		}
		cp := slices.Clone(es)
		inPlace, inDrop := cutTop(cp[:0], cp, n, floor, nil)
		if !slices.Equal(inPlace, want) || inDrop != wantDrop {
			t.Fatalf("trial %d: in place differs", trial)
		}
	}
}

// cutTop's ties at the cut are ranked by item where distinct items share
// a hash (forced here: few hash values), as the select-then-sort did.
func TestCutTopSharedHashes(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 7))
	for trial := range 300 {
		size := 1 + rng.IntN(200)
		var es []Entry
		for i := range size {
			hi := 1 + rng.Uint64N(3)
			es = append(es, Entry{Item: fmt.Sprintf("i%d", i), Hash: rng.Uint64N(1 + uint64(trial%7)), Lo: rng.Uint64N(2), Hi: hi})
		}
		slices.SortFunc(es, cmpKey)
		n := 1 + rng.IntN(size)
		want, wantDrop := refTop(slices.Clone(es), n, 0)
		got, gotDrop := cutTop(nil, es, n, 0, nil)
		if !slices.Equal(got, want) || gotDrop != wantDrop {
			t.Fatalf("trial %d (size %d n %d): got %d entries dropped %d, want %d dropped %d", trial, size, n, len(got), gotDrop, len(want), wantDrop)
		}
	}
}

// BenchmarkCut: a merged minute summary (N = 4,096 over Zipf 1.1) cut to
// a list's 1,100 entries at a minimum count of 3, as the sliding windows
// cut every window result; "select-sort" is the cut before cutTop.
func BenchmarkCut(b *testing.B) {
	cfg := DefaultConfig()
	x := countedSummary(cfg, zipfKeys(11, 1.1, benchUniverse, minuteEvents))
	y := countedSummary(cfg, zipfKeys(12, 1.1, benchUniverse, minuteEvents))
	sm, err := MergeEvents(x, y)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("cutTop", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			cutTop(make([]Entry, 0, 1100), sm.Entries, 1100, 3, nil)
		}
	})
	b.Run("select-sort", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			refTop(sm.Entries, 1100, 3)
		}
	})
}

func TestNthLargest(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for trial := range 500 {
		xs := make([]uint64, 1+rng.IntN(400))
		spread := 1 + rng.Uint64N(uint64(1+trial))
		for i := range xs {
			xs[i] = rng.Uint64N(spread)
		}
		sorted := slices.Clone(xs)
		slices.Sort(sorted)
		n := 1 + rng.IntN(len(xs))
		if got, want := nthLargest(xs, n), sorted[len(sorted)-n]; got != want {
			t.Fatalf("trial %d: %d-th largest of %d: %d, want %d", trial, n, len(xs), got, want)
		}
	}
}

// An item in two parts is listed once, the higher-ranked entry kept.
func TestUnionListsAnItemOnce(t *testing.T) {
	enc := func(counts map[string]uint64) []byte {
		c := NewCounter(0)
		for it, n := range counts {
			c.Add(it, Hash(it), n)
		}
		b, err := c.Summary(Config{N: 10}).MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var u Union
	for _, b := range [][]byte{enc(map[string]uint64{"a": 5, "b": 3}), enc(map[string]uint64{"a": 7, "c": 1}), enc(map[string]uint64{"b": 3})} {
		if err := u.AddEncoded(b); err != nil {
			t.Fatal(err)
		}
	}
	ans := u.Answer(10)
	var got []string
	for _, e := range ans.Entries {
		got = append(got, fmt.Sprintf("%s=%d", e.Item, e.Hi))
	}
	if want := []string{"a=7", "b=3", "c=1"}; !slices.Equal(got, want) {
		t.Fatalf("answer %v, want %v", got, want)
	}
}

// BenchmarkCutTies: a partition's window result as most lists' are (1,100
// entries, nearly all counted once or twice) cut to its share of a list
// over 16 partitions (276): the cut falls among hundreds of ties.
func BenchmarkCutTies(b *testing.B) {
	rng := rand.New(rand.NewPCG(8, 8))
	var es []Entry
	for i := range 1100 {
		item := fmt.Sprintf("#tag%d", i)
		hi := uint64(1)
		switch r := rng.IntN(100); {
		case r < 10:
			hi = 3 + rng.Uint64N(50)
		case r < 40:
			hi = 2
		}
		es = append(es, Entry{Item: item, Hash: Hash(item), Lo: hi - rng.Uint64N(2)*min(hi, 1), Hi: hi})
	}
	slices.SortFunc(es, cmpKey)
	dst := make([]Entry, 0, 1100)
	b.ReportAllocs()
	for b.Loop() {
		dst, _ = cutTop(dst[:0], es, 276, 0, nil)
	}
}
