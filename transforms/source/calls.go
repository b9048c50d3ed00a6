package source

import "time"

// # How long a call emits
//
// Each call of an unbounded reader (one bundle, fused with the
// pre-aggregation) ends in a checkpoint, and every checkpoint costs the
// job a pre-aggregation flush: a partial summary per (list, partition)
// the call's events touched and a users tally per list, each of which
// crosses the runner and is merged downstream. With every scope on, that
// is a fixed cost per call of roughly the number of lists, whatever the
// event rate, and most of the job's cost at low rates (BENCHMARKS.md,
// "Calls that end where a bucket closes").
//
// A list changes only when the watermark passes the end of an event-time
// bucket (Options.Bucket, the pre-aggregation's: 10 s): output reaching
// the windows earlier waits there for that moment. So a call need only
// end when its checkpoint can move the watermark past a bucket boundary
// the previous one did not pass: the reader's checkpoints follow the
// buckets, not a fixed BundleTime.
//
//   - When the reader's next watermark may pass the next boundary B (its
//     data, stamped close to the wall clock, has reached B + slack, the
//     watermark's lag behind it), the call checkpoints after BundleTime,
//     as every call did before: the bucket closes as soon as it did.
//   - Otherwise no checkpoint before B + slack can close anything: the
//     call runs until then (at most one bucket), so that the next call
//     starts when a close is due; it also ends once it has run BundleTime
//     and holds maxCallBytes (a high rate).
//
// The synthetic source's watermark is the wall clock at the checkpoint
// (slack 0): its calls end at each boundary, one per bucket, and the
// bucket closes at once. The Pub/Sub reader's is its call's oldest event
// time minus Slack (pullEstimator): a long call up to B + Slack, then
// calls of BundleTime until one's oldest event is past B + Slack, about
// three calls per bucket instead of ten, each closing a bucket when a
// call of BundleTime did. Without the recovery log its messages are acked
// when the next call starts, so a long call also ends within a third of
// the subscription's ack deadline (4 calls a bucket at Pub/Sub's shortest,
// 10 s). A reader behind its data (a backlog: the watermark far behind
// the wall clock) is always due, so it keeps BundleTime calls. The file source (a replay: one BundleTime covers
// minutes of event time) and Dataflow's native read (its bundles are the
// runner's) are unchanged.

// maxCallBytes also ends a synthetic or Pub/Sub call that has run for
// BundleTime (full): at high rates a call of a whole bucket would hold
// seconds of the pre-aggregation's output until it ends and then flush it
// all after the boundary, where calls of BundleTime had flushed most of it
// before (at 200k events/s the 1m lists' lag went from 3.9 to 8.0 s at the
// median). 8 MiB is about a second at 200k synthetic events/s (37 bytes
// each) and 10 s at 20k: calls are BundleTime long at high rates, as they
// were, and a bucket long at low ones.
const maxCallBytes = 8 << 20

// full reports whether a call that started at start and has read bytes
// should end now (maxCallBytes).
func full(start, now time.Time, bytes int, bundleTime time.Duration) bool {
	return bytes >= maxCallBytes && now.Sub(start) >= bundleTime
}

// callEnd is when a call that starts at start (wall clock) checkpoints,
// given wm, the watermark the reader last reported (Unix ms), the bucket
// (0: no buckets, every call is bundleTime long) and the reader's
// watermark slack behind its data clock. due reports that a close is due,
// so the call is bundleTime long; otherwise it runs until a close is due
// (at most one bucket).
func callEnd(start time.Time, wm int64, bucket, slack, bundleTime time.Duration) (end time.Time, due bool) {
	short := start.Add(bundleTime)
	b := bucket.Milliseconds()
	if b <= 0 {
		return short, true
	}
	next := floorMs(wm, b) + b // the first boundary the watermark has not passed
	at := time.UnixMilli(next).Add(slack)
	if !start.Before(at) {
		return short, true
	}
	// Nothing can close before at; at most one bucket (a watermark ahead of
	// this clock, from skewed producers, must not hold a call for long).
	if limit := start.Add(bucket); limit.Before(at) {
		return limit, false
	}
	return at, false
}

// floorMs is t rounded down to a multiple of b (b > 0), for negative t too.
func floorMs(t, b int64) int64 { return t - ((t%b)+b)%b }
