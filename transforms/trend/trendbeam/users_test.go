package trendbeam

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/passert"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/summary"
	"github.com/topk-dev/topk/transforms/users"
)

func init() {
	register.Function2x0[string, func(beam.EventTime, string, []byte)](unpackTallyFn)
	register.DoFn3x0[string, []byte, func(string)](&checkUsersFn{})
	register.Function2x0[string, func(string)](mismatchesFn)
	register.Function2x0[string, func(string)](jumpsFn)
	register.Emitter1[string]()
}

// mismatchesFn and jumpsFn split checkUsersFn's output.
func mismatchesFn(s string, emit func(string)) {
	if !strings.HasPrefix(s, "jump@") {
		emit(s)
	}
}

func jumpsFn(s string, emit func(string)) {
	if strings.HasPrefix(s, "jump@") {
		emit(s)
	}
}

// unpackTallyFn turns "bucket ms|tally" into KV<"hashtag\x00global", tally>
// at the bucket's start, as preagg.ApplyWithUsers emits them.
func unpackTallyFn(s string, emit func(beam.EventTime, string, []byte)) {
	ms, blob, _ := strings.Cut(s, "|")
	b, _ := strconv.ParseInt(ms, 10, 64)
	emit(beam.EventTime(b), "hashtag\x00global", []byte(blob))
}

// checkUsersFn emits a line for every listed item whose count_5m is not
// its exact distinct users in the 5 minutes before the list's as_of
// (Want: as_of ms -> item -> users) within 5% (three standard errors of a
// precision-12 HyperLogLog), and "jump@as_of" for every list that has the
// jumping item.
type checkUsersFn struct {
	Want map[int64]map[string]uint64
}

func (fn *checkUsersFn) ProcessElement(key string, js []byte, emit func(string)) {
	tl, err := schemas.UnmarshalTrending(js)
	if err != nil {
		emit(fmt.Sprintf("%s: %v", key, err))
		return
	}
	if tl.Counts != schemas.CountsUsers {
		emit(fmt.Sprintf("%s %s: counts %q", key, tl.AsOf, tl.Counts))
	}
	want := fn.Want[tl.AsOf.UnixMilli()]
	for _, e := range tl.Items {
		w := want[e.Item]
		if d := float64(e.Count5m) - float64(w); d > 0.05*float64(w)+1 || -d > 0.05*float64(w)+1 {
			emit(fmt.Sprintf("%s %s: %s count_5m %d, exact distinct users %d", key, tl.AsOf.Format(time.TimeOnly), e.Item, e.Count5m, w))
		}
		if e.Item == "jump" {
			emit("jump@" + tl.AsOf.Format(time.TimeOnly))
		}
	}
}

// TestTrendingByUsersOnPrism: the scorer fed users tallies as the
// pre-aggregation sends them, many per bucket (more than maxPieces, so
// both the timer's and the arrivals' uniting run), with the same users in
// many tallies of a bucket and in many buckets. Every item a trending list
// holds has count_5m within the sketch's error of its exact distinct users
// over the list's 5 minutes (recounted here from the events), where a sum
// of the tallies' users would be up to 30 times that, while a long tail
// of one-off items is cut from every pane and 5-minute union; and the
// item that starts at minute 20 with new users every bucket trends.
func TestTrendingByUsersOnPrism(t *testing.T) {
	const pieces = 70 // tallies per bucket, > maxPieces below
	defer func(n int) { maxPieces = n }(maxPieces)
	maxPieces = 64
	cfg := DefaultConfig()
	cfg.Trend.Counts = schemas.CountsUsers
	cfg.Trend.WarmUp = 10 * time.Minute
	bucket := 10 * time.Second
	type ev struct {
		at         time.Time
		item, user string
	}
	var events []ev
	for b := range 180 { // 30 minutes
		at := t0.Add(time.Duration(b) * bucket)
		for j := range 10 {
			item := "s" + strconv.Itoa(j)
			// A steady pool per item: its users come back bucket after
			// bucket, so distinct users grow far slower than events.
			for k := range 40 - 3*j {
				events = append(events, ev{at, item, fmt.Sprintf("u%d-%d", j, (b*7+k)%(60-4*j))})
			}
		}
		// A long tail: 400 items seen once a bucket, by a new user each,
		// so a minute's pane has more items than MaxItems (2,000) and 5
		// minutes five times that: both cuts (users.UniteTop) drop items.
		for k := range 400 {
			events = append(events, ev{at, fmt.Sprintf("tail%d-%d", b, k), fmt.Sprintf("t%d-%d", b, k)})
		}
		if b >= 120 { // minute 20: a new item, new users every bucket
			for k := range 3 * (b - 119) {
				events = append(events, ev{at, "jump", fmt.Sprintf("j%d-%d", b, k)})
			}
		}
	}
	// Tallies: each bucket's events dealt round-robin into pieces.
	var packed []string
	for b := range 180 {
		at := t0.Add(time.Duration(b) * bucket)
		ts := make([]*users.Tally, pieces)
		n := 0
		for _, e := range events {
			if !e.at.Equal(at) {
				continue
			}
			tl := ts[n%pieces]
			if tl == nil {
				tl = users.NewTally()
				ts[n%pieces] = tl
			}
			n++
			uh := users.Hash(e.user)
			tl.Pairs.AddHash(users.PairHash(uh, summary.Hash(e.item)))
			en := tl.Entry(e.item)
			en.Count++
			en.Users.AddHash(uh)
		}
		for _, tl := range ts {
			if tl == nil {
				continue
			}
			blob, err := tl.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			packed = append(packed, strconv.FormatInt(at.UnixMilli(), 10)+"|"+string(blob))
		}
	}
	// The exact recount: distinct users per item over [T - 5m, T) for
	// every minute T.
	want := map[int64]map[string]uint64{}
	for m := 1; m <= 31; m++ {
		end := t0.Add(time.Duration(m) * time.Minute)
		seen := map[string]map[string]bool{}
		for _, e := range events {
			if e.at.Before(end.Add(-5*time.Minute)) || !e.at.Before(end) {
				continue
			}
			if seen[e.item] == nil {
				seen[e.item] = map[string]bool{}
			}
			seen[e.item][e.user] = true
		}
		w := map[string]uint64{}
		for it, us := range seen {
			w[it] = uint64(len(us))
		}
		want[end.UnixMilli()] = w
	}

	p, s := beam.NewPipelineWithRoot()
	tallies := beam.ParDo(s, unpackTallyFn, beam.CreateList(s, packed))
	got := Trending(s, beam.PCollection{}, tallies, cfg)
	out := beam.ParDo(s, &checkUsersFn{Want: want}, got)
	passert.Empty(s, beam.ParDo(s, mismatchesFn, out))
	passert.NonEmpty(s, beam.ParDo(s, jumpsFn, out))
	if err := ptest.Run(p); err != nil {
		t.Fatal(err)
	}
}
