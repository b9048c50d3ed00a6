// Package counter merges the pre-aggregator's partial summary sets into one
// set per partition and 10 s bucket: the panes the sliding windows
// (transforms/slide) are built from. Every step is the same merge of
// disjoint event sets (summary.MergeEvents), list by list, after a
// GroupByKey in fixed bucket windows.
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
// bucket window (plus late panes).
func Buckets(s beam.Scope, partials beam.PCollection, bucket, allowedLateness time.Duration) beam.PCollection {
	s = s.Scope("counter.Buckets")
	if bucket <= 0 || allowedLateness < 0 {
		panic(fmt.Sprintf("counter: bucket %v, lateness %v", bucket, allowedLateness))
	}
	w := beam.WindowInto(s, window.NewFixedWindows(bucket), partials,
		beam.AllowedLateness(allowedLateness), beam.PanesDiscard())
	return beam.ParDo(s, mergeSetsFn, beam.GroupByKey(s, w))
}

func init() {
	register.Function3x1[string, func(*[]byte) bool, func(string, []byte), error](mergeSetsFn)
	register.Iter1[[]byte]()
	register.Emitter2[string, []byte]()
}

// mergeSetsFn merges summary sets of disjoint event sets of one partition.
func mergeSetsFn(key string, values func(*[]byte) bool, emit func(string, []byte)) error {
	out, err := MergeSets(values)
	if err != nil {
		return fmt.Errorf("merge %q: %w", key, err)
	}
	if out != nil {
		emit(key, out)
	}
	return nil
}

// MergeSets decodes every summary set the iterator yields and merges them
// list by list (MergeEvents); the encoded result, nil if it yields none.
func MergeSets(values func(*[]byte) bool) ([]byte, error) {
	var (
		b      []byte
		n      int
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
		n++
		switch n {
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
	switch n {
	case 0:
		return nil, nil
	case 1:
		return first, nil // one pane: nothing to merge
	}
	keys := make([]string, 0, len(merged))
	sums := make([]*summary.Summary, 0, len(merged))
	for k, m := range merged {
		keys = append(keys, k)
		sums = append(sums, m.Result())
	}
	return summary.AppendSet(nil, keys, sums)
}
