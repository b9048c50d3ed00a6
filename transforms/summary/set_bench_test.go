package summary

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkAppendSet encodes a set as a pre-aggregation flush ships one: 60
// lists' summaries of 20 to 4,000 entries (ns/op per set; MB/s of the
// encoding), into a reused buffer as preagg's flush does, or into a new
// one as counter.MergeSets and the windows' panes do.
func BenchmarkAppendSet(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	var keys []string
	var sums []*Summary
	for l := range 60 {
		n := 20 + r.IntN(4000)
		c := NewCounter(n)
		for i := range n {
			it := fmt.Sprintf("item-%d-%d", l, i)
			c.Add(it, Hash(it), uint64(1+r.IntN(50)))
		}
		keys = append(keys, fmt.Sprintf("video\x00scope%02d", l))
		sums = append(sums, c.Summary(Config{N: n}))
	}
	buf, err := AppendSet(nil, keys, sums)
	if err != nil {
		b.Fatal(err)
	}
	for _, reuse := range []bool{true, false} {
		b.Run(fmt.Sprintf("reused=%v", reuse), func(b *testing.B) {
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for range b.N {
				dst := buf[:0] // the pre-aggregation's flush
				if !reuse {
					dst = nil // counter.MergeSets', the windows' panes
				}
				if _, err := AppendSet(dst, keys, sums); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
