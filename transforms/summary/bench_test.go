package summary

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/topk-dev/topk/internal/zipf"
)

// Benchmarks of the counting core's operations, on Zipf keys drawn with a
// fixed seed and built before the timer starts. BENCHMARKS.md ("Counting
// core") has the command and the numbers; peer_test.go compares the whole
// counting path with apache/datasketches-go.

// benchSkews are the exponents the accuracy tests use: flat, typical, steep.
var benchSkews = []float64{0.8, 1.1, 1.4}

const (
	benchUniverse = 1_000_000 // distinct items the Zipf draws range over
	bundleEvents  = 50_000    // events per bundle in the counting benchmarks
	minuteEvents  = 100_000   // events per minute summary in the merge benchmarks
)

// zipfKeys returns n item ids "i<rank>" drawn from Zipf(s) over universe
// ranks, the names streams.ZipfStream gives. Each id is its own string, as
// if decoded from a message, so popular keys are not shared in memory.
func zipfKeys(seed uint64, s float64, universe uint64, n int) []string {
	z := zipf.New(seed, s, universe)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "i" + strconv.FormatUint(z.Next(), 10)
	}
	return keys
}

// reportEvents reports events/s for a benchmark that handled perOp events
// in each of its b.N iterations.
func reportEvents(b *testing.B, perOp int) {
	b.ReportMetric(float64(b.N)*float64(perOp)/b.Elapsed().Seconds(), "events/s")
}

// countedSummary counts keys in a fresh counter and returns its summary.
func countedSummary(cfg Config, keys []string) *Summary {
	c := NewCounter(len(keys) + 1)
	for _, k := range keys {
		c.Add(k, Hash(k), 1)
	}
	return c.Summary(cfg)
}

// minuteSummaries returns n encoded summaries of DefaultConfig, each of
// minuteEvents Zipf(1.1) events with its own seed: the minutes of a sliding
// hour.
func minuteSummaries(b *testing.B, n int) [][]byte {
	out := make([][]byte, n)
	for m := range out {
		sm := countedSummary(DefaultConfig(), zipfKeys(uint64(1000+m), 1.1, benchUniverse, minuteEvents))
		enc, err := sm.MarshalBinary()
		if err != nil {
			b.Fatal(err)
		}
		out[m] = enc
	}
	return out
}

// BenchmarkCount is one bundle of the fast path: every event's key hashed
// once with Hash and counted in a reused Counter ("add"), and then the
// bundle's Summary built ("add+summary"). One op is a bundle of
// bundleEvents events; events/s is per core (one goroutine).
func BenchmarkCount(b *testing.B) {
	for _, s := range benchSkews {
		keys := zipfKeys(1, s, benchUniverse, bundleEvents)
		for _, withSummary := range []bool{false, true} {
			name := "add"
			if withSummary {
				name = "add+summary"
			}
			b.Run(fmt.Sprintf("%s/s=%v", name, s), func(b *testing.B) {
				cfg := DefaultConfig()
				c := NewCounter(DefaultMaxDistinct)
				for _, k := range keys { // warm the counter's buffers
					c.Add(k, Hash(k), 1)
				}
				b.ReportAllocs()
				for b.Loop() {
					c.Reset()
					for _, k := range keys {
						c.Add(k, Hash(k), 1)
					}
					if withSummary {
						_ = c.Summary(cfg)
					}
				}
				reportEvents(b, len(keys))
			})
		}
	}
}

// BenchmarkCounterSummary is Counter.Summary alone: a bundle's counts
// (distinct items, one to four events each) turned into its summary of N =
// 4,096 entries in key order, below N (every item kept), at it, and above
// it (the N biggest selected first). The pre-aggregation builds one per
// (list, partition) and bundle.
func BenchmarkCounterSummary(b *testing.B) {
	for _, distinct := range []int{1000, 4096, 20000} {
		b.Run(fmt.Sprintf("distinct=%d", distinct), func(b *testing.B) {
			cfg := DefaultConfig()
			c := NewCounter(DefaultMaxDistinct)
			for i := range distinct {
				k := "item" + strconv.Itoa(i)
				c.Add(k, Hash(k), uint64(1+i%4))
			}
			b.ReportAllocs()
			for b.Loop() {
				_ = c.Summary(cfg)
			}
		})
	}
}

// BenchmarkMergeEvents merges the summaries of two disjoint event sets (two
// minutes of Zipf(1.1) events, both with N = 4,096 entries).
func BenchmarkMergeEvents(b *testing.B) {
	cfg := DefaultConfig()
	x := countedSummary(cfg, zipfKeys(11, 1.1, benchUniverse, minuteEvents))
	y := countedSummary(cfg, zipfKeys(12, 1.1, benchUniverse, minuteEvents))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := MergeEvents(x, y); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMergeEventsCut is a window aggregate's merge in the sliding
// windows: two 10 s buckets' summaries (N = 4,096 of 20,000 Zipf(1.1)
// events each, so most entries count 1 or 2) merged and cut to 1,100
// entries (the aggregates' N, slide.Config.AggN), where the cut falls
// among thousands of entries tied at a small count.
func BenchmarkMergeEventsCut(b *testing.B) {
	cfg := DefaultConfig()
	x := countedSummary(cfg, zipfKeys(21, 1.1, benchUniverse, 20_000))
	y := countedSummary(cfg, zipfKeys(22, 1.1, benchUniverse, 20_000))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := MergeEventsN(x, y, 1100); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMergeEventsInto is BenchmarkMergeEventsCut into one reused
// summary (a window's answer, TwoStacks.QueryInto).
func BenchmarkMergeEventsInto(b *testing.B) {
	cfg := DefaultConfig()
	x := countedSummary(cfg, zipfKeys(21, 1.1, benchUniverse, 20_000))
	y := countedSummary(cfg, zipfKeys(22, 1.1, benchUniverse, 20_000))
	var dst Summary
	b.ReportAllocs()
	for b.Loop() {
		if err := MergeEventsInto(&dst, x, y, 1100); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWindowAnswer is a window's answer as the slide makes it: the
// front's and the back's aggregates (BenchmarkMergeEventsCut's sides, which
// dropped thousands of items and carry Drops) merged and cut to the list's
// 1,100 (K + margin, the default AggN too): "two-steps" is MergeEventsInto
// then TopInto, "one-cut" MergeEventsTopInto (no Drops made for an answer
// read once).
func BenchmarkWindowAnswer(b *testing.B) {
	cfg := DefaultConfig()
	x := countedSummary(cfg, zipfKeys(21, 1.1, benchUniverse, 20_000))
	y := countedSummary(cfg, zipfKeys(22, 1.1, benchUniverse, 20_000))
	if x.Dropped == nil || y.Dropped == nil {
		b.Fatal("the sides did not overflow: no Drops to skip")
	}
	b.Run("two-steps", func(b *testing.B) {
		var scratch, out Summary
		b.ReportAllocs()
		for b.Loop() {
			if err := MergeEventsInto(&scratch, x, y, 1100); err != nil {
				b.Fatal(err)
			}
			scratch.TopInto(&out, 1100, 0)
		}
	})
	b.Run("one-cut", func(b *testing.B) {
		var out Summary
		b.ReportAllocs()
		for b.Loop() {
			if err := MergeEventsTopInto(&out, x, y, 1100, 1100, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	// A partition's share of a list spread over 16 (slide.Config.PartLimit):
	// the cut falls among the ties of a small count.
	b.Run("one-cut-share", func(b *testing.B) {
		var out Summary
		b.ReportAllocs()
		for b.Loop() {
			if err := MergeEventsTopInto(&out, x, y, 1100, 276, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkMergerSlidingHour is the sliding hour's merge: 60 encoded minute
// summaries decoded and merged by one Merger. One op is the whole 60-way
// merge; summaries/s counts the minutes merged.
func BenchmarkMergerSlidingHour(b *testing.B) {
	encs := minuteSummaries(b, 60)
	b.ReportAllocs()
	for b.Loop() {
		var m Merger
		for _, enc := range encs {
			if err := m.AddEncoded(enc); err != nil {
				b.Fatal(err)
			}
		}
		_ = m.Result()
	}
	b.ReportMetric(float64(b.N)*float64(len(encs))/b.Elapsed().Seconds(), "summaries/s")
}

// BenchmarkAnswer ranks the sliding hour's merged summary and reads the top
// 1,000 plus a margin of 100.
func BenchmarkAnswer(b *testing.B) {
	var m Merger
	for _, enc := range minuteSummaries(b, 60) {
		if err := m.AddEncoded(enc); err != nil {
			b.Fatal(err)
		}
	}
	sm := m.Result()
	b.ReportAllocs()
	for b.Loop() {
		if ans := sm.Answer(1100); len(ans.Entries) != 1100 {
			b.Fatalf("answer has %d entries, want 1100", len(ans.Entries))
		}
	}
}

// BenchmarkMarshalBinary encodes a full minute summary (N = 4,096, no
// sketch); MB/s is of encoded bytes.
func BenchmarkMarshalBinary(b *testing.B) {
	sm := countedSummary(DefaultConfig(), zipfKeys(21, 1.1, benchUniverse, minuteEvents))
	enc, err := sm.MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := sm.MarshalBinary(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUnmarshal decodes a full minute summary: "new" into a fresh
// Summary (Unmarshal), "reuse" into one scratch Summary (UnmarshalBinary,
// as Merger does), "aliased" into a fresh one whose items share the
// encoding's bytes (UnmarshalAliased, the sliding windows' packed panes).
func BenchmarkUnmarshal(b *testing.B) {
	sm := countedSummary(DefaultConfig(), zipfKeys(21, 1.1, benchUniverse, minuteEvents))
	enc, err := sm.MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("new", func(b *testing.B) {
		b.SetBytes(int64(len(enc)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Unmarshal(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("aliased", func(b *testing.B) {
		b.SetBytes(int64(len(enc)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := UnmarshalAliased(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reuse", func(b *testing.B) {
		var scratch Summary
		b.SetBytes(int64(len(enc)))
		b.ReportAllocs()
		for b.Loop() {
			if err := scratch.UnmarshalBinary(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDropsEncoding: a busy bucket's sketch of dropped counts
// (busyBucketDrops: the planes form) encoded and decoded alone.
func BenchmarkDropsEncoding(b *testing.B) {
	d := busyBucketDrops()
	enc := d.appendBinary(nil)
	b.Run("encode", func(b *testing.B) {
		buf := make([]byte, 0, 70<<10)
		for b.Loop() {
			buf = d.appendBinary(buf[:0])
		}
		b.ReportMetric(float64(len(buf)), "bytes")
	})
	b.Run("decode", func(b *testing.B) {
		out := NewDrops()
		for b.Loop() {
			dec := decoder{data: enc}
			if dec.readDrops(out); dec.err != nil {
				b.Fatal(dec.err)
			}
		}
	})
}
