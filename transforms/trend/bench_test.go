package trend

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// fullScorer returns a scorer at the default cap whose items have a full
// week of hourly history (the state's worst case) and 1,100-entry Zipf
// inputs to continue with, built with a fixed seed.
func fullScorer(b *testing.B) (*Scorer, func(i int) Input) { return scorerWithHours(b, 0) }

// scorerWithHours is fullScorer with hours of history (0: a full week).
func scorerWithHours(b *testing.B, hours int) (*Scorer, func(i int) Input) {
	cfg := DefaultConfig()
	cfg.WarmUp = 0
	sc := New("video", "global", cfg)
	rng := rand.New(rand.NewPCG(1, 2))
	const universe, listLen = 2500, 1100
	names := make([]string, universe)
	for i := range names {
		names[i] = fmt.Sprintf("v_%05d", i)
	}
	mk := func(at time.Time) Input {
		in := Input{AsOf: at, Total: 5_000_000}
		// Zipf-like counts with a random rotation of who is near the cut,
		// so that the tracked set reaches the cap.
		off := rng.IntN(universe)
		for r := 0; r < listLen; r++ {
			in.Items = append(in.Items, Count{Item: names[(r*7+off*(r/500))%universe], Count: uint64(400_000/(r+1) + 50)})
		}
		return in
	}
	at := t0
	if hours == 0 {
		hours = cfg.Hours
	}
	for h := 0; h < hours; h++ {
		at = at.Add(time.Hour)
		if _, err := sc.Step(context.Background(), mk(at), nil); err != nil {
			b.Fatal(err)
		}
	}
	inputs := make([]Input, 64)
	for i := range inputs {
		inputs[i] = mk(at)
	}
	return sc, func(i int) Input {
		in := inputs[i%len(inputs)]
		in.AsOf = at.Add(time.Duration(i+1) * time.Minute)
		return in
	}
}

// BenchmarkStep: one list scored (Observe + List) at the cap with full
// history; reports tracked items and the state's bytes per item.
func BenchmarkStep(b *testing.B) {
	sc, input := fullScorer(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := sc.Step(context.Background(), input(i), nil); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	raw, _ := sc.MarshalBinary()
	b.ReportMetric(float64(sc.Len()), "items")
	b.ReportMetric(float64(len(raw))/float64(sc.Len()), "state-B/item")
}

// BenchmarkStateRoundTrip: what the Beam wrapper pays per firing besides
// scoring: decode the state, encode it again; with a full week of
// history, and with 3 hours (a young list, or a replay's first hours:
// most hourly slots empty). "whole" is the whole state (MarshalBinary:
// a scorer's first score of an hour, and before the split), "minute" the
// minute state of the other scores of the hour (MarshalSplit, split.go).
func BenchmarkStateRoundTrip(b *testing.B) {
	for _, hours := range []int{0, 3} {
		name := "week"
		if hours > 0 {
			name = fmt.Sprintf("hours=%d", hours)
		}
		for _, part := range []string{"whole", "minute"} {
			b.Run(name+"/"+part, func(b *testing.B) {
				sc, _ := scorerWithHours(b, hours)
				raw, _ := sc.MarshalBinary()
				if part == "minute" {
					raw, _, _ = sc.MarshalSplit()
				}
				b.ReportAllocs()
				b.SetBytes(int64(len(raw)))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					d, err := Decode("video", "global", sc.cfg, raw)
					if err != nil {
						b.Fatal(err)
					}
					if part == "minute" {
						_, _, err = d.MarshalSplit()
					} else {
						_, err = d.MarshalBinary()
					}
					if err != nil {
						b.Fatal(err)
					}
					d.Release() // as trendbeam does after writing the state
				}
				b.ReportMetric(float64(len(raw)), "state-B")
			})
		}
	}
}
