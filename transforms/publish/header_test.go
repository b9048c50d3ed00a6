package publish

import (
	"testing"
	"time"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/merge"
)

// listHeader answers what schemas.ListHeader answers, for top lists (both
// encoders), long lists with exact_until, trending lists and blobs it must
// refuse; and takes the fast path for the fast path's top lists.
func TestListHeaderFastEqualsSlow(t *testing.T) {
	asOf := time.Date(2026, 11, 30, 10, 42, 10, 0, time.UTC)
	eu := asOf.Truncate(time.Hour)
	top := &schemas.List{Type: "video", Scope: "IN-MH", Window: schemas.Window5m, AsOf: asOf, MaxOvercount: 3, Complete: true, CertifiedK: 2, Version: asOf.Unix(), Rules: "r1", Total: 9,
		Items: []schemas.Entry{{Rank: 1, Item: "v_1", Count: 5, Lower: 4}, {Rank: 2, Item: "v_2", Count: 4, Lower: 4}}}
	fastBlob, err := merge.AppendListJSON(nil, top)
	if err != nil {
		t.Fatal(err)
	}
	stdBlob, _ := schemas.MarshalList(top)
	long := *top
	long.Window, long.ExactUntil = schemas.Window24h, &eu
	longBlob, _ := schemas.MarshalList(&long)
	odd := *top
	odd.AsOf = asOf.Add(123456789 * time.Nanosecond).In(time.FixedZone("x", -5400))
	oddBlob, _ := schemas.MarshalList(&odd)
	tr, err := schemas.MarshalTrending(&schemas.Trending{Type: "hashtag", Scope: "global", Window: schemas.WindowTrending, AsOf: asOf, Version: asOf.Unix()})
	if err != nil {
		t.Fatal(err)
	}
	blobs := map[string][]byte{
		"fast": fastBlob, "std": stdBlob, "long": longBlob, "odd as_of": oddBlob, "trending": tr,
		"zero version":  []byte(`{"type":"video","scope":"global","window":"1m","as_of":"2026-11-30T10:42:10Z","exact_until":null,"max_overcount":0,"complete":true,"certified_k":0,"version":0,"stale":false,"items":[]}`),
		"leading zero":  []byte(`{"type":"video","scope":"global","window":"1m","as_of":"2026-11-30T10:42:10Z","exact_until":null,"max_overcount":0,"complete":true,"certified_k":0,"version":01,"stale":false,"items":[]}`),
		"bad key":       []byte(`{"type":"Video","scope":"global","window":"1m","as_of":"2026-11-30T10:42:10Z","exact_until":null,"max_overcount":0,"complete":true,"certified_k":0,"version":5,"stale":false,"items":[]}`),
		"escaped scope": []byte(`{"type":"video","scope":"glob\u0061l","window":"1m","as_of":"2026-11-30T10:42:10Z","exact_until":null,"max_overcount":0,"complete":false,"certified_k":0,"version":5,"stale":false,"items":[]}`),
		"bad as_of":     []byte(`{"type":"video","scope":"global","window":"1m","as_of":"2026-11-30 10:42:10","exact_until":null,"max_overcount":0,"complete":true,"certified_k":0,"version":5,"stale":false,"items":[]}`),
		"truncated":     fastBlob[:60],
		"empty":         nil,
	}
	for name, b := range blobs {
		k, v, at, err := listHeader(b)
		wk, wv, wat, werr := schemas.ListHeader(b)
		if (err == nil) != (werr == nil) || k != wk || v != wv || !at.Equal(wat) || at.Location().String() != wat.Location().String() {
			t.Errorf("%s: got %v %d %v %v; ListHeader %v %d %v %v", name, k, v, at, err, wk, wv, wat, werr)
		}
	}
	for _, name := range []string{"fast", "std", "odd as_of"} {
		if _, _, _, ok := fastHeader(blobs[name]); !ok {
			t.Errorf("%s: not read by the fast path", name)
		}
	}
}
