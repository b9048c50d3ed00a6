package slide

import (
	"testing"
	"time"

	"github.com/topk-dev/topk/transforms/summary"
)

// BenchmarkStateTwoHours: one (list, partition) whose every bucket is full
// (fullBucket, as TestStateMemoryFull: N = 4,096 items a bucket, three
// quarters of them new), at the fast path's cuts (minutes and aggregates at 1,100),
// through two hours of 10 s slides of the 1m, 5m and 1h windows. One op is
// the two hours: B/op is what the windows allocate for one busy list's
// partition in that time (the 1h window's two-stacks flips once, at the
// hour; the 5m window's every 5 minutes).
func BenchmarkStateTwoHours(b *testing.B) {
	const n, hours = 4096, 2
	cfg := summary.Config{N: n}
	t0 := int64(1_780_000_000_000) - int64(1_780_000_000_000)%3_600_000
	buckets := make([]*summary.Summary, hours*360)
	c := summary.NewCounter(0)
	for k := range buckets {
		buckets[k] = fullBucket(c, cfg, 1, int64(k))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		st := NewState(Config{Bucket: 10 * time.Second, Windows: testWindows, Limit: 1100, UpperN: 1100, AggN: 1100})
		st.ShareResults = true
		for k, sm := range buckets {
			at := t0 + int64(k)*bucketMs
			if _, err := st.Add("video\x00global", at, sm); err != nil {
				b.Fatal(err)
			}
			if err := st.Fire(at+bucketMs, func(Result) error { return nil }, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
}
