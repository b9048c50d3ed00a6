// Package counter turns the pre-aggregator's partial summaries into bucket
// summaries and sliding-window summaries per (list, partition). Every step is
// the same merge of disjoint event sets (summary.MergeEvents) after a
// GroupByKey in the step's windows; sliding windows copy summaries, never
// events, so a one-hour window sliding by a minute copies sixty minute
// summaries per partition.
//
// Lateness is decided at the bucket step: its fixed windows allow
// Config.AllowedLateness, and a late pane carries only the late summaries
// (discarding mode), which the steps downstream merge as one more disjoint
// event set in every window that has not fired yet: Fixed keeps its input's
// allowed lateness, so a late bucket reaches the hour windows through a
// minute that already fired. The sliding steps allow no lateness of their
// own, so a list that has been published is never republished with partial
// contents.
//
// Sliding windows are built by copying, not with Beam's SlidingWindows: each
// summary is copied to the end of every window that holds it and grouped in
// fixed windows of one period. With SlidingWindows, Prism holds a GroupByKey's
// output watermark at its earliest pending element, and a summary waits in
// the later windows that hold it, so every downstream step of the window (the
// list merge) fired (length - period) after the window's end (50 s for 1m,
// 59 min for 1h); meanwhile a late summary reaching a window that had already
// fired was not dropped (Prism drops against that held watermark) but fired
// a second pane, which the list merge (summary.MergeKeys) took for another
// partition: an item in both panes kept one count, an under-count. A copy
// waits only for its own window.
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
// minute summaries that feed the hour). It keeps the allowed lateness of its
// input's windows: a late pane of a bucket whose minute already fired makes
// a late pane of the minute.
func Fixed(s beam.Scope, summaries beam.PCollection, d time.Duration) beam.PCollection {
	s = s.Scope("counter.Fixed")
	if d <= 0 {
		panic(fmt.Sprintf("counter: window %v", d))
	}
	lateness := time.Duration(summaries.WindowingStrategy().AllowedLateness) * time.Millisecond
	w := beam.WindowInto(s, window.NewFixedWindows(d), summaries, beam.AllowedLateness(lateness), beam.PanesDiscard())
	return MergeGrouped(s, beam.GroupByKey(s, w))
}

// Sliding merges summaries into one per key and sliding window of the given
// length, emitted every period. The sliding window [end-length, end) comes
// out in the fixed window [end-period, end): use its end (the list's as_of),
// not its start.
func Sliding(s beam.Scope, summaries beam.PCollection, length, period time.Duration) beam.PCollection {
	s = s.Scope("counter.Sliding")
	if period <= 0 || length < period || length%period != 0 || period%time.Millisecond != 0 {
		panic(fmt.Sprintf("counter: sliding window %v every %v", length, period))
	}
	copies := beam.ParDo(s, &slideFn{LengthMs: length.Milliseconds(), PeriodMs: period.Milliseconds()}, summaries)
	w := beam.WindowInto(s, window.NewFixedWindows(period), copies, beam.PanesDiscard())
	return MergeGrouped(s, beam.GroupByKey(s, w))
}

// slideFn copies a summary to the last millisecond of every sliding window
// (epoch-aligned, as Beam's) that holds its timestamp.
type slideFn struct {
	LengthMs, PeriodMs int64
}

func (fn *slideFn) ProcessElement(ts beam.EventTime, key string, sm []byte, emit func(beam.EventTime, string, []byte)) {
	for _, end := range windowEnds(int64(ts), fn.LengthMs, fn.PeriodMs) {
		emit(beam.EventTime(end-1), key, sm)
	}
}

// windowEnds are the ends (Unix ms) of the epoch-aligned sliding windows
// [end-length, end), one every period, that hold t: the multiples of period
// in (t, t+length].
func windowEnds(t, length, period int64) []int64 {
	m := t % period
	if m < 0 {
		m += period
	}
	var ends []int64
	for end := t - m + period; end <= t+length; end += period {
		ends = append(ends, end)
	}
	return ends
}

// MergeGrouped merges each key's grouped summaries (KV<string,
// iter<[]byte>>) into one (KV<string, []byte>).
func MergeGrouped(s beam.Scope, grouped beam.PCollection) beam.PCollection {
	return beam.ParDo(s.Scope("counter.MergeEvents"), mergeEventsFn, grouped)
}

func init() {
	register.Function3x1[string, func(*[]byte) bool, func(string, []byte), error](mergeEventsFn)
	register.DoFn4x0[beam.EventTime, string, []byte, func(beam.EventTime, string, []byte)](&slideFn{})
	register.Iter1[[]byte]()
	register.Emitter2[string, []byte]()
	register.Emitter3[beam.EventTime, string, []byte]()
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
