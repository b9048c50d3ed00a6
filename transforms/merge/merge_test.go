package merge

import (
	"encoding/binary"
	"testing"

	"github.com/topk-dev/topk/transforms/summary"
)

func encoded(t *testing.T, part uint64, counts map[string]uint64) []byte {
	t.Helper()
	c := summary.NewCounter(0)
	for it, n := range counts {
		c.Add(it, summary.Hash(it), n)
	}
	b, err := c.Summary(summary.Config{N: 16}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return append(binary.AppendUvarint(nil, part), b...)
}

func iter(vs [][]byte) func(*[]byte) bool {
	i := 0
	return func(b *[]byte) bool {
		if i == len(vs) {
			return false
		}
		*b = vs[i]
		i++
		return true
	}
}

// Two outputs of one partition (an on-time and a late pane) count disjoint
// events and add up; two partitions hold disjoint items and are united.
func TestMergePartitionsAddsPanesOfOnePartition(t *testing.T) {
	vs := [][]byte{
		encoded(t, 3, map[string]uint64{"a": 5, "b": 2}),
		encoded(t, 3, map[string]uint64{"a": 1}), // late pane of partition 3
		encoded(t, 7, map[string]uint64{"c": 4}),
	}
	sm, err := MergePartitions(iter(vs), 10)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"a": 6, "b": 2, "c": 4}
	if len(sm.Entries) != len(want) {
		t.Fatalf("entries %+v, want %v", sm.Entries, want)
	}
	for _, e := range sm.Entries {
		if e.Lo != want[e.Item] || e.Hi != want[e.Item] {
			t.Errorf("%s: [%d,%d], want exactly %d", e.Item, e.Lo, e.Hi, want[e.Item])
		}
	}
	if _, err := MergePartitions(iter([][]byte{{0x80}}), 10); err == nil {
		t.Error("a bad partition prefix was accepted")
	}
}
