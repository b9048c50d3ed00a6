package counter

import (
	"fmt"
	"testing"

	"github.com/topk-dev/topk/transforms/summary"
)

// counted builds the partial summary a pre-aggregation flush makes of
// counts, cut to n entries.
func counted(t *testing.T, counts map[string]uint64, n int) *summary.Summary {
	t.Helper()
	c := summary.NewCounter(1 << 10)
	for item, k := range counts {
		c.Add(item, summary.Hash(item), k)
	}
	return c.Summary(summary.Config{N: n})
}

// set encodes one summary set of the given lists.
func set(t *testing.T, lists map[string]*summary.Summary) []byte {
	t.Helper()
	var keys []string
	var sums []*summary.Summary
	for k, sm := range lists {
		keys, sums = append(keys, k), append(sums, sm)
	}
	b, err := summary.AppendSet(nil, keys, sums)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// iter yields sets as a GroupByKey's values do.
func iter(sets [][]byte) func(*[]byte) bool {
	i := 0
	return func(b *[]byte) bool {
		if i == len(sets) {
			return false
		}
		*b = sets[i]
		i++
		return true
	}
}

// decode reads a merged set back, by list.
func decode(t *testing.T, b []byte) map[string]*summary.Summary {
	t.Helper()
	out := map[string]*summary.Summary{}
	if err := summary.EachInSet(b, func(k string, data []byte) error {
		sm, err := summary.Unmarshal(data)
		out[k] = sm
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMergeSetsCutsOnce: x is seen 3 times in each of three bundles of a
// bucket, below each bundle's two biggest items (5 and 4, seen in that
// bundle only) but first in the bucket (9). Merged from uncut partials and
// cut to n = 2 once, the bucket's summary keeps x exactly, with N = 2 and
// bounds that hold for every item; merged from partials each cut to 2 (as
// bundles were cut before), x is lost: the reason for the cut once.
func TestMergeSetsCutsOnce(t *testing.T) {
	const n = 2
	exact := map[string]uint64{}
	var bundles []map[string]uint64
	for i := range 3 {
		b := map[string]uint64{"x": 3, fmt.Sprintf("a%d", i): 5, fmt.Sprintf("b%d", i): 4}
		for k, v := range b {
			exact[k] += v
		}
		bundles = append(bundles, b)
	}
	merge := func(partialN int) *summary.Summary {
		var sets [][]byte
		for _, b := range bundles {
			sets = append(sets, set(t, map[string]*summary.Summary{"video\x00global": counted(t, b, partialN)}))
		}
		out, err := MergeSets(iter(sets), n)
		if err != nil {
			t.Fatal(err)
		}
		return decode(t, out)["video\x00global"]
	}

	sm := merge(1 << 10)
	if sm.N != n || len(sm.Entries) != n || sm.Total != 36 {
		t.Fatalf("cut once: N %d, %d entries, total %d; want N %d, %d entries, total 36", sm.N, len(sm.Entries), sm.Total, n, n)
	}
	x := sm.Find("x")
	if x == nil || x.Lo != 9 || x.Hi != 9 {
		t.Fatalf("cut once: x is %+v, want tracked with lo = hi = 9", x)
	}
	for item, c := range exact {
		if e := sm.Find(item); e != nil && (e.Lo > c || e.Hi < c) {
			t.Errorf("cut once: %s: [%d, %d] does not hold %d", item, e.Lo, e.Hi, c)
		} else if e == nil && sm.Theta < c {
			t.Errorf("cut once: untracked %s (%d) above theta %d", item, c, sm.Theta)
		}
	}

	if old := merge(n); old.Find("x") != nil {
		t.Fatalf("cut per bundle: x is still tracked (%+v): this test no longer tells the two apart", old.Find("x"))
	}
}

// TestMergeSetsOnePartial: a bucket of one partial is passed through when
// it already has the bucket's size and cut to it when larger.
func TestMergeSetsOnePartial(t *testing.T) {
	counts := map[string]uint64{"a": 7, "b": 5, "c": 2, "d": 1}
	small := set(t, map[string]*summary.Summary{"k": counted(t, counts, 2)})
	out, err := MergeSets(iter([][]byte{small}), 2)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != string(small) {
		t.Fatalf("a partial of the bucket's size was re-encoded")
	}
	out, err = MergeSets(iter([][]byte{set(t, map[string]*summary.Summary{"k": counted(t, counts, 100)})}), 2)
	if err != nil {
		t.Fatal(err)
	}
	sm := decode(t, out)["k"]
	if sm.N != 2 || len(sm.Entries) != 2 || sm.Theta != 2 || sm.Find("a") == nil || sm.Find("b") == nil {
		t.Fatalf("one large partial: N %d, entries %+v, theta %d; want N 2, a and b, theta 2", sm.N, sm.Entries, sm.Theta)
	}
	if out, err := MergeSets(iter(nil), 2); out != nil || err != nil {
		t.Fatalf("no partials: %v, %v; want nil, nil", out, err)
	}
	if _, err := MergeSets(iter([][]byte{[]byte("not a set")}), 2); err == nil {
		t.Fatal("a corrupt partial merged without an error")
	}
}
