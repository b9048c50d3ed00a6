// Package counter merges the pre-aggregator's partial summary sets into one
// set per partition and 10 s bucket: the panes the sliding windows
// (transforms/slide) are built from. Every step is the same merge of
// disjoint event sets (summary.MergeEvents), list by list, after a
// GroupByKey in fixed bucket windows.
//
// The partials come larger than a bucket's summary (preagg.Config.PartialN,
// 8N per list and partition by default) and are merged at that size;
// the result is cut to the bucket's N once, at the end. Cut per bundle
// instead, an item below the cut in every bundle of a bucket but above it
// in the whole was lost, and live, where a 10 s bucket spans many 1 s
// bundles, recall fell well below what one bundle a bucket gives
// (BENCHMARKS.md "Cut once per bucket").
//
// Lateness is decided here: the bucket windows allow Config.AllowedLateness,
// and a late pane carries only the late summaries (discarding mode), which
// the windows downstream merge as one more disjoint event set into their
// bucket and into every window that has not slid past it yet.
package counter

import (
	"fmt"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/topk-dev/topk/transforms/summary"
)

// Buckets merges partial summary sets (KV<partition, summary set>,
// timestamped within their bucket) into one set per partition and fixed
// bucket window (plus late panes), each list's summary cut to n entries.
func Buckets(s beam.Scope, partials beam.PCollection, bucket, allowedLateness time.Duration, n int) beam.PCollection {
	s = s.Scope("counter.Buckets")
	if bucket <= 0 || allowedLateness < 0 || n < 1 || n > summary.MaxN {
		panic(fmt.Sprintf("counter: bucket %v, lateness %v, n %d", bucket, allowedLateness, n))
	}
	w := beam.WindowInto(s, window.NewFixedWindows(bucket), partials,
		beam.AllowedLateness(allowedLateness), beam.PanesDiscard())
	return beam.ParDo(s, &mergeSetsFn{N: n}, beam.GroupByKey(s, w))
}

func init() {
	register.DoFn3x1[string, func(*[]byte) bool, func(string, []byte), error](&mergeSetsFn{})
	register.Iter1[[]byte]()
	register.Emitter2[string, []byte]()
}

// mergeSetsFn merges summary sets of disjoint event sets of one partition
// and cuts each list's summary to N.
type mergeSetsFn struct {
	N int
}

func (fn *mergeSetsFn) ProcessElement(key string, values func(*[]byte) bool, emit func(string, []byte)) error {
	out, err := MergeSets(values, fn.N)
	if err != nil {
		return fmt.Errorf("merge %q: %w", key, err)
	}
	if out != nil {
		emit(key, out)
	}
	return nil
}

// MergeSets decodes every summary set the iterator yields and merges them
// list by list (MergeEvents, at the partials' own size), then cuts each
// list's result to n entries (summary.Cut); the encoded result, nil if it
// yields none.
func MergeSets(values func(*[]byte) bool, n int) ([]byte, error) {
	var (
		b      []byte
		count  int
		first  []byte
		merged = map[string]*summary.Merger{}
	)
	add := func(set []byte) error {
		return summary.EachInSet(set, func(list string, sm []byte) error {
			m := merged[list]
			if m == nil {
				m = new(summary.Merger)
				merged[list] = m
			}
			return m.AddEncoded(sm)
		})
	}
	for values(&b) {
		count++
		switch count {
		case 1:
			first = append(first[:0], b...) // the iterator may reuse b
			continue
		case 2:
			if err := add(first); err != nil {
				return nil, err
			}
		}
		if err := add(b); err != nil {
			return nil, err
		}
	}
	switch count {
	case 0:
		return nil, nil
	case 1:
		// One partial: nothing to merge, only to cut where it is larger.
		if !cutNeeded(first, n) {
			return first, nil
		}
		if err := add(first); err != nil {
			return nil, err
		}
	}
	keys := make([]string, 0, len(merged))
	sums := make([]*summary.Summary, 0, len(merged))
	for k, m := range merged {
		sm := m.Result()
		sm.Cut(n)
		keys = append(keys, k)
		sums = append(sums, sm)
	}
	return summary.AppendSet(nil, keys, sums)
}

// cutNeeded tells whether any summary of the set has a capacity other than
// n (a corrupt set says yes: the decode that follows reports it).
func cutNeeded(set []byte, n int) bool {
	cut := false
	err := summary.EachInSet(set, func(_ string, sm []byte) error {
		if c, err := summary.EncodedN(sm); err != nil || c != n {
			cut = true
		}
		return nil
	})
	return cut || err != nil
}
