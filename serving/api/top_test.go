package api

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/topk-dev/topk/schemas"
)

// Property: every malformed or hostile request gets the right 4xx, a JSON
// body whose message names what was wrong (and the parameter, where there is
// one), never a 5xx, and never echoes markup unescaped.
func TestHostileRequests(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxBodyBytes = 64 << 10; c.MaxEvents = 100 })
	e.publish(t, mkList(key("video", "global", schemas.Window1h), 1, 20, 1))
	e.publish(t, mkList(key("video", "IN", schemas.Window1h), 1, 20, 2))
	e.start(t)

	now := time.Now().UTC()
	ev := func(id, ts string) string {
		return fmt.Sprintf(`{"event_id":%q,"type":"video","item":"v_1","ts":%q}`, id, ts)
	}
	manyEvents := make([]string, 101)
	for i := range manyEvents {
		manyEvents[i] = ev(fmt.Sprintf("e%d", i), now.Format(time.RFC3339))
	}
	jsonCT := map[string]string{"Content-Type": "application/json"}
	auth := func(tok string) map[string]string {
		return map[string]string{"Authorization": tok, "Content-Type": "application/json"}
	}
	top := "/v1/top?type=video&window=1h"
	cases := []struct {
		name, method, path string
		hdr                map[string]string
		body               string
		status             int
		param              string // expected "param" field, if any
		msg                string // substring of the message
	}{
		{"no parameters", "GET", "/v1/top", nil, "", 400, "type", `"type" is required; allowed: video`},
		{"type upper case", "GET", "/v1/top?type=Video&window=1h", nil, "", 400, "type", "is not an item type"},
		{"type NUL byte", "GET", "/v1/top?type=video%00&window=1h", nil, "", 400, "type", "is not an item type"},
		{"type SQL injection", "GET", "/v1/top?type=video'%20OR%201=1--&window=1h", nil, "", 400, "type", "is not an item type"},
		{"type script tag", "GET", "/v1/top?type=%3Cscript%3Ealert(1)%3C/script%3E&window=1h", nil, "", 400, "type", "is not an item type"},
		{"type path traversal", "GET", "/v1/top?type=../../etc/passwd&window=1h", nil, "", 400, "type", "is not an item type"},
		{"type redis key injection", "GET", "/v1/top?type=video:global:1h:cur&window=1h", nil, "", 400, "type", "is not an item type"},
		{"type unknown", "GET", "/v1/top?type=hashtag&window=1h", nil, "", 400, "type", `unknown type "hashtag"; allowed: video`},
		{"type 10 KB", "GET", "/v1/top?type=" + strings.Repeat("a", 10000) + "&window=1h", nil, "", 400, "type", "..."},
		{"scope colon", "GET", top + "&scope=global:x", nil, "", 400, "scope", "is not \"global\", a country"},
		{"scope CRLF header injection", "GET", top + "&scope=IN%0d%0aSet-Cookie:%20x=1", nil, "", 400, "scope", "is not \"global\""},
		{"scope unknown country", "GET", top + "&scope=FR", nil, "", 400, "scope", `unknown scope "FR"; allowed: IN, global`},
		{"scope lower case", "GET", top + "&scope=in", nil, "", 400, "scope", "is not \"global\""},
		{"window missing", "GET", "/v1/top?type=video", nil, "", 400, "window", "required; allowed: 1m, 5m, 1h, 24h, all"},
		{"window 2h", "GET", "/v1/top?type=video&window=2h", nil, "", 400, "window", `"2h" is not a window; allowed: 1m, 5m, 1h, 24h, all`},
		{"window upper case", "GET", "/v1/top?type=video&window=1H", nil, "", 400, "window", "is not a window"},
		{"k zero", "GET", top + "&k=0", nil, "", 400, "k", `"0" is not an integer from 1 to 1000`},
		{"k 1001", "GET", top + "&k=1001", nil, "", 400, "k", "from 1 to 1000"},
		{"k negative", "GET", top + "&k=-1", nil, "", 400, "k", "from 1 to 1000"},
		{"k letters", "GET", top + "&k=abc", nil, "", 400, "k", `"abc" is not an integer`},
		{"k exponent", "GET", top + "&k=1e3", nil, "", 400, "k", "from 1 to 1000"},
		{"k leading zero", "GET", top + "&k=010", nil, "", 400, "k", "from 1 to 1000"},
		{"k leading space", "GET", top + "&k=%2010", nil, "", 400, "k", "from 1 to 1000"},
		{"k empty", "GET", top + "&k=", nil, "", 400, "k", "from 1 to 1000"},
		{"k overflow", "GET", top + "&k=99999999999999999999", nil, "", 400, "k", "from 1 to 1000"},
		{"k repeated", "GET", top + "&k=10&k=20", nil, "", 400, "k", "given more than once"},
		{"unknown parameter", "GET", top + "&limit=10", nil, "", 400, "limit", "unknown parameter \"limit\"; allowed: type, scope, window, k"},
		{"bad percent escape", "GET", "/v1/top?type=%zz&window=1h", nil, "", 400, "", "bad percent-escape"},
		{"list not published yet", "GET", "/v1/top?type=video&window=24h", nil, "", 404, "", "list video:global:24h does not exist yet"},
		{"POST on /v1/top", "POST", top, jsonCT, "{}", 405, "", `method "POST" not allowed on /v1/top; allowed: GET, HEAD`},
		{"unknown path", "GET", "/v1/topp", nil, "", 404, "", "no such path"},
		{"lists with parameters", "GET", "/v1/lists?x=1", nil, "", 400, "", "takes no parameters"},
		{"events GET", "GET", "/v1/events", nil, "", 405, "", "allowed: POST"},
		{"events text/plain", "POST", "/v1/events", map[string]string{"Content-Type": "text/plain"}, `{"beacon_id":"b","events":[]}`, 415, "", "Content-Type must be application/json"},
		{"events no content type", "POST", "/v1/events", nil, `{}`, 415, "", "Content-Type must be application/json"},
		{"events invalid JSON", "POST", "/v1/events", jsonCT, `{"beacon_id":"b","events":[`, 400, "", "body is not a beacon"},
		{"events JSON array", "POST", "/v1/events", jsonCT, `[1,2,3]`, 400, "", "body is not a beacon"},
		{"events unknown field", "POST", "/v1/events", jsonCT, `{"beacon_id":"b","events":[],"sneaky":1}`, 400, "", `unknown field "sneaky"`},
		{"events trailing data", "POST", "/v1/events", jsonCT, `{"beacon_id":"b","events":[]} {"x":1}`, 400, "", "data after the beacon"},
		{"events no beacon_id", "POST", "/v1/events", jsonCT, `{"events":[` + ev("e1", now.Format(time.RFC3339)) + `]}`, 400, "beacon_id", "beacon_id is missing"},
		{"events beacon_id with space", "POST", "/v1/events", jsonCT, `{"beacon_id":"a b","events":[]}`, 400, "beacon_id", "has byte 0x20"},
		{"events beacon_id too long", "POST", "/v1/events", jsonCT, `{"beacon_id":"` + strings.Repeat("b", 129) + `","events":[]}`, 400, "beacon_id", "more than 128"},
		{"events empty", "POST", "/v1/events", jsonCT, `{"beacon_id":"b1","events":[]}`, 400, "events", "events is missing or empty"},
		{"events too many", "POST", "/v1/events", jsonCT, `{"beacon_id":"b2","events":[` + strings.Join(manyEvents, ",") + `]}`, 413, "", "101 events in one beacon, more than the limit of 100"},
		{"events body too large", "POST", "/v1/events", jsonCT, `{"beacon_id":"b3","events":[` + strings.Repeat(" ", 70<<10) + `]}`, 413, "", "over the limit of 65536 bytes"},
		{"events bad timestamps only", "POST", "/v1/events", jsonCT, `{"beacon_id":"b4","events":[` +
			ev("e1", "yesterday") + "," + ev("e2", now.Add(time.Hour).Format(time.RFC3339)) + "," +
			ev("e3", now.Add(-30*24*time.Hour).Format(time.RFC3339)) + "," + `{"event_id":"e4","type":"video","item":"v_1"}` + `]}`,
			400, "", "no valid event"},
		{"admin no token", "GET", "/v1/admin/removals", nil, "", 401, "", "Authorization: Bearer"},
		{"admin basic auth", "GET", "/v1/admin/removals", map[string]string{"Authorization": "Basic dXNlcjpwYXNz"}, "", 401, "", "Authorization: Bearer"},
		{"admin wrong token", "GET", "/v1/admin/removals", auth("Bearer nope"), "", 403, "", "wrong token"},
		{"admin PUT", "PUT", "/v1/admin/removals", auth("Bearer " + testToken), "{}", 405, "", "allowed: GET, POST, DELETE"},
		{"admin bad type", "POST", "/v1/admin/removals", auth("Bearer " + testToken), `{"type":"Vid eo","item":"x"}`, 400, "", "bad removal"},
		{"admin item with quote", "POST", "/v1/admin/removals", auth("Bearer " + testToken), `{"type":"video","item":"a\"b"}`, 400, "", "item has byte 0x22"},
		{"admin text/plain", "POST", "/v1/admin/removals", map[string]string{"Authorization": "Bearer " + testToken}, `{"type":"video","item":"x"}`, 415, "", "Content-Type must be application/json"},
		{"admin restore unknown", "DELETE", "/v1/admin/removals?type=video&item=never", auth("Bearer " + testToken), "", 404, "", "video/never is not removed"},
	}
	if len(cases) < 30 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := e.do(t, c.method, c.path, c.hdr, c.body)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d; body %s", resp.StatusCode, c.status, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("Content-Type %q", ct)
			}
			var got struct {
				Error    string          `json:"error"`
				Param    string          `json:"param"`
				Rejected []rejectedEvent `json:"rejected"`
			}
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("body is not JSON: %v: %s", err, body)
			}
			if !strings.Contains(got.Error, c.msg) {
				t.Fatalf("message %q does not contain %q", got.Error, c.msg)
			}
			if got.Param != c.param {
				t.Fatalf("param %q, want %q", got.Param, c.param)
			}
			if bytes.Contains(body, []byte("<script>")) || bytes.Contains(body, []byte("\r\n")) {
				t.Fatalf("body echoes hostile input raw: %s", body)
			}
			if len(body) > 4<<10 {
				t.Fatalf("error body of %d bytes echoes too much", len(body))
			}
			if c.name == "events bad timestamps only" {
				want := []string{`ts "yesterday" is not an RFC 3339 time`, "in the future", "in the past", "ts is missing"}
				if len(got.Rejected) != 4 {
					t.Fatalf("rejected %+v, want 4", got.Rejected)
				}
				for i, r := range got.Rejected {
					if r.Index != i || r.EventID != fmt.Sprintf("e%d", i+1) || !strings.Contains(r.Reason, want[i]) {
						t.Errorf("rejected[%d] = %+v, want index %d, event e%d, reason with %q", i, r, i, i+1, want[i])
					}
				}
			}
		})
	}
	if n := len(e.fake.Srv.Messages()); n != 0 {
		t.Fatalf("%d messages published by rejected requests", n)
	}
}

// expectedTop computes, from the published list alone, the body GET
// /v1/top must return for k without removals: the first k entries, with
// certified_k clamped to k.
func expectedTop(t *testing.T, published []byte, k int) []byte {
	t.Helper()
	var l schemas.List
	if err := json.Unmarshal(published, &l); err != nil {
		t.Fatal(err)
	}
	if k < len(l.Items) {
		l.Items = l.Items[:k]
	}
	if l.CertifiedK > k {
		l.CertifiedK = k
	}
	l.Complete = l.Complete && l.CertifiedK == len(l.Items)
	out, err := json.Marshal(&l)
	if err != nil {
		t.Fatal(err)
	}
	return withApproximate(out, true)
}

// Property: a read returns exactly the published list's first k entries,
// byte for byte, for every window and k, with CDN headers; ETag/304, gzip and
// HEAD behave.
func TestReadsMatchPublishedList(t *testing.T) {
	e := newEnv(t, nil)
	published := map[schemas.Window][]byte{}
	for i, w := range schemas.Windows {
		l := mkList(key("video", "global", w), int64(100+i), 1100, uint64(i))
		e.publish(t, l)
		published[w], _ = schemas.MarshalList(l)
	}
	e.start(t)
	for _, w := range schemas.Windows {
		k := key("video", "global", w)
		// The items of the response, taken from the raw published JSON
		// without schemas' types: an independent slice.
		var raw struct {
			Items []json.RawMessage `json:"items"`
		}
		json.Unmarshal(published[w], &raw)
		for _, n := range []int{1, 7, 100, 999, 1000} {
			resp, body := e.do(t, "GET", topPath(k, n), nil, "")
			if resp.StatusCode != 200 {
				t.Fatalf("%s k=%d: %d %s", k, n, resp.StatusCode, body)
			}
			if want := expectedTop(t, published[w], n); !bytes.Equal(body, want) {
				t.Fatalf("%s k=%d: body differs from the published list\n got %.300s\nwant %.300s", k, n, body, want)
			}
			var got struct {
				Items []json.RawMessage `json:"items"`
			}
			json.Unmarshal(body, &got)
			if len(got.Items) != n {
				t.Fatalf("%s k=%d: %d items", k, n, len(got.Items))
			}
			for i := range got.Items {
				if !bytes.Equal(got.Items[i], raw.Items[i]) {
					t.Fatalf("%s k=%d: item %d = %s, published %s", k, n, i, got.Items[i], raw.Items[i])
				}
			}
			cc := resp.Header.Get("Cache-Control")
			wantAge := "max-age=10,"
			if w == schemas.Window24h || w == schemas.WindowAll {
				wantAge = "max-age=30,"
			}
			if !strings.Contains(cc, wantAge) || !strings.Contains(cc, "stale-while-revalidate=") {
				t.Fatalf("%s: Cache-Control %q, want %s and stale-while-revalidate", w, cc, wantAge)
			}
			if resp.ContentLength != int64(len(body)) {
				t.Fatalf("Content-Length %d for %d bytes", resp.ContentLength, len(body))
			}
		}
	}

	k := key("video", "global", schemas.Window1h)
	resp, body := e.do(t, "GET", topPath(k, 100), nil, "")
	etag := resp.Header.Get("ETag")
	if !regexp.MustCompile(`^"102-[0-9a-f]{16}"$`).MatchString(etag) {
		t.Fatalf("ETag %q, want \"<version>-<hash>\"", etag)
	}
	for _, inm := range []string{etag, "W/" + etag, `"x", ` + etag, "*"} {
		r2, b2 := e.do(t, "GET", topPath(k, 100), map[string]string{"If-None-Match": inm}, "")
		if r2.StatusCode != 304 || len(b2) != 0 || r2.Header.Get("ETag") != etag {
			t.Fatalf("If-None-Match %s: %d, %d bytes, ETag %q", inm, r2.StatusCode, len(b2), r2.Header.Get("ETag"))
		}
	}
	if r2, _ := e.do(t, "GET", topPath(k, 100), map[string]string{"If-None-Match": `"101-0000000000000000"`}, ""); r2.StatusCode != 200 {
		t.Fatalf("stale ETag: %d, want 200", r2.StatusCode)
	}
	if r2, _ := e.do(t, "GET", topPath(k, 99), map[string]string{"If-None-Match": etag}, ""); r2.StatusCode != 200 {
		t.Fatalf("ETag of k=100 matched k=99")
	}
	gzResp, gzBody := e.do(t, "GET", topPath(k, 100), map[string]string{"Accept-Encoding": "br;q=1, gzip;q=0.8"}, "")
	if gzResp.Header.Get("Content-Encoding") != "gzip" || gzResp.Header.Get("Vary") != "Accept-Encoding" {
		t.Fatalf("gzip: Content-Encoding %q, Vary %q", gzResp.Header.Get("Content-Encoding"), gzResp.Header.Get("Vary"))
	}
	if gzResp.Header.Get("ETag") == etag {
		t.Fatalf("gzip variant has the identity ETag")
	}
	zr, err := gzip.NewReader(bytes.NewReader(gzBody))
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := io.ReadAll(zr)
	if !bytes.Equal(plain, body) || len(gzBody) >= len(body) {
		t.Fatalf("gzip body: %d bytes inflating to %d, identity %d", len(gzBody), len(plain), len(body))
	}
	if r2, _ := e.do(t, "GET", topPath(k, 100), map[string]string{"Accept-Encoding": "gzip;q=0"}, ""); r2.Header.Get("Content-Encoding") != "" {
		t.Fatalf("gzip;q=0 got gzip")
	}
	hr, hb := e.do(t, "HEAD", topPath(k, 100), nil, "")
	if hr.StatusCode != 200 || len(hb) != 0 || hr.Header.Get("ETag") != etag {
		t.Fatalf("HEAD: %d, %d bytes, ETag %q", hr.StatusCode, len(hb), hr.Header.Get("ETag"))
	}
	// Defaults: scope global, k 100.
	if _, b := e.do(t, "GET", "/v1/top?type=video&window=1h", nil, ""); !bytes.Equal(b, body) {
		t.Fatalf("defaults differ from scope=global&k=100")
	}
}

// Property: a response is rendered once per (version, k, removals, stale);
// repeated reads serve the cached bytes.
func TestRenderedOnce(t *testing.T) {
	e := newEnv(t, nil)
	k := key("video", "global", schemas.Window1h)
	e.publish(t, mkList(k, 1, 1100, 1))
	e.start(t)
	for i := 0; i < 50; i++ {
		e.do(t, "GET", topPath(k, 100), nil, "")
		e.do(t, "GET", topPath(k, 10), map[string]string{"Accept-Encoding": "gzip"}, "")
	}
	_, metrics := e.do(t, "GET", "/metrics", nil, "")
	if !bytes.Contains(metrics, []byte(`topk_serving_renders_total{cache="cached"} 2`)) {
		t.Fatalf("want exactly 2 renders for 100 reads of 2 ks:\n%s", grepLines(metrics, "renders_total"))
	}
	if !bytes.Contains(metrics, []byte(`topk_serving_requests_total{code="200",route="top"} 100`)) {
		t.Fatalf("request counter:\n%s", grepLines(metrics, "requests_total"))
	}
	if !bytes.Contains(metrics, []byte(`topk_serving_list_version{list="video:global:1h"} 1`)) {
		t.Fatalf("list gauges:\n%s", grepLines(metrics, "topk_serving_list"))
	}
	allocs := testing.AllocsPerRun(200, func() {
		rs := e.srv.state.rem.Load()
		v := e.srv.state.cat.Load().lists[k].cur.Load()
		v.response(100, false, rs, e.srv.cfg.RenderCacheBytes, e.srv.metrics)
	})
	if allocs != 0 {
		t.Fatalf("cached response costs %v allocations", allocs)
	}
}

func grepLines(b []byte, sub string) string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Property: with Redis up but the pipeline silent, a list turns stale
// exactly when it has not moved for StaleAfter, and a new version clears it.
func TestStaleWhenListStopsMoving(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC).UnixNano())
	e := newEnv(t, func(c *Config) {
		c.StaleAfter = time.Minute
		c.Now = func() time.Time { return time.Unix(0, now.Load()) }
	})
	k := key("video", "global", schemas.Window1m)
	e.publish(t, mkList(k, 1, 50, 1))
	e.start(t)
	stale := func() bool {
		_, b := e.do(t, "GET", topPath(k, 10), nil, "")
		var l schemas.List
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatal(err)
		}
		return l.Stale
	}
	if stale() {
		t.Fatal("fresh list is stale")
	}
	now.Add(int64(time.Minute))
	if stale() {
		t.Fatal("stale at exactly StaleAfter")
	}
	now.Add(int64(time.Second))
	if !stale() {
		t.Fatal("not stale after StaleAfter")
	}
	e.publish(t, mkList(k, 2, 50, 1))
	eventually(t, 3*time.Second, "new version clears stale", func() bool { return !stale() })
	_, b := e.do(t, "GET", "/v1/lists", nil, "")
	if !bytes.Contains(b, []byte(`"version":2`)) || !bytes.Contains(b, []byte(`"stale":false`)) {
		t.Fatalf("/v1/lists: %s", b)
	}
}

func TestOperationsEndpoints(t *testing.T) {
	e := newEnv(t, nil)
	e.start(t)
	for path, want := range map[string]string{"/healthz": `"ok"`, "/readyz": `"ready"`, "/metrics": "go_goroutines", "/": "<title>topk"} {
		resp, body := e.do(t, "GET", path, nil, "")
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("%s: %d %.200s", path, resp.StatusCode, body)
		}
	}
	resp, _ := e.do(t, "GET", "/", nil, "")
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || resp.Header.Get("Content-Security-Policy") == "" {
		t.Errorf("page headers: %v", resp.Header)
	}
	e.srv.Close()
	if resp, _ := e.do(t, "GET", "/readyz", nil, ""); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz after Close: %d", resp.StatusCode)
	}
}
