package api

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/api/option"

	"github.com/topk-dev/topk/internal/svctest"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/exact/store"
)

var chartInstanceSeq atomic.Int64

// exactBackends runs f against an in-process bttest, and against the
// official Bigtable emulator when BIGTABLE_EMULATOR_HOST is set (CI sets
// it). Each run has its own instance, so tables never collide.
func exactBackends(t *testing.T, f func(t *testing.T, st *store.Store, stop func())) {
	t.Run("bttest", func(t *testing.T) {
		addr, stop, err := store.Embedded()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		f(t, openExact(t, store.EmulatorOptions(addr)...), stop)
	})
	t.Run("emulator", func(t *testing.T) {
		svctest.Need(t, "bigtable", os.Getenv("BIGTABLE_EMULATOR_HOST") != "", "BIGTABLE_EMULATOR_HOST is not set (CI sets it)")
		f(t, openExact(t), nil)
	})
}

func openExact(t *testing.T, opts ...option.ClientOption) *store.Store {
	t.Helper()
	ctx := context.Background()
	inst := fmt.Sprintf("serving%d-%d", time.Now().UnixNano(), chartInstanceSeq.Add(1))
	st, err := store.Open(ctx, "topk-test", inst, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.EnsureTables(ctx); err != nil {
		t.Fatal(err)
	}
	return st
}

// chartDay is the date the tests chart; the clock starts the next morning.
var chartDay = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

// testClock is a settable Config.Now.
type testClock struct{ t atomic.Int64 }

func newClock(t time.Time) *testClock { c := &testClock{}; c.set(t); return c }
func (c *testClock) set(t time.Time)  { c.t.Store(t.UnixNano()) }
func (c *testClock) now() time.Time   { return time.Unix(0, c.t.Load()).UTC() }
func (c *testClock) add(d time.Duration) {
	c.t.Add(int64(d))
}

// chartEnv is a server with an exact store and lists for video in global
// and IN (so both scopes are known), at 05:00 the day after chartDay.
func chartEnv(t *testing.T, st *store.Store) (*testEnv, *testClock) {
	clk := newClock(chartDay.Add(29 * time.Hour))
	e := newEnv(t, func(c *Config) { c.Exact = st; c.Now = clk.now; c.Types = []string{"video", "song"} })
	e.publish(t, mkList(key("video", "global", schemas.Window1h), 1, 5, 1))
	e.publish(t, mkList(key("video", "IN", schemas.Window1h), 1, 5, 2))
	return e.start(t), clk
}

type chartJSON struct {
	Type           string `json:"type"`
	Scope          string `json:"scope"`
	Date           string `json:"date"`
	Final          *bool  `json:"final"`
	HoursRecounted int    `json:"hours_recounted"`
	Items          []struct {
		Rank  int    `json:"rank"`
		Item  string `json:"item"`
		Count int64  `json:"count"`
	} `json:"items"`
}

func (e *testEnv) chart(t *testing.T, path string, hdr map[string]string) (*http.Response, []byte, chartJSON) {
	t.Helper()
	resp, body := e.do(t, "GET", path, hdr, "")
	var c chartJSON
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, &c); err != nil {
			t.Fatalf("chart is not JSON: %v: %s", err, body)
		}
		if c.Final == nil || c.Items == nil {
			t.Fatalf("chart without final or items: %s", body)
		}
	}
	return resp, body, c
}

// genDay writes random exact counts for every hour of chartDay and for the
// hours on either side of it, in two scopes and two types, with item ids
// that need escaping in row keys. It returns every count written.
func genDay(t *testing.T, st *store.Store, seed uint64) []schemas.ExactCount {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	var all []schemas.ExactCount
	for h := -1; h <= 24; h++ {
		hour := chartDay.Add(time.Duration(h) * time.Hour)
		var counts []schemas.ExactCount
		for _, l := range [][2]string{{"video", "global"}, {"video", "IN"}, {"song", "global"}} {
			for i := range 300 {
				if rng.IntN(3) == 0 {
					continue
				}
				counts = append(counts, schemas.ExactCount{Hour: hour, Type: l[0], Scope: l[1],
					Item: fmt.Sprintf("v#%d%%", i), Count: int64(1 + rng.IntN(40)*rng.IntN(40))})
			}
		}
		if err := st.WriteHour(context.Background(), hour, counts, MaxK); err != nil {
			t.Fatal(err)
		}
		all = append(all, counts...)
	}
	return all
}

// expected is the independent chart: counts of (typ, scope) in the given
// hours summed per item, ranked by count then item, minus deny.
func expected(all []schemas.ExactCount, typ, scope string, hours map[time.Time]bool, deny map[string]bool) [][2]any {
	sum := map[string]int64{}
	for _, c := range all {
		if c.Type == typ && c.Scope == scope && hours[c.Hour] && !deny[c.Item] {
			sum[c.Item] += c.Count
		}
	}
	var out [][2]any
	for item, n := range sum {
		out = append(out, [2]any{item, n})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i][1].(int64), out[j][1].(int64)
		if a != b {
			return a > b
		}
		return out[i][0].(string) < out[j][0].(string)
	})
	return out
}

func checkChart(t *testing.T, c chartJSON, want [][2]any, k int) {
	t.Helper()
	if len(want) > k {
		want = want[:k]
	}
	if len(c.Items) != len(want) {
		t.Fatalf("%d items, want %d", len(c.Items), len(want))
	}
	for i, it := range c.Items {
		if it.Rank != i+1 || it.Item != want[i][0].(string) || it.Count != want[i][1].(int64) {
			t.Fatalf("entry %d = %+v, want rank %d %v", i, it, i+1, want[i])
		}
	}
}

// Property: the daily chart is the exact sum of the day's recounted hours
// (no hour of another day, type or scope), ranked by count then item; final
// is false with 23 of 24 hours recounted and true with all 24; removed items
// are left out with ranks renumbered; a final chart is cached (max-age 3600,
// ETag, 304) and a non-final one for a minute (max-age 60).
func TestChartsDailyExact(t *testing.T) {
	exactBackends(t, func(t *testing.T, st *store.Store, _ func()) {
		ctx := context.Background()
		all := genDay(t, st, 1)
		e, clk := chartEnv(t, st)
		const missing = 17
		done := map[time.Time]bool{}
		for h := -1; h <= 24; h++ {
			if h == missing {
				continue
			}
			hour := chartDay.Add(time.Duration(h) * time.Hour)
			if err := st.MarkHourDone(ctx, hour); err != nil {
				t.Fatal(err)
			}
			if h >= 0 && h < 24 { // the neighbours are done but not the day's
				done[hour] = true
			}
		}
		path := "/v1/charts/daily?type=video&scope=IN&date=2026-11-30&k=1000"

		// 23 hours: not final, the sum of the 23.
		resp, _, c := e.chart(t, path, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if *c.Final || c.HoursRecounted != 23 || c.Type != "video" || c.Scope != "IN" || c.Date != "2026-11-30" {
			t.Fatalf("23 hours: final=%v hours=%d %s/%s/%s", *c.Final, c.HoursRecounted, c.Type, c.Scope, c.Date)
		}
		checkChart(t, c, expected(all, "video", "IN", done, nil), 1000)
		if cc := resp.Header.Get("Cache-Control"); cc != "public, max-age=60" {
			t.Fatalf("non-final Cache-Control %q", cc)
		}

		// The last hour is recounted; within the minute the cached chart
		// stands, after it the chart is final.
		hour := chartDay.Add(missing * time.Hour)
		if err := st.MarkHourDone(ctx, hour); err != nil {
			t.Fatal(err)
		}
		done[hour] = true
		if _, _, c := e.chart(t, path, nil); *c.Final {
			t.Fatal("non-final chart not cached for its minute")
		}
		clk.add(61 * time.Second)
		resp, body, c := e.chart(t, path, nil)
		if !*c.Final || c.HoursRecounted != 24 {
			t.Fatalf("24 hours: final=%v hours=%d", *c.Final, c.HoursRecounted)
		}
		want := expected(all, "video", "IN", done, nil)
		checkChart(t, c, want, 1000)
		if cc := resp.Header.Get("Cache-Control"); cc != "public, max-age=3600" {
			t.Fatalf("final Cache-Control %q", cc)
		}
		if sk := resp.Header.Get("Surrogate-Key"); sk != "topk topk:video topk:chart:video:IN" {
			t.Fatalf("final chart Surrogate-Key %q: a takedown's purge of topk:video must reach it", sk)
		}
		etag := resp.Header.Get("Etag")
		if r304, b := e.do(t, "GET", path, map[string]string{"If-None-Match": etag}, ""); r304.StatusCode != 304 || len(b) != 0 {
			t.Fatalf("If-None-Match %s: status %d body %q", etag, r304.StatusCode, b)
		}
		// gzip is the same document.
		rgz, zb := e.do(t, "GET", path, map[string]string{"Accept-Encoding": "gzip"}, "")
		zr, err := gzip.NewReader(bytes.NewReader(zb))
		if err != nil || rgz.Header.Get("Content-Encoding") != "gzip" {
			t.Fatalf("gzip: %v %q", err, rgz.Header.Get("Content-Encoding"))
		}
		if plain, _ := io.ReadAll(zr); !bytes.Equal(plain, body) || rgz.Header.Get("Etag") == etag {
			t.Fatal("gzip body differs, or shares the plain ETag")
		}

		// Other scope, type and k: each its own exact chart.
		_, _, c = e.chart(t, "/v1/charts/daily?type=video&date=2026-11-30&k=7", nil)
		checkChart(t, c, expected(all, "video", "global", done, nil), 7)
		_, _, c = e.chart(t, "/v1/charts/daily?type=song&date=2026-11-30", nil)
		if len(c.Items) != defaultK {
			t.Fatalf("default k: %d items", len(c.Items))
		}
		checkChart(t, c, expected(all, "song", "global", done, nil), defaultK)

		// A final day is served from the cache: rewriting an hour in the
		// store does not change it.
		if err := st.WriteHour(ctx, chartDay, nil, MaxK); err != nil {
			t.Fatal(err)
		}
		if _, b2, _ := e.chart(t, path, nil); !bytes.Equal(b2, body) {
			t.Fatal("final chart recomputed")
		}

		// Removals: the top two items go, ranks close up, nothing else moves.
		deny := map[string]bool{}
		for _, w := range want[:2] {
			item := w[0].(string)
			deny[item] = true
			r, b := e.do(t, "POST", "/v1/admin/removals", map[string]string{"Authorization": "Bearer " + testToken, "Content-Type": "application/json"},
				fmt.Sprintf(`{"type":"video","item":%q,"reason":"test"}`, item))
			if r.StatusCode/100 != 2 {
				t.Fatalf("remove %s: %d %s", item, r.StatusCode, b)
			}
		}
		_, _, c = e.chart(t, "/v1/charts/daily?type=video&scope=IN&date=2026-11-30&k=5", nil)
		checkChart(t, c, want[2:], 5)
		for _, it := range c.Items {
			if deny[it.Item] {
				t.Fatalf("removed item %s served", it.Item)
			}
		}
	})
}

// Property: with more items removed than the computed chart kept beyond
// k=1000, the chart is recomputed and still returns 1000 exact entries.
func TestChartsRemovalsBeyondCut(t *testing.T) {
	addr, stop, err := store.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	st := openExact(t, store.EmulatorOptions(addr)...)
	ctx := context.Background()
	var counts []schemas.ExactCount
	for i := range 1100 {
		counts = append(counts, schemas.ExactCount{Hour: chartDay, Type: "video", Scope: "global", Item: fmt.Sprintf("i%04d", i), Count: int64(5000 - i)})
	}
	if err := st.WriteHour(ctx, chartDay, counts, MaxK); err != nil {
		t.Fatal(err)
	}
	if err := st.MarkHourDone(ctx, chartDay); err != nil {
		t.Fatal(err)
	}
	e, _ := chartEnv(t, st)
	path := "/v1/charts/daily?type=video&date=2026-11-30&k=1000"
	if _, _, c := e.chart(t, path, nil); len(c.Items) != 1000 || c.Items[0].Item != "i0000" || *c.Final || c.HoursRecounted != 1 {
		t.Fatalf("before removals: %d items, final=%v hours=%d", len(c.Items), *c.Final, c.HoursRecounted)
	}
	deny := map[string]bool{}
	for i := range 50 {
		item := fmt.Sprintf("i%04d", i*2)
		deny[item] = true
		r, b := e.do(t, "POST", "/v1/admin/removals", map[string]string{"Authorization": "Bearer " + testToken, "Content-Type": "application/json"},
			fmt.Sprintf(`{"type":"video","item":%q}`, item))
		if r.StatusCode/100 != 2 {
			t.Fatalf("remove %s: %d %s", item, r.StatusCode, b)
		}
	}
	_, _, c := e.chart(t, path, nil)
	checkChart(t, c, expected(counts, "video", "global", map[time.Time]bool{chartDay: true}, deny), 1000)
}

// Property: every bad parameter is a 400 naming it (type, scope, date, k,
// unknown or repeated), a future date included; a server without exact
// tables answers 503 "exact tables not configured"; a Bigtable failure is a
// 503 with Retry-After, never a 500.
func TestChartsBadRequests(t *testing.T) {
	addr, stop, err := store.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	st := openExact(t, store.EmulatorOptions(addr)...)
	e, _ := chartEnv(t, st)
	base := "/v1/charts/daily?type=video&date="
	cases := []struct {
		name, path string
		status     int
		param, msg string
	}{
		{"no parameters", "/v1/charts/daily", 400, "type", `"type" is required; allowed: song, video`},
		{"type unknown", "/v1/charts/daily?type=hashtag&date=2026-11-30", 400, "type", `unknown type "hashtag"`},
		{"type script tag", "/v1/charts/daily?type=%3Cscript%3E&date=2026-11-30", 400, "type", "is not an item type"},
		{"type 10 KB", "/v1/charts/daily?type=" + strings.Repeat("a", 10000) + "&date=2026-11-30", 400, "type", "..."},
		{"scope unknown", base + "2026-11-30&scope=FR", 400, "scope", `unknown scope "FR"; allowed: IN, global`},
		{"scope CRLF", base + "2026-11-30&scope=IN%0d%0aX:1", 400, "scope", `is not "global"`},
		{"date missing", "/v1/charts/daily?type=video", 400, "date", `"date" is required`},
		{"date empty", base, 400, "date", `"date" is required`},
		{"date month 13", base + "2026-13-01", 400, "date", "is not a date YYYY-MM-DD"},
		{"date February 30", base + "2026-02-30", 400, "date", "is not a date"},
		{"date short year", base + "26-11-30", 400, "date", "is not a date"},
		{"date one-digit month", base + "2026-1-30", 400, "date", "is not a date"},
		{"date with hour", base + "2026-11-30T00", 400, "date", "is not a date"},
		{"date RFC 3339", base + "2026-11-30T00:00:00Z", 400, "date", "is not a date"},
		{"date script tag", base + "%3Cscript%3E", 400, "date", "is not a date"},
		{"date tomorrow", base + "2026-12-02", 400, "date", `"date": 2026-12-02 is in the future (today is 2026-12-01 UTC)`},
		{"date far future", base + "9999-12-31", 400, "date", "in the future"},
		{"date repeated", base + "2026-11-30&date=2026-11-29", 400, "date", "given more than once"},
		{"k zero", base + "2026-11-30&k=0", 400, "k", "from 1 to 1000"},
		{"k 1001", base + "2026-11-30&k=1001", 400, "k", "from 1 to 1000"},
		{"k letters", base + "2026-11-30&k=ten", 400, "k", `"ten" is not an integer`},
		{"window is not a parameter", base + "2026-11-30&window=24h", 400, "window", "allowed: type, scope, date, k"},
		{"bad percent escape", base + "%zz", 400, "", "bad percent-escape"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := e.do(t, "GET", c.path, nil, "")
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.status, body)
			}
			var got struct{ Error, Param string }
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("not JSON: %s", body)
			}
			if got.Param != c.param || !strings.Contains(got.Error, c.msg) {
				t.Fatalf("param %q message %q; want %q containing %q", got.Param, got.Error, c.param, c.msg)
			}
			if bytes.Contains(body, []byte("<script>")) || bytes.Contains(body, []byte("\r\n")) || len(body) > 4<<10 {
				t.Fatalf("body echoes hostile input: %.200s", body)
			}
		})
	}
	if resp, _ := e.do(t, "POST", base+"2026-11-30", nil, ""); resp.StatusCode != 405 {
		t.Fatalf("POST: %d", resp.StatusCode)
	}
	// Today is allowed (a chart in progress).
	if _, _, c := e.chart(t, base+"2026-12-01", nil); *c.Final || c.HoursRecounted != 0 || len(c.Items) != 0 {
		t.Fatalf("today with nothing recounted: %+v", c)
	}

	// Bigtable failing (its client closed): 503 with Retry-After.
	st.Close()
	resp, body := e.do(t, "GET", base+"2026-11-29", nil, "")
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "exact tables unavailable") {
		t.Fatalf("store down: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}

	// No store configured: 503, even for a good request.
	none := newEnv(t, func(c *Config) { c.Types = []string{"video"} }).start(t)
	resp, body = none.do(t, "GET", base+"2026-11-30", nil, "")
	if resp.StatusCode != 503 || !strings.Contains(string(body), "exact tables not configured") {
		t.Fatalf("no store: %d %s", resp.StatusCode, body)
	}
}

// Property: concurrent first requests for one day (several k) share the
// computation and all get the exact chart; safe under the race detector.
func TestChartsConcurrentFirstRequests(t *testing.T) {
	addr, stop, err := store.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	st := openExact(t, store.EmulatorOptions(addr)...)
	all := genDay(t, st, 3)
	hours := map[time.Time]bool{}
	for h := range 24 {
		hours[chartDay.Add(time.Duration(h)*time.Hour)] = true
		if err := st.MarkHourDone(context.Background(), chartDay.Add(time.Duration(h)*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	e, _ := chartEnv(t, st)
	want := expected(all, "video", "global", hours, nil)
	errs := make(chan error, 16)
	for i := range 16 {
		go func() {
			k := 1 + i%4*50
			resp, body := e.do(t, "GET", fmt.Sprintf("/v1/charts/daily?type=video&date=2026-11-30&k=%d", k), nil, "")
			var c chartJSON
			if err := json.Unmarshal(body, &c); err != nil || resp.StatusCode != 200 {
				errs <- fmt.Errorf("k=%d: %d %s", k, resp.StatusCode, body)
				return
			}
			if len(c.Items) != min(k, len(want)) || !*c.Final {
				errs <- fmt.Errorf("k=%d: %d items final=%v", k, len(c.Items), *c.Final)
				return
			}
			for j, it := range c.Items {
				if it.Item != want[j][0].(string) || it.Count != want[j][1].(int64) || it.Rank != j+1 {
					errs <- fmt.Errorf("k=%d entry %d = %+v, want %v", k, j, it, want[j])
					return
				}
			}
			errs <- nil
		}()
	}
	for range 16 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
