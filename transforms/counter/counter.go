// Package counter turns the pre-aggregator's partial summaries into bucket
// summaries and sliding-window summaries per (list, partition). Every step is
// the same merge of disjoint event sets (summary.MergeEvents) after a
// GroupByKey in the step's windows; sliding windows copy summaries, never
// events, so a one-hour window sliding by a minute copies sixty minute
// summaries per partition.
//
// Lateness is decided at the bucket step: its fixed windows allow
// Config.AllowedLateness, and a late pane carries only the late summaries
// (discarding mode), which the sliding windows downstream merge as one more
// disjoint event set in every window that has not fired yet. The sliding
// steps allow no lateness of their own, so a list that has been published is
// never republished with partial contents.
package counter

import (
	"fmt"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/topk-dev/topk/transforms/summary"
)

// Buckets merges partial summaries (KV<string, []byte>, timestamped within
// their bucket) into one summary per key and fixed bucket window.
func Buckets(s beam.Scope, partials beam.PCollection, bucket, allowedLateness time.Duration) beam.PCollection {
	s = s.Scope("counter.Buckets")
	if bucket <= 0 || allowedLateness < 0 {
		panic(fmt.Sprintf("counter: bucket %v, lateness %v", bucket, allowedLateness))
	}
	w := beam.WindowInto(s, window.NewFixedWindows(bucket), partials,
		beam.AllowedLateness(allowedLateness), beam.PanesDiscard())
	return MergeGrouped(s, beam.GroupByKey(s, w))
}

// Fixed merges summaries into one per key and fixed window of size d (the
// minute summaries that feed the hour).
func Fixed(s beam.Scope, summaries beam.PCollection, d time.Duration) beam.PCollection {
	s = s.Scope("counter.Fixed")
	if d <= 0 {
		panic(fmt.Sprintf("counter: window %v", d))
	}
	w := beam.WindowInto(s, window.NewFixedWindows(d), summaries, beam.PanesDiscard())
	return MergeGrouped(s, beam.GroupByKey(s, w))
}

// Sliding merges summaries into one per key and sliding window of the given
// length, emitted every period.
func Sliding(s beam.Scope, summaries beam.PCollection, length, period time.Duration) beam.PCollection {
	s = s.Scope("counter.Sliding")
	if period <= 0 || length < period || length%period != 0 {
		panic(fmt.Sprintf("counter: sliding window %v every %v", length, period))
	}
	w := beam.WindowInto(s, window.NewSlidingWindows(period, length), summaries, beam.PanesDiscard())
	return MergeGrouped(s, beam.GroupByKey(s, w))
}

// MergeGrouped merges each key's grouped summaries (KV<string,
// iter<[]byte>>) into one (KV<string, []byte>).
func MergeGrouped(s beam.Scope, grouped beam.PCollection) beam.PCollection {
	return beam.ParDo(s.Scope("counter.MergeEvents"), mergeEventsFn, grouped)
}

func init() {
	register.Function3x1[string, func(*[]byte) bool, func(string, []byte), error](mergeEventsFn)
	register.Iter1[[]byte]()
	register.Emitter2[string, []byte]()
}

// mergeEventsFn merges summaries of disjoint event sets of one key.
func mergeEventsFn(key string, values func(*[]byte) bool, emit func(string, []byte)) error {
	acc, err := MergeAll(values)
	if err != nil {
		return fmt.Errorf("merge %q: %w", key, err)
	}
	if acc == nil {
		return nil
	}
	out, err := acc.MarshalBinary()
	if err != nil {
		return fmt.Errorf("merge %q: encode: %w", key, err)
	}
	emit(key, out)
	return nil
}

// MergeAll decodes and merges (MergeEvents) every summary the iterator
// yields; nil if it yields none.
func MergeAll(values func(*[]byte) bool) (*summary.Summary, error) {
	var m summary.Merger
	var b []byte
	for values(&b) {
		if err := m.AddEncoded(b); err != nil {
			return nil, err
		}
	}
	return m.Result(), nil
}
