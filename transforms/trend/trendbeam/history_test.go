package trendbeam

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/passert"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/exact/store/storetest"
	"github.com/topk-dev/topk/transforms/stitch"
)

func init() {
	register.Function3x0[string, []byte, func(string)](checkDailyFn)
	register.Emitter1[string]()
}

var at20 = time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC)

// checkDailyFn reports, for the lists from 20:03 on, a listed "daily" or a
// "newbie" that is not rank 1.
func checkDailyFn(key string, blob []byte, emit func(string)) {
	tl, err := schemas.UnmarshalTrending(blob)
	if err != nil {
		emit(err.Error())
		return
	}
	if tl.AsOf.Before(at20.Add(3 * time.Minute)) {
		return
	}
	for _, e := range tl.Items {
		if e.Item == "daily" {
			emit(fmt.Sprintf("%s: daily listed: %+v", tl.AsOf, e))
		}
	}
	if len(tl.Items) == 0 || tl.Items[0].Item != "newbie" {
		emit(fmt.Sprintf("%s: newbie not rank 1: %+v", tl.AsOf, tl.Items))
	}
	if tl.BaselineHours < 24 {
		emit(fmt.Sprintf("%s: baseline_hours %d", tl.AsOf, tl.BaselineHours))
	}
}

// TestTrendingWithExactHistory: with Config.Store naming the exact tables
// (bttest, or BIGTABLE_EMULATOR_HOST's emulator), the DoFn seeds items from
// them: an item with 5% of the list every day at 20:00 does not trend at
// 20:00 today; a new item of the same size does, at rank 1.
func TestTrendingWithExactHistory(t *testing.T) {
	st := storetest.New(t)
	ctx := context.Background()
	bg := map[string]int64{}
	var bgTotal int64
	for j := 0; j < 30; j++ {
		bg[fmt.Sprintf("s%02d", j)] = int64(12 * (3000/(j+1) + 5)) // an hour of the 5-minute counts below
		bgTotal += bg[fmt.Sprintf("s%02d", j)]
	}
	for h := at20.Add(-48 * time.Hour); h.Before(at20.Add(-time.Hour)); h = h.Add(time.Hour) {
		var counts []schemas.ExactCount
		for it, n := range bg {
			counts = append(counts, schemas.ExactCount{Hour: h, Type: "hashtag", Scope: "IN", Item: it, Count: n})
		}
		if h.Hour() == 20 {
			counts = append(counts, schemas.ExactCount{Hour: h, Type: "hashtag", Scope: "IN", Item: "daily", Count: bgTotal / 19})
		}
		if err := st.WriteHour(ctx, h, counts, 100); err != nil {
			t.Fatal(err)
		}
	}

	var packed []string
	for at := at20.Add(-20 * time.Minute); !at.After(at20.Add(10 * time.Minute)); at = at.Add(time.Minute) {
		l := &schemas.List{Type: "hashtag", Scope: "IN", Window: schemas.Window5m, AsOf: at, Version: at.Unix(), Complete: true}
		add := func(it string, n uint64) {
			l.Items = append(l.Items, schemas.Entry{Rank: len(l.Items) + 1, Item: it, Count: n, Lower: n})
			l.Total += n
		}
		var burst uint64
		if at.After(at20) {
			// The 5-minute window fills over 5 minutes at 5% of the list.
			burst = uint64(float64(bgTotal) / 12 / 19 * min(1, float64(at.Sub(at20))/float64(5*time.Minute)))
		}
		if burst > 3000/1+5 {
			panic("burst above the top item: rank order below would break")
		}
		for j := 0; j < 30; j++ {
			n := uint64(3000/(j+1) + 5)
			if burst > n && burst > 0 {
				add("daily", burst)
				add("newbie", burst-1)
				burst = 0
			}
			add(fmt.Sprintf("s%02d", j), n)
		}
		l.CertifiedK = len(l.Items)
		blob, err := schemas.MarshalList(l)
		if err != nil {
			t.Fatal(err)
		}
		packed = append(packed, fmt.Sprintf("%d\x00%s\x00%s", at.UnixMilli(), l.Key(), blob))
	}

	cfg := DefaultConfig()
	cfg.Store = stitch.StoreConfig{Project: st.Project, Instance: st.Instance, EmulatorAddr: st.EmulatorAddr}
	p, s := beam.NewPipelineWithRoot()
	got := Trending(s, beam.ParDo(s, unpackFn, beam.CreateList(s, packed)), beam.PCollection{}, cfg)
	passert.Count(s, got, "lists", len(packed))
	passert.Empty(s, beam.ParDo(s, checkDailyFn, got))
	if err := ptest.Run(p); err != nil {
		t.Fatal(err)
	}
}
