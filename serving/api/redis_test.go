package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/topk-dev/topk/internal/svctest"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/publish/liststore"
)

func decodeList(t *testing.T, b []byte) *schemas.List {
	t.Helper()
	var l schemas.List
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatalf("%v: %.200s", err, b)
	}
	return &l
}

// Property: a pointer move reaches the read path through pub/sub alone
// (polling disabled), a list that appears is served, and a move whose
// message was lost is found by polling.
func TestPointerMovesPickedUp(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.PollInterval = time.Hour; c.ScanInterval = time.Hour })
	k := key("video", "global", schemas.Window1m)
	e.publish(t, mkList(k, 1, 30, 1))
	e.start(t)
	version := func(k schemas.ListKey) int64 {
		resp, b := e.do(t, "GET", topPath(k, 5), nil, "")
		if resp.StatusCode == 404 || resp.StatusCode == 400 {
			return 0
		}
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		return decodeList(t, b).Version
	}
	if v := version(k); v != 1 {
		t.Fatalf("version %d, want 1", v)
	}
	for v := int64(2); v <= 5; v++ {
		start := time.Now()
		e.publish(t, mkList(k, v, 30, uint64(v)))
		eventually(t, 3*time.Second, fmt.Sprintf("pub/sub move to v%d", v), func() bool { return version(k) == v })
		t.Logf("v%d served %v after publish", v, time.Since(start).Round(time.Millisecond))
	}
	// A list that did not exist at startup.
	k2 := key("hashtag", "IN", schemas.Window5m)
	e.publish(t, mkList(k2, 7, 30, 7))
	eventually(t, 3*time.Second, "new list served", func() bool { return version(k2) == 7 })

	// Polling fallback: move the pointer without a message (as if it was
	// lost across a reconnect); a second server polling every 100 ms sees it.
	e2 := newEnv(t, func(c *Config) {
		c.KeyPrefix = e.cfg.KeyPrefix
		c.Redis = e.rc
		c.PollInterval = 100 * time.Millisecond
	})
	e2.start(t)
	blob, _ := schemas.MarshalList(mkList(k, 6, 30, 6))
	silent := liststore.New(e.rc, liststore.Options{Prefix: e.cfg.KeyPrefix, Channel: e.cfg.KeyPrefix + ":elsewhere"})
	if moved, err := silent.PublishRaw(context.Background(), k, 6, blob); err != nil || !moved {
		t.Fatalf("silent publish: %v %v", moved, err)
	}
	e2v := func() int64 {
		_, b := e2.do(t, "GET", topPath(k, 5), nil, "")
		return decodeList(t, b).Version
	}
	eventually(t, 3*time.Second, "poll finds the silent move", func() bool { return e2v() == 6 })
}

// redisServer runs a private redis-server on a free loopback port.
type redisServer struct {
	cmd  *exec.Cmd
	port int
}

func startRedisServer(t *testing.T, port int) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		svctest.Need(t, "redis-server", false, "redis-server binary not found (apt-get install redis-server): cannot run the Redis-stopped test")
	}
	svctest.Need(t, "redis-server", true, "")
	if port == 0 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rs := &redisServer{cmd: cmd, port: port}
	t.Cleanup(rs.kill)
	c := redis.NewClient(&redis.Options{Addr: rs.addr()})
	defer c.Close()
	eventually(t, 5*time.Second, "redis-server up", func() bool { return c.Ping(context.Background()).Err() == nil })
	return rs
}

func (rs *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(rs.port) }

func (rs *redisServer) kill() {
	if rs.cmd.ProcessState == nil {
		rs.cmd.Process.Kill()
		rs.cmd.Wait()
	}
}

// Property: with Redis killed mid-test, reads keep answering from memory
// (zero 5xx, never an empty list), turn stale once the list has not moved
// for StaleAfter, ingest still publishes; when Redis comes back, new
// versions are served again.
func TestRedisStoppedMidTest(t *testing.T) {
	rs := startRedisServer(t, 0)
	const staleAfter = 1500 * time.Millisecond
	e := newEnv(t, func(c *Config) {
		c.Redis = nil
		c.RedisAddr = rs.addr()
		c.StaleAfter = staleAfter
		c.PollInterval = 100 * time.Millisecond
		c.ScanInterval = 300 * time.Millisecond
	})
	rc := redis.NewClient(&redis.Options{Addr: rs.addr()})
	defer rc.Close()
	e.store = liststore.New(rc, liststore.Options{Prefix: e.cfg.KeyPrefix})
	var keys []schemas.ListKey
	for _, w := range schemas.Windows {
		k := key("video", "global", w)
		keys = append(keys, k)
		e.publish(t, mkList(k, 1, 200, 1))
	}
	e.start(t)

	killed := time.Now()
	rs.kill()
	var total, staleSeen, fiveXX int
	firstStale := time.Duration(-1)
	for time.Since(killed) < staleAfter+1500*time.Millisecond {
		for _, k := range keys {
			resp, b := e.do(t, "GET", topPath(k, 100), nil, "")
			total++
			if resp.StatusCode >= 500 {
				fiveXX++
				continue
			}
			if resp.StatusCode != 200 {
				t.Fatalf("%s: %d %s", k, resp.StatusCode, b)
			}
			l := decodeList(t, b)
			if len(l.Items) != 100 || l.Version != 1 {
				t.Fatalf("%s: %d items v%d while Redis is down", k, len(l.Items), l.Version)
			}
			if l.Stale {
				staleSeen++
				if firstStale < 0 {
					firstStale = time.Since(killed)
				}
			} else if time.Since(killed) > staleAfter+300*time.Millisecond {
				t.Fatalf("%s not stale %v after Redis stopped", k, time.Since(killed))
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if fiveXX != 0 {
		t.Fatalf("%d of %d reads got 5xx", fiveXX, total)
	}
	if staleSeen == 0 {
		t.Fatalf("no stale read in %d", total)
	}
	t.Logf("%d reads while Redis was down, 0 5xx, stale from %v (threshold %v)", total, firstStale.Round(time.Millisecond), staleAfter)
	for _, p := range []string{"/v1/lists", "/readyz", "/healthz", "/"} {
		if resp, b := e.do(t, "GET", p, nil, ""); resp.StatusCode != 200 {
			t.Fatalf("%s with Redis down: %d %s", p, resp.StatusCode, b)
		}
	}
	// Ingest without Redis: published without deduplication.
	body := fmt.Sprintf(`{"beacon_id":"down-1","events":[{"event_id":"e1","type":"video","item":"v_1","ts":%q}]}`, time.Now().UTC().Format(time.RFC3339Nano))
	if resp, b := e.do(t, "POST", "/v1/events", map[string]string{"Content-Type": "application/json"}, body); resp.StatusCode != 202 {
		t.Fatalf("ingest with Redis down: %d %s", resp.StatusCode, b)
	}
	_, m := e.do(t, "GET", "/metrics", nil, "")
	if !strings.Contains(string(m), "topk_serving_redis_errors_total") {
		t.Fatalf("no redis error metric:\n%s", grepLines(m, "redis"))
	}

	// Redis back (empty: no persistence), the pipeline publishes again.
	startRedisServer(t, rs.port)
	k := keys[2]
	e.publish(t, mkList(k, 2, 200, 2))
	eventually(t, 10*time.Second, "new version after Redis restart", func() bool {
		_, b := e.do(t, "GET", topPath(k, 10), nil, "")
		l := decodeList(t, b)
		return l.Version == 2 && !l.Stale
	})
}

// Property: a Redis call cut short by the server's own shutdown (its
// context cancelled) is not a Redis failure: no error counted, Redis not
// marked unreachable; a real error is both. The same for a catalogue
// lookup.
func TestRedisFailedIgnoresShutdown(t *testing.T) {
	e := newEnv(t, nil).start(t)
	errsOf := func(op string) float64 {
		var m dto.Metric
		if err := e.srv.metrics.redisErrors.WithLabelValues(op).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	errs := func() float64 { return errsOf("current") }
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	l := &schemas.List{Type: "video", Scope: "global", Window: schemas.Window1h, Items: []schemas.Entry{{Item: "v_1", Count: 1}}}
	e.srv.lookupTitles(cancelled, l)
	if n := errsOf("catalogue"); n != 0 {
		t.Fatalf("a cancelled catalogue lookup counted %v Redis errors, want 0", n)
	}
	reachable := func() bool {
		e.srv.state.mu.Lock()
		defer e.srv.state.mu.Unlock()
		return e.srv.state.redisOK
	}
	e.srv.redisWorked()
	e.srv.redisFailed("current", fmt.Errorf("current video:global:1h: %w", context.Canceled))
	if n, ok := errs(), reachable(); n != 0 || !ok {
		t.Fatalf("after a cancelled call: %v errors counted, reachable %v; want 0, true", n, ok)
	}
	e.srv.redisFailed("current", fmt.Errorf("current video:global:1h: %w", net.ErrClosed))
	if n, ok := errs(), reachable(); n != 1 || ok {
		t.Fatalf("after a failed call: %v errors counted, reachable %v; want 1, false", n, ok)
	}
}
