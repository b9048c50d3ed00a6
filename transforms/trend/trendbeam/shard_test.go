package trendbeam

import (
	"fmt"
	"slices"
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
	register.Function2x0[string, func(beam.EventTime, string, []byte)](unpackScopedTallyFn)
	register.Function3x1[string, []byte, func(string), error](asOfFn)
}

// TestBatchRecords: a batch's records come back as they went in, and a
// malformed batch is an error, not a panic.
func TestBatchRecords(t *testing.T) {
	fn := &batchFn{Shards: 1}
	var got [][]byte
	emit := func(_ beam.EventTime, key string, b []byte) {
		if key != shardKey(0) {
			t.Errorf("key %q, want %q", key, shardKey(0))
		}
		got = append(got, b)
	}
	in := map[string]string{"hashtag:global": "abc", "video:IN-MH": "", "search:IN": strings.Repeat("x", 300)}
	for list, tally := range in {
		typ, scope, _ := strings.Cut(list, ":")
		fn.ProcessElement(beam.EventTime(10_000), typ+"\x00"+scope, []byte(tally), emit)
	}
	fn.ProcessElement(beam.EventTime(20_000), "video\x00global", []byte("other bucket"), emit)
	fn.FinishBundle(emit)
	if len(got) != 2 {
		t.Fatalf("%d batches, want 2 (one per bucket)", len(got))
	}
	for _, b := range got {
		if b[0] != tagTally {
			t.Fatalf("tag %q", b[0])
		}
		out := map[string]string{}
		if err := records(b[9:], func(list string, tally []byte) { out[list] = string(tally) }); err != nil {
			t.Fatal(err)
		}
		switch len(out) {
		case 3:
			for list, tally := range in {
				if out[list] != tally {
					t.Errorf("%s: %q, want %q", list, out[list], tally)
				}
			}
		case 1:
			if out["video:global"] != "other bucket" {
				t.Errorf("second bucket: %v", out)
			}
		default:
			t.Errorf("batch of %d records: %v", len(out), out)
		}
		if err := records(b[9:len(b)-1], func(string, []byte) {}); err == nil {
			t.Error("a cut batch parsed")
		}
	}
}

// TestPaneKeys: a list's pane keys sort by time and apart from any other
// list's, which usersInput's search relies on.
func TestPaneKeys(t *testing.T) {
	var keys []string
	for _, list := range []string{"video:IN", "video:IN-MH", "video:I", "hashtag:IN"} {
		for _, ms := range []int64{1_764_000_000_000, 60_000, 1_764_000_060_000, 0} {
			keys = append(keys, paneKey(list, ms))
		}
	}
	slices.Sort(keys)
	prev, prevMs := "", int64(-1)
	seen := map[string]bool{}
	for _, k := range keys {
		list, ms, ok := splitPaneKey(k)
		if !ok {
			t.Fatalf("%q does not split", k)
		}
		if list != prev {
			if seen[list] {
				t.Fatalf("%s's keys are not together", list)
			}
			seen[list], prev, prevMs = true, list, -1
		}
		if ms <= prevMs {
			t.Fatalf("%s: %d after %d", list, ms, prevMs)
		}
		prevMs = ms
	}
}

// unpackScopedTallyFn turns "scope|bucket ms|tally" into
// KV<"hashtag\x00scope", tally> at the bucket's start.
func unpackScopedTallyFn(s string, emit func(beam.EventTime, string, []byte)) {
	scope, rest, _ := strings.Cut(s, "|")
	ms, blob, _ := strings.Cut(rest, "|")
	b, _ := strconv.ParseInt(ms, 10, 64)
	emit(beam.EventTime(b), "hashtag\x00"+scope, []byte(blob))
}

// asOfFn formats a trending list as "key@minutes after t0".
func asOfFn(key string, js []byte, emit func(string)) error {
	tl, err := schemas.UnmarshalTrending(js)
	if err != nil {
		return err
	}
	emit(fmt.Sprintf("%s@%d", key, int(tl.AsOf.Sub(t0)/time.Minute)))
	return nil
}

// TestShardScoresItsListsApart: two lists in one shard are each scored at
// the minutes their tallies came for, and only then: "global" has tallies
// for 30 minutes, "IN" for the first 12 only, so IN's last trending list
// is at minute 12 while global's go on to 30.
func TestShardScoresItsListsApart(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Trend.Counts = schemas.CountsUsers
	cfg.Trend.WarmUp = 5 * time.Minute
	cfg.Shards = 1
	var packed []string
	for b := range 180 { // 30 minutes of 10 s buckets
		at := t0.Add(time.Duration(b) * 10 * time.Second)
		for _, scope := range []string{"global", "IN"} {
			if scope == "IN" && b >= 72 {
				continue
			}
			tl := users.NewTally()
			for j := range 5 {
				item := fmt.Sprintf("%s%d", scope, j)
				for k := range 10 - j {
					uh := users.Hash(fmt.Sprintf("u%d-%d", b, k))
					tl.Pairs.AddHash(users.PairHash(uh, summary.Hash(item)))
					e := tl.Entry(item)
					e.Count++
					e.Users.AddHash(uh)
				}
			}
			blob, err := tl.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			packed = append(packed, scope+"|"+strconv.FormatInt(at.UnixMilli(), 10)+"|"+string(blob))
		}
	}
	var want []string
	for m := 1; m <= 30; m++ {
		want = append(want, fmt.Sprintf("hashtag:global:trending@%d", m))
		if m <= 12 {
			want = append(want, fmt.Sprintf("hashtag:IN:trending@%d", m))
		}
	}
	p, s := beam.NewPipelineWithRoot()
	tallies := beam.ParDo(s, unpackScopedTallyFn, beam.CreateList(s, packed))
	got := beam.ParDo(s, asOfFn, Trending(s, beam.PCollection{}, tallies, cfg))
	passert.Equals(s, got, beam.CreateList(s, want))
	if err := ptest.Run(p); err != nil {
		t.Fatal(err)
	}
}
