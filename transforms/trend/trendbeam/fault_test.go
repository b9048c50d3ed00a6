package trendbeam

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/timers"

	"github.com/topk-dev/topk/internal/statetest"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/summary"
	"github.com/topk-dev/topk/transforms/users"
)

// Trending by users through bundles that fail at random, as a runner
// sees them (a state write that fails, or a bundle discarded after the
// DoFn returned and retried on the same instance, whose in-memory piece
// counts and cached state then ran ahead of Beam state): over 130 minutes
// of tallies (two new hours, whose first scores load the rings), three a
// bucket, for a list whose items come and go, every trending list is byte
// for byte the one a run without failures emits, a run that reads
// everything from Beam state at every call, as a new worker would (its
// cache dropped before each). maxPieces is low, so pieces are united on
// arrival as well as at the timer; few items, so no union cuts and the
// two runs' unions are the same whatever their grouping. The cached run
// reads the scorer's state only after a failure.
func TestScoreFnRandomFailures(t *testing.T) {
	defer func(n int) { maxPieces = n }(maxPieces)
	maxPieces = 4
	cfg := DefaultConfig()
	cfg.Trend.Counts = schemas.CountsUsers
	cfg.Trend.WarmUp = 10 * time.Minute
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	clean, faulty, steady := newScoreFn(cfg), newScoreFn(cfg), newScoreFn(cfg)
	cleanSt, faultySt, steadySt := statetest.New(), statetest.New(), statetest.New()
	const key = "hashtag:global"
	rng := rand.New(rand.NewPCG(31, 32))
	failures := map[string]int{}
	attempt := func(run func(emit func(beam.EventTime, string, []byte)) error) map[string]string {
		return untilCommitted(t, rng, faultySt, failures, run)
	}
	bucket := 10 * time.Second
	every := cfg.Every.Milliseconds()
	scored := 0
	timersFired := 0
	for b := range 780 { // 130 minutes
		at := t0.Add(time.Duration(b) * bucket)
		for piece := range 3 {
			tl := users.NewTally()
			for j := range 6 {
				item := "#s" + strconv.Itoa(j)
				if b > 120 && j == 5 {
					item = "#new" // a new item, new users every bucket
				}
				for k := range 2 + rng.IntN(6) {
					u := fmt.Sprintf("u%d-%d-%d", j, piece, (b*3+k)%(20+10*j))
					if item == "#new" {
						u = fmt.Sprintf("n%d-%d-%d", b, piece, k)
					}
					addEvent(tl, item, u)
				}
			}
			blob, err := tl.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			v := binary.BigEndian.AppendUint64([]byte{tagTally}, uint64(at.UnixMilli()))
			v = append(v, blob...)
			none := func(beam.EventTime, string, []byte) {}
			forget(clean, key)
			if err := clean.ProcessElement(ctx, cleanSt, statetest.NoTimers{}, key, v, none); err != nil {
				t.Fatal(err)
			}
			cleanSt.Commit()
			if err := steady.ProcessElement(ctx, steadySt, statetest.NoTimers{}, key, v, none); err != nil {
				t.Fatal(err)
			}
			steadySt.Commit()
			attempt(func(emit func(beam.EventTime, string, []byte)) error {
				return faulty.ProcessElement(ctx, faultySt, statetest.NoTimers{}, key, v, emit)
			})
		}
		end := at.Add(bucket).UnixMilli()
		if end%every != 0 {
			continue
		}
		// The watermark passes the cadence boundary: the timer fires.
		tc := timers.Context{Family: clean.Tick.Family, Tag: strconv.FormatInt(end, 10)}
		want := map[string]string{}
		forget(clean, key)
		timersFired++
		err := clean.OnTimer(ctx, cleanSt, statetest.NoTimers{}, key, tc, func(_ beam.EventTime, k string, js []byte) { want[k] = string(js) })
		if err != nil {
			t.Fatal(err)
		}
		cleanSt.Commit()
		got := map[string]string{}
		if err := steady.OnTimer(ctx, steadySt, statetest.NoTimers{}, key, tc, func(_ beam.EventTime, k string, js []byte) { got[k] = string(js) }); err != nil {
			t.Fatal(err)
		}
		steadySt.Commit()
		sameTrending(t, end, got, want)
		got = attempt(func(emit func(beam.EventTime, string, []byte)) error {
			return faulty.OnTimer(ctx, faultySt, statetest.NoTimers{}, key, tc, emit)
		})
		scored += sameTrending(t, end, got, want)
	}
	if scored < 60 || failures["write"] < 30 || failures["discarded"] < 30 {
		t.Fatalf("%d non-empty trending lists compared, failures %v: the test exercises too little", scored, failures)
	}
	if got := cleanSt.Reads["scorer"]; got != timersFired {
		t.Fatalf("the run without its cache read the scorer %d times for %d timers", got, timersFired)
	}
	if got, most := faultySt.Reads["scorer"], 1+failures["write"]+failures["discarded"]; got > most {
		t.Fatalf("the cached run read the scorer %d times for %d timers and %v failures", got, timersFired, failures)
	}
	if got := steadySt.Reads["scorer"]; got != 1 {
		t.Fatalf("the cached run without failures read the scorer %d times, want once (its first timer)", got)
	}
	if cleanSt.Reads["rings"] < 2 {
		t.Fatalf("the rings were read %d times: no new hour was scored", cleanSt.Reads["rings"])
	}
	t.Logf("failures injected: %v; %d non-empty trending lists compared; scorer read %d times with the cache, %d without, %d with it and no failures",
		failures, scored, faultySt.Reads["scorer"], cleanSt.Reads["scorer"], steadySt.Reads["scorer"])
}

// forget drops fn's cached copy of the list key's state, so that its next
// call reads Beam state.
func forget(fn *scoreFn, key string) { cache.Delete(fn.ID + "\x00" + key) }

// untilCommitted runs one bundle against st until an attempt commits,
// each attempt failing at random first (counted in failures): a state
// write that fails, or the bundle discarded after the DoFn returned. It
// returns what the committed attempt emitted, by key.
func untilCommitted(t *testing.T, rng *rand.Rand, st *statetest.Runner, failures map[string]int, run func(emit func(beam.EventTime, string, []byte)) error) map[string]string {
	t.Helper()
	for {
		out := map[string]string{}
		emit := func(_ beam.EventTime, k string, js []byte) { out[k] = string(js) }
		switch rng.IntN(6) {
		case 0: // a state write fails
			st.FailWrites = 1 + rng.IntN(3)
			err := run(emit)
			st.FailWrites = 0
			st.Abort()
			if err == nil { // fewer writes than that: discarded instead
				failures["discarded"]++
			} else {
				failures["write"]++
			}
		case 1: // discarded after the DoFn returned
			failures["discarded"]++
			if err := run(emit); err != nil {
				t.Fatal(err)
			}
			st.Abort()
		default:
			if err := run(emit); err != nil {
				t.Fatal(err)
			}
			st.Commit()
			return out
		}
	}
}

// Trending by events (the 5-minute lists) through the same failures:
// every trending list of a scope whose item jumps at minute 25 is byte
// for byte the one a run without failures (nor a cache) emits, with lists parked two at
// a time now and then before their timer fires.
func TestScoreFnByEventsRandomFailures(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Trend.WarmUp = 10 * time.Minute
	ctx := context.Background()
	clean, faulty := newScoreFn(cfg), newScoreFn(cfg)
	cleanSt, faultySt := statetest.New(), statetest.New()
	rng := rand.New(rand.NewPCG(41, 42))
	failures := map[string]int{}
	const key = "hashtag:IN"
	var parked []int64 // as_of of the lists parked since the last timer
	scored := 0
	for _, l := range listsFrom(t0, 240, 10*time.Second)["IN"] {
		ms := l.AsOf.UnixMilli()
		if ms%cfg.Every.Milliseconds() != 0 {
			continue // byListFn keeps the lists on the cadence
		}
		blob, err := schemas.MarshalList(l)
		if err != nil {
			t.Fatal(err)
		}
		v := append([]byte{tagList}, blob...)
		none := func(beam.EventTime, string, []byte) {}
		forget(clean, key)
		if err := clean.ProcessElement(ctx, cleanSt, statetest.NoTimers{}, key, v, none); err != nil {
			t.Fatal(err)
		}
		cleanSt.Commit()
		untilCommitted(t, rng, faultySt, failures, func(emit func(beam.EventTime, string, []byte)) error {
			return faulty.ProcessElement(ctx, faultySt, statetest.NoTimers{}, key, v, emit)
		})
		parked = append(parked, ms)
		if len(parked) < 2 && rng.IntN(3) == 0 {
			continue // the watermark waits: the next list parks too
		}
		for _, at := range parked { // the timers fire in order
			tc := timers.Context{Family: clean.Tick.Family, Tag: strconv.FormatInt(at, 10)}
			want := map[string]string{}
			forget(clean, key)
			if err := clean.OnTimer(ctx, cleanSt, statetest.NoTimers{}, key, tc, func(_ beam.EventTime, k string, js []byte) { want[k] = string(js) }); err != nil {
				t.Fatal(err)
			}
			cleanSt.Commit()
			got := untilCommitted(t, rng, faultySt, failures, func(emit func(beam.EventTime, string, []byte)) error {
				return faulty.OnTimer(ctx, faultySt, statetest.NoTimers{}, key, tc, emit)
			})
			scored += sameTrending(t, at, got, want)
		}
		parked = parked[:0]
	}
	if scored < 10 || failures["write"] < 10 || failures["discarded"] < 10 {
		t.Fatalf("%d non-empty trending lists compared, failures %v: the test exercises too little", scored, failures)
	}
	t.Logf("failures injected: %v; %d non-empty trending lists compared", failures, scored)
}

// sameTrending fails t unless the trending lists a timer at ms emitted
// with failures (got) are those emitted without (want), byte for byte, and
// returns how many of them hold items.
func sameTrending(t *testing.T, ms int64, got, want map[string]string) int {
	t.Helper()
	if !maps.Equal(got, want) {
		t.Fatalf("timer %s: with failures %q\nwithout %q", time.UnixMilli(ms).UTC().Format(time.TimeOnly), got, want)
	}
	n := 0
	for _, js := range want {
		if tl, err := schemas.UnmarshalTrending([]byte(js)); err == nil && len(tl.Items) > 0 {
			n++
		}
	}
	return n
}

// addEvent counts one event of user on item in tl, as the
// pre-aggregation's tallies do: a (user, item) pair, the item's count and
// its user.
func addEvent(tl *users.Tally, item, user string) {
	uh := users.Hash(user)
	tl.Pairs.AddHash(users.PairHash(uh, summary.Hash(item)))
	en := tl.Entry(item)
	en.Count++
	en.Users.AddHash(uh)
}
