package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/topk-dev/topk/schemas"
)

// mkTrending builds a valid trending list of n entries "t_0".. with
// decreasing scores.
func mkTrending(scope string, version int64, n int) *schemas.Trending {
	asOf := time.Unix(version, 0).UTC()
	tl := &schemas.Trending{Type: "hashtag", Scope: scope, Window: schemas.WindowTrending, AsOf: asOf,
		BaselineHours: 168, Counts: schemas.CountsEvents, Version: version, Items: []schemas.TrendEntry{}}
	for i := 0; i < n; i++ {
		tl.Items = append(tl.Items, schemas.TrendEntry{Rank: i + 1, Item: fmt.Sprintf("t_%d", i), Score: 0.05 / float64(i+1),
			Count5m: uint64(1000 - i), Baseline5m: 1.5, PeakScore: 0.06 / float64(i+1), PeakAt: asOf.Add(-time.Minute)})
	}
	return tl
}

func (e *testEnv) publishTrending(t testing.TB, tl *schemas.Trending) []byte {
	t.Helper()
	raw, err := schemas.MarshalTrending(tl)
	if err != nil {
		t.Fatal(err)
	}
	if moved, err := e.store.PublishRaw(context.Background(), tl.Key(), tl.Version, raw); err != nil || !moved {
		t.Fatalf("publish %s: moved=%v err=%v", tl.Key(), moved, err)
	}
	return raw
}

// wantTrending is the body GET /v1/trending must answer for k, computed from
// the published JSON without schemas' types: its first k raw items, ranks
// renumbered past removed items, stale as given.
func wantTrending(t *testing.T, published []byte, k int, removed map[string]bool, stale bool) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(published, &m); err != nil {
		t.Fatal(err)
	}
	var items []map[string]json.RawMessage
	json.Unmarshal(m["items"], &items)
	out := []map[string]json.RawMessage{}
	for _, it := range items {
		var name string
		json.Unmarshal(it["item"], &name)
		if removed[name] || len(out) == k {
			continue
		}
		it["rank"] = json.RawMessage(fmt.Sprint(len(out) + 1))
		out = append(out, it)
	}
	m["items"], _ = json.Marshal(out)
	m["stale"], _ = json.Marshal(stale)
	b, _ := json.Marshal(m)
	return b
}

// sameJSON compares two JSON documents as values (object keys in any order).
func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// TestTrendingReads: GET /v1/trending answers the published trending list's
// first k entries (default 20, at most 100) byte for byte, with /v1/top's
// validation, Cache-Control, ETag/304 and gzip; removed items leave it with
// ranks renumbered; a list that stops moving is served stale, never empty;
// a new version replaces it; /v1/top does not take window=trending.
func TestTrendingReads(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC).UnixNano())
	e := newEnv(t, func(c *Config) {
		c.StaleAfter = time.Minute
		c.Now = func() time.Time { return time.Unix(0, now.Load()) }
	})
	e.publish(t, mkList(key("hashtag", "IN", schemas.Window5m), 10, 50, 1))
	pub := e.publishTrending(t, mkTrending("IN-MH", 1764500000, 150))
	e.start(t)

	path := "/v1/trending?type=hashtag&scope=IN-MH"
	for _, k := range []int{0, 1, 20, 100} {
		p := path
		want := 20
		if k > 0 {
			p += fmt.Sprintf("&k=%d", k)
			want = k
		}
		resp, body := e.do(t, "GET", p, nil, "")
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", p, resp.StatusCode, body)
		}
		if w := wantTrending(t, pub, want, nil, false); !sameJSON(body, w) {
			t.Fatalf("%s:\n got %.400s\nwant %.400s", p, body, w)
		}
		if cc := resp.Header.Get("Cache-Control"); !strings.Contains(cc, "max-age=10,") || !strings.Contains(cc, "stale-while-revalidate=") {
			t.Fatalf("Cache-Control %q", cc)
		}
	}
	resp, _ := e.do(t, "GET", path, nil, "")
	etag := resp.Header.Get("ETag")
	if !regexp.MustCompile(`^"1764500000-[0-9a-f]{16}"$`).MatchString(etag) {
		t.Fatalf("ETag %q", etag)
	}
	if r2, b2 := e.do(t, "GET", path, map[string]string{"If-None-Match": etag}, ""); r2.StatusCode != 304 || len(b2) != 0 {
		t.Fatalf("If-None-Match: %d", r2.StatusCode)
	}
	if r2, _ := e.do(t, "GET", path, map[string]string{"Accept-Encoding": "gzip"}, ""); r2.Header.Get("Content-Encoding") != "gzip" || r2.Header.Get("ETag") == etag {
		t.Fatalf("gzip: %q, ETag %q", r2.Header.Get("Content-Encoding"), r2.Header.Get("ETag"))
	}

	for _, tc := range []struct{ path, param string }{
		{"/v1/trending?scope=IN-MH", "type"},
		{"/v1/trending?type=nope", "type"},
		{"/v1/trending?type=hashtag&scope=XX-YY", "scope"},
		{"/v1/trending?type=hashtag&scope=IN-MH&k=101", "k"},
		{"/v1/trending?type=hashtag&scope=IN-MH&k=0", "k"},
		{"/v1/trending?type=hashtag&scope=IN-MH&k=20&k=21", "k"},
		{"/v1/trending?type=hashtag&window=1h", "window"},
		{"/v1/top?type=hashtag&scope=IN-MH&window=trending", "window"},
	} {
		resp, body := e.do(t, "GET", tc.path, nil, "")
		var ae apiError
		json.Unmarshal(body, &ae)
		if resp.StatusCode != 400 || ae.Param != tc.param {
			t.Errorf("%s: %d %s, want 400 naming %q", tc.path, resp.StatusCode, body, tc.param)
		}
	}
	if resp, body := e.do(t, "GET", "/v1/trending?type=hashtag&scope=IN", nil, ""); resp.StatusCode != 404 {
		t.Errorf("a scope without a trending list: %d %s, want 404", resp.StatusCode, body)
	}
	if resp, _ := e.do(t, "POST", path, nil, ""); resp.StatusCode != 405 {
		t.Errorf("POST: %d, want 405", resp.StatusCode)
	}

	// Takedown: t_0 and t_3 leave at once, ranks renumbered, still 20.
	for _, it := range []string{"t_0", "t_3"} {
		if _, err := e.srv.Store().AddRemoval(context.Background(), "hashtag", it, "test"); err != nil {
			t.Fatal(err)
		}
	}
	removed := map[string]bool{"t_0": true, "t_3": true}
	eventually(t, 3*time.Second, "removals filtered", func() bool {
		_, body := e.do(t, "GET", path, nil, "")
		return sameJSON(body, wantTrending(t, pub, 20, removed, false))
	})

	// Stale, never empty: the clock passes StaleAfter without a move.
	now.Add(int64(time.Minute + time.Second))
	_, body := e.do(t, "GET", path, nil, "")
	if !sameJSON(body, wantTrending(t, pub, 20, removed, true)) {
		t.Fatalf("stale read: %.300s", body)
	}
	pub2 := e.publishTrending(t, mkTrending("IN-MH", 1764500060, 5))
	eventually(t, 3*time.Second, "new version served", func() bool {
		_, body := e.do(t, "GET", path, nil, "")
		return sameJSON(body, wantTrending(t, pub2, 20, removed, false))
	})
	_, lists := e.do(t, "GET", "/v1/lists", nil, "")
	if !bytes.Contains(lists, []byte(`"scope":"IN-MH","window":"trending","version":1764500060`)) || !bytes.Contains(lists, []byte(`"items":5`)) {
		t.Fatalf("/v1/lists: %s", lists)
	}
}
