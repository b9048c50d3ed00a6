package api

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/topk-dev/topk/internal/pubsubx"
	"github.com/topk-dev/topk/internal/svctest"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/publish/liststore"
)

// testEnv is a server under test with its Redis, Pub/Sub fake and HTTP
// endpoint.
type testEnv struct {
	srv   *Server
	ts    *httptest.Server
	rc    *redis.Client
	mr    *miniredis.Miniredis // nil on a real Redis
	store *liststore.Store     // a separate writer, as the pipeline would be
	fake  *pubsubx.Embedded    // nil when cfg.PubSubAddr was set by the test
	cfg   Config
}

const testToken = "s3cret-token"

// testRedis returns a client on REDIS_ADDR (real Redis, as in CI) or on a
// fresh miniredis, and a key prefix unique to the test whose keys are
// deleted at the end (never a FLUSH).
func testRedis(t testing.TB) (*redis.Client, *miniredis.Miniredis, string) {
	t.Helper()
	var mr *miniredis.Miniredis
	addr := os.Getenv("REDIS_ADDR")
	svctest.Report(t, "redis", addr != "", "REDIS_ADDR is not set: miniredis")
	if addr == "" {
		mr = miniredis.RunT(t)
		addr = mr.Addr()
	}
	rc := redis.NewClient(&redis.Options{Addr: addr})
	if err := rc.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("redis %s: %v", addr, err)
	}
	prefix := fmt.Sprintf("topktest:%s:%d", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().UnixNano())
	t.Cleanup(func() {
		ctx := context.Background()
		iter := rc.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			rc.Del(ctx, iter.Val())
		}
		rc.Close()
	})
	return rc, mr, prefix
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() && os.Getenv("TOPK_TEST_LOGS") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// newEnv starts a server on a test Redis and an embedded Pub/Sub fake. mod
// adjusts the config before New.
func newEnv(t testing.TB, mod func(*Config)) *testEnv {
	t.Helper()
	rc, mr, prefix := testRedis(t)
	e := &testEnv{rc: rc, mr: mr}
	e.cfg = Config{
		Redis: rc, KeyPrefix: prefix, AdminToken: testToken,
		Logger: testLogger(t), PollInterval: 200 * time.Millisecond,
	}
	if mod != nil {
		mod(&e.cfg)
	}
	if e.cfg.PubSub == nil && e.cfg.PubSubAddr == "" {
		e.fake = pubsubx.StartEmbedded()
		t.Cleanup(func() { e.fake.Close() })
		e.cfg.PubSubAddr = e.fake.Addr
	}
	e.store = liststore.New(rc, liststore.Options{Prefix: e.cfg.KeyPrefix})
	return e
}

// start creates the server (after the test published what it wants loaded at
// startup).
func (e *testEnv) start(t testing.TB) *testEnv {
	t.Helper()
	srv, err := New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	e.ts = httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		e.ts.Close()
		srv.Close()
	})
	return e
}

func (e *testEnv) publish(t testing.TB, l *schemas.List) {
	t.Helper()
	moved, err := e.store.Publish(context.Background(), l)
	if err != nil || !moved {
		t.Fatalf("publish %s v%d: moved=%v err=%v", l.Key(), l.Version, moved, err)
	}
}

// do performs a request on the test server and returns the response and its
// whole body.
func (e *testEnv) do(t testing.TB, method, path string, hdr map[string]string, body string) (*http.Response, []byte) {
	t.Helper()
	return request(t, method, e.ts.URL+path, hdr, body)
}

// request performs a request on url and returns the response and its whole
// body.
func request(t testing.TB, method, url string, hdr map[string]string, body string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := rawClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// rawClient does not ask for gzip by itself nor inflate: tests see the
// bytes sent.
var rawClient = &http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 10 * time.Second}

var testAsOf = time.Date(2026, 11, 30, 10, 42, 0, 0, time.UTC)

// mkList builds a valid list of n entries with seeded, rank-ordered counts
// and items "v_0".."v_{n-1}" (so that the same item is in every window).
// The first 1,000 entries are certified.
func mkList(k schemas.ListKey, version int64, n int, seed uint64) *schemas.List {
	rng := rand.New(rand.NewPCG(seed, uint64(version)))
	l := &schemas.List{
		Type: k.Type, Scope: k.Scope, Window: k.Window,
		AsOf:         testAsOf.Add(time.Duration(version) * time.Second),
		MaxOvercount: 9, Complete: n >= 1000, CertifiedK: min(n, 1000), Version: version,
	}
	count := uint64(1_000_000)
	for i := 0; i < n; i++ {
		count -= uint64(rng.IntN(500))
		l.Items = append(l.Items, schemas.Entry{Rank: i + 1, Item: fmt.Sprintf("v_%d", i), Count: count, Lower: count - uint64(rng.IntN(10))})
	}
	return l
}

func key(typ, scope string, w schemas.Window) schemas.ListKey {
	return schemas.ListKey{Type: typ, Scope: scope, Window: w}
}

func topPath(k schemas.ListKey, n int) string {
	return fmt.Sprintf("/v1/top?type=%s&scope=%s&window=%s&k=%d", k.Type, k.Scope, k.Window, n)
}

// eventually polls cond until it holds or d passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
