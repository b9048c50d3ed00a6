package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/serving/cdn"
)

// withApproximate turns the JSON of a schemas.List into the /v1/top body
// that carries it: "approximate" goes just before "items".
func withApproximate(b []byte, approximate bool) []byte {
	return bytes.Replace(b, []byte(`,"items":`), []byte(`,"approximate":`+strconv.FormatBool(approximate)+`,"items":`), 1)
}

// topBody is a /v1/top response as a client decodes it.
type topBody struct {
	Version     int64 `json:"version"`
	Approximate *bool `json:"approximate"`
	Items       []struct {
		Rank      int    `json:"rank"`
		Item      string `json:"item"`
		Change    string `json:"change"`
		Title     string `json:"title"`
		Thumbnail string `json:"thumbnail"`
	} `json:"items"`
}

func (e *testEnv) top(t *testing.T, k schemas.ListKey, n int) (topBody, http.Header) {
	t.Helper()
	resp, b := e.do(t, "GET", topPath(k, n), nil, "")
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", topPath(k, n), resp.StatusCode, b)
	}
	var out topBody
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%v: %.200s", err, b)
	}
	return out, resp.Header
}

// reorder returns a copy of l as version v whose items are named by order
// (counts kept in rank order).
func reorder(l *schemas.List, v int64, order []string) *schemas.List {
	out := *l
	out.Version = v
	out.AsOf = l.AsOf.Add(time.Duration(v-l.Version) * 10 * time.Second)
	out.Items = append([]schemas.Entry(nil), l.Items[:len(order)]...)
	for i := range out.Items {
		out.Items[i].Item = order[i]
	}
	return &out
}

// Property: change is the rank movement since the previous version in
// Redis, computed with the current deny set on both sides, and is the same
// after the server restarts (it comes from Redis, not from memory).
func TestChangeSurvivesRestart(t *testing.T) {
	e := newEnv(t, nil)
	k := key("video", "global", schemas.Window1h)
	base := mkList(k, 1, 6, 1)
	e.publish(t, reorder(base, 1, []string{"a", "b", "c", "d", "e", "f"}))
	e.start(t)
	first, _ := e.top(t, k, 6)
	for _, it := range first.Items {
		if it.Change != "" {
			t.Fatalf("first version: %s has change %q, want none (no previous version)", it.Item, it.Change)
		}
	}
	e.publish(t, reorder(base, 2, []string{"c", "a", "b", "g", "e", "f"}))
	eventually(t, 3*time.Second, "v2 served", func() bool { b, _ := e.top(t, k, 6); return b.Version == 2 })
	want := map[string]string{"c": "+2", "a": "-1", "b": "-1", "g": "new", "e": "=", "f": "="}
	check := func(env *testEnv, want map[string]string) {
		t.Helper()
		got, _ := env.top(t, k, 6)
		for _, it := range got.Items {
			if it.Change != want[it.Item] {
				t.Errorf("%s at rank %d: change %q, want %q", it.Item, it.Rank, it.Change, want[it.Item])
			}
		}
	}
	check(e, want)

	// A restart: a new server with nothing in memory shows the same changes.
	again := newEnv(t, func(c *Config) { c.KeyPrefix = e.cfg.KeyPrefix; c.Redis = e.rc })
	again.start(t)
	check(again, want)

	// A takedown of "a" renumbers both versions: c was 3rd of (b, c, d, e,
	// f) and is 1st of (c, b, g, e, f).
	admin := map[string]string{"Authorization": "Bearer " + testToken, "Content-Type": "application/json"}
	if resp, b := again.do(t, "POST", "/v1/admin/removals", admin, `{"type":"video","item":"a","reason":"test"}`); resp.StatusCode != 201 {
		t.Fatalf("takedown: %d %s", resp.StatusCode, b)
	}
	check(again, map[string]string{"c": "+1", "b": "-1", "g": "new", "e": "=", "f": "=", "v_5": "new"})
}

// Property: approximate is false only for a list whose every returned count
// is exact (count = lower), whose window is recounted up to as_of, and whose
// returned ranking is certified; any of the three missing makes it true.
func TestApproximate(t *testing.T) {
	e := newEnv(t, nil)
	exactUntil := testAsOf.Add(100 * time.Second)
	mk := func(w schemas.Window, v int64, exact bool, until *time.Time) {
		l := mkList(key("video", "global", w), v, 20, 3)
		if exact {
			for i := range l.Items {
				l.Items[i].Lower = l.Items[i].Count
			}
		}
		l.AsOf = testAsOf.Add(100 * time.Second)
		l.ExactUntil = until
		e.publish(t, l)
	}
	before := exactUntil.Add(-time.Hour)
	mk(schemas.Window24h, 1, true, &exactUntil)  // exact
	mk(schemas.WindowAll, 1, false, &exactUntil) // bounds, not counts
	mk(schemas.Window1h, 1, true, nil)           // live window
	mk(schemas.Window5m, 1, true, &before)       // an open hour
	e.start(t)
	for w, want := range map[schemas.Window]bool{schemas.Window24h: false, schemas.WindowAll: true, schemas.Window1h: true, schemas.Window5m: true} {
		got, _ := e.top(t, key("video", "global", w), 10)
		if got.Approximate == nil || *got.Approximate != want {
			t.Errorf("%s: approximate %v, want %v", w, got.Approximate, want)
		}
	}
}

// fastlyFake records the surrogate keys purged through Fastly's API.
type fastlyFake struct {
	mu   sync.Mutex
	keys []string
}

func (f *fastlyFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/service/svc/purge/")
	if r.Method != http.MethodPost || !ok || r.Header.Get("Fastly-Key") != "tok" {
		http.Error(w, "bad purge", http.StatusBadRequest)
		return
	}
	key, _ := url.PathUnescape(rest)
	f.mu.Lock()
	f.keys = append(f.keys, key)
	f.mu.Unlock()
	fmt.Fprint(w, `{"status":"ok"}`)
}

func (f *fastlyFake) purged() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.keys...)
}

func withFastly(t *testing.T) (*fastlyFake, func(*Config)) {
	ff := &fastlyFake{}
	ts := httptest.NewServer(ff)
	t.Cleanup(ts.Close)
	p := &cdn.Fastly{Endpoint: ts.URL, ServiceID: "svc", Token: "tok"}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return ff, func(c *Config) { c.Purger = p }
}

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Property: a rollback serves the named earlier version at once here and
// within a poll on a replica, is audited in the log, purges the list from
// the CDN, refuses versions not held or not earlier, and does not stop the
// pipeline's next publish from moving the list forward.
func TestRollbackEndpoint(t *testing.T) {
	ff, fastly := withFastly(t)
	var logs syncBuffer
	e := newEnv(t, func(c *Config) {
		fastly(c)
		c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	k := key("video", "IN", schemas.Window1h)
	for v := int64(1); v <= 3; v++ {
		e.publish(t, mkList(k, v, 50, uint64(v)))
	}
	e.start(t)
	replica := newEnv(t, func(c *Config) {
		c.KeyPrefix = e.cfg.KeyPrefix
		c.Redis = e.rc
		c.PollInterval = 100 * time.Millisecond
	})
	replica.start(t)
	admin := map[string]string{"Authorization": "Bearer " + testToken, "Content-Type": "application/json"}

	resp, b := e.do(t, "GET", "/v1/admin/rollback?type=video&scope=IN&window=1h", admin, "")
	if resp.StatusCode != 200 || !bytes.Contains(b, []byte(`"current":3,"held":[1,2,3]`)) {
		t.Fatalf("held versions: %d %s", resp.StatusCode, b)
	}
	for body, code := range map[string]int{
		`{"type":"video","scope":"IN","window":"1h","version":3}`:  http.StatusConflict,
		`{"type":"video","scope":"IN","window":"1h","version":99}`: http.StatusConflict,
		`{"type":"video","scope":"IN","window":"1h","version":0}`:  http.StatusNotFound,
		`{"type":"video","scope":"US","window":"1h","version":1}`:  http.StatusNotFound,
		`{"type":"video","scope":"IN","window":"2h","version":1}`:  http.StatusBadRequest,
	} {
		if resp, b := e.do(t, "POST", "/v1/admin/rollback", admin, body); resp.StatusCode != code {
			t.Errorf("%s: %d %s, want %d", body, resp.StatusCode, b, code)
		}
	}
	if resp, _ := e.do(t, "POST", "/v1/admin/rollback", map[string]string{"Content-Type": "application/json"}, `{}`); resp.StatusCode != 401 {
		t.Errorf("rollback without a token: %d", resp.StatusCode)
	}

	resp, b = e.do(t, "POST", "/v1/admin/rollback", admin, `{"type":"video","scope":"IN","window":"1h","version":1,"reason":"bad publish"}`)
	if resp.StatusCode != 200 || !bytes.Contains(b, []byte(`{"list":"video:IN:1h","from":3,"to":1,"purged":true}`)) {
		t.Fatalf("rollback: %d %s", resp.StatusCode, b)
	}
	if got, _ := e.top(t, k, 10); got.Version != 1 {
		t.Fatalf("after rollback this server serves v%d, want v1", got.Version)
	}
	eventually(t, 3*time.Second, "replica serves v1", func() bool { got, _ := replica.top(t, k, 10); return got.Version == 1 })
	if p := ff.purged(); len(p) != 1 || p[0] != "topk:video:IN:1h" {
		t.Fatalf("purged %v, want the list's key", p)
	}
	audit := logs.String()
	if !strings.Contains(audit, `"msg":"audit: list rolled back","list":"video:IN:1h","from":3,"to":1,"reason":"bad publish"`) {
		t.Fatalf("no audit record in the log:\n%s", audit)
	}

	// The pipeline's next publish moves the list forward again.
	e.publish(t, mkList(k, 4, 50, 4))
	eventually(t, 3*time.Second, "v4 served after the rollback", func() bool { got, _ := e.top(t, k, 10); return got.Version == 4 })
	eventually(t, 3*time.Second, "replica serves v4", func() bool { got, _ := replica.top(t, k, 10); return got.Version == 4 })
}

// Property: list responses carry Surrogate-Key headers naming the API, the
// type and the list; a takedown purges the type's key through the CDN's API.
func TestTakedownPurgesCDN(t *testing.T) {
	ff, fastly := withFastly(t)
	e := newEnv(t, fastly)
	k := key("video", "global", schemas.Window5m)
	e.publish(t, mkList(k, 1, 20, 1))
	e.start(t)
	_, h := e.top(t, k, 5)
	if got := h.Get("Surrogate-Key"); got != "topk topk:video topk:video:global:5m" {
		t.Fatalf("Surrogate-Key %q", got)
	}
	admin := map[string]string{"Authorization": "Bearer " + testToken, "Content-Type": "application/json"}
	if resp, b := e.do(t, "POST", "/v1/admin/removals", admin, `{"type":"video","item":"v_3","reason":"dmca"}`); resp.StatusCode != 201 {
		t.Fatalf("takedown: %d %s", resp.StatusCode, b)
	}
	if p := ff.purged(); len(p) != 1 || p[0] != "topk:video" {
		t.Fatalf("purged %v, want [topk:video]", p)
	}
}

// Property: entries carry the catalogue's title and thumbnail once loaded
// (this server at once, a replica through the change message); unknown
// items keep their id alone; a bad record is refused naming its line.
func TestCatalogueHydration(t *testing.T) {
	e := newEnv(t, nil)
	k := key("video", "global", schemas.Window1m)
	e.publish(t, mkList(k, 1, 20, 1))
	e.start(t)
	replica := newEnv(t, func(c *Config) { c.KeyPrefix = e.cfg.KeyPrefix; c.Redis = e.rc })
	replica.start(t)
	hdr := map[string]string{"Authorization": "Bearer " + testToken, "Content-Type": "application/x-ndjson"}
	body := `{"type":"video","item":"v_0","title":"Cat plays piano","thumbnail":"https://img.example/v_0.jpg"}
{"type":"video","item":"v_2","title":"Rain in Mumbai"}
{"type":"hashtag","item":"v_1","title":"not a video"}
`
	resp, b := e.do(t, "POST", "/v1/admin/catalogue", hdr, body)
	if resp.StatusCode != 200 || !bytes.Contains(b, []byte(`"loaded":3`)) {
		t.Fatalf("load: %d %s", resp.StatusCode, b)
	}
	check := func(env *testEnv) bool {
		got, _ := env.top(t, k, 3)
		return got.Items[0].Title == "Cat plays piano" && got.Items[0].Thumbnail == "https://img.example/v_0.jpg" &&
			got.Items[1].Item == "v_1" && got.Items[1].Title == "" &&
			got.Items[2].Title == "Rain in Mumbai" && got.Items[2].Thumbnail == ""
	}
	if !check(e) {
		got, _ := e.top(t, k, 3)
		t.Fatalf("hydrated entries: %+v", got.Items)
	}
	eventually(t, 3*time.Second, "replica hydrates", func() bool { return check(replica) })
	// The next version is hydrated when installed.
	e.publish(t, mkList(k, 2, 20, 2))
	eventually(t, 3*time.Second, "v2 served with titles", func() bool {
		got, _ := e.top(t, k, 3)
		return got.Version == 2 && check(e)
	})
	resp, b = e.do(t, "POST", "/v1/admin/catalogue", hdr, `{"type":"video","item":"v_5","title":"ok"}`+"\n"+`{"type":"video","item":"v_6","thumbnail":"javascript:x"}`)
	if resp.StatusCode != 400 || !bytes.Contains(b, []byte("line 2")) {
		t.Fatalf("bad record: %d %s", resp.StatusCode, b)
	}
	if resp, _ := e.do(t, "POST", "/v1/admin/catalogue", map[string]string{"Content-Type": "application/x-ndjson"}, body); resp.StatusCode != 401 {
		t.Fatalf("catalogue without a token: %d", resp.StatusCode)
	}
}
