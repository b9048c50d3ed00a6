package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/redis/go-redis/v9"

	"github.com/topk-dev/topk/internal/emutest"
	"github.com/topk-dev/topk/internal/pubsubx"
	"github.com/topk-dev/topk/internal/redistest"
	"github.com/topk-dev/topk/internal/retry"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/exact/store"
	"github.com/topk-dev/topk/transforms/publish/liststore"
)

// The fault-injection suite: the real serving binary (built by the test)
// against real services, one fault at a time, each with the checks the
// contract asks for, and a table of what each check found. Services: a
// private redis-server (the test freezes and kills it, so never the shared
// one), Bigtable at BIGTABLE_EMULATOR_HOST (CI) or an in-process bttest, and
// for the Pub/Sub restart a private official emulator (or, without the
// gcloud SDK, pstest behind a Proxy the test cuts: an outage instead of a
// restart, said so in the table). The table goes to the test log and, when
// TOPK_FAULTS_TABLE names a file, to that file (.ci/run prints it).
//
// Faults and checks:
//   - Redis frozen 15 s then killed 15 s (30 s down) while the pipeline
//     publishes and clients read: no read answers 5xx or an empty list,
//     the version served never goes back, the publisher never returns an
//     error, and the newest list is served soon after Redis returns.
//   - The serving binary killed (SIGKILL) and restarted on a Redis that
//     lost its data: a removed item stays removed, GET /v1/admin/removals
//     still lists it.
//   - The Pub/Sub emulator restarted while clients post beacons: every
//     beacon answered 202 reaches a subscriber; every other answer is a 503
//     with Retry-After, never a connection closed without an answer.
//   - The fast path killed with SIGKILL at three moments while events
//     arrive, its recovery log's Bigtable cut for 15 s, then its Pub/Sub
//     cut for 20 s (TestFastPathKilled, fastpath_test.go): the job keeps
//     running through both cuts, and the lists count every event exactly
//     once after the last start and after each service returns.
//   - The archiver killed with SIGKILL twice mid-hour, then its Pub/Sub
//     cut for 20 s (TestArchiverKilled, archive_test.go): it keeps
//     running, and the archive holds every published event_id.

type row struct{ fault, check, found string }

type report struct {
	mu   sync.Mutex
	rows []row
	t    *testing.T
}

func (r *report) add(fault, check string, ok bool, found string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	msg := fmt.Sprintf(found, args...)
	if !ok {
		msg = "FAIL: " + msg
		r.t.Errorf("%s: %s: %s", fault, check, msg)
	}
	r.rows = append(r.rows, row{fault, check, msg})
}

func (r *report) print() {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-38s | %-52s | %s\n", "fault", "check", "found")
	fmt.Fprintf(&b, "%s-+-%s-+-%s\n", strings.Repeat("-", 38), strings.Repeat("-", 52), strings.Repeat("-", 40))
	for _, x := range r.rows {
		fmt.Fprintf(&b, "%-38s | %-52s | %s\n", x.fault, x.check, x.found)
	}
	r.t.Log(b.String())
	// go test shows a passing test's log only with -v: .ci/run names a
	// file here and prints it after the tests.
	// Each test of the suite appends its own table.
	if f := os.Getenv("TOPK_FAULTS_TABLE"); f != "" {
		out, err := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			_, err = out.WriteString(b.String())
			err = errors.Join(err, out.Close())
		}
		if err != nil {
			r.t.Errorf("writing the table to %s: %v", f, err)
		}
	}
}

// buildBinary builds the command in pkg (relative to the module root, e.g.
// "./serving") into the test's temporary directory.
func buildBinary(t *testing.T, pkg string) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// pubsubEnv is the Pub/Sub the kill tests use: PUBSUB_EMULATOR_HOST's
// (the official emulator in CI), or an in-process pstest, which lives in
// the test's process and so outlives a killed job.
func pubsubEnv(t *testing.T) (addr, where string) {
	if addr := os.Getenv(pubsubx.EnvEmulator); addr != "" {
		return addr, "the Pub/Sub emulator at " + addr
	}
	emb := pubsubx.StartEmbedded()
	t.Cleanup(func() { emb.Close() })
	return emb.Addr, "an in-process pstest (" + pubsubx.EnvEmulator + " unset)"
}

// server is one run of the serving binary.
type server struct {
	cmd  *exec.Cmd
	addr string
	log  string
}

const token = "faults-token"

func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startServing runs the binary and waits for /readyz.
func startServing(t *testing.T, bin, addr string, env []string, args ...string) *server {
	t.Helper()
	logf := filepath.Join(t.TempDir(), "serving.log")
	f, err := os.Create(logf)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"--addr=" + addr, "--admin_token=" + token, "--poll_interval=200ms",
		"--publish_timeout=2s", "--write_timeout=6s", "--stale_after=10m"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd, addr: addr, log: logf}
	t.Cleanup(func() { s.kill(); f.Close() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logf)
			t.Fatalf("serving not ready after 30 s:\n%s", b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *server) kill() {
	if s.cmd.ProcessState == nil {
		s.cmd.Process.Signal(syscall.SIGKILL)
		s.cmd.Wait()
	}
}

var client = &http.Client{Timeout: 10 * time.Second}

// top reads a list: status, version, items (nil on error).
func top(addr string, k schemas.ListKey) (int, int64, []string, error) {
	resp, err := client.Get(fmt.Sprintf("http://%s/v1/top?type=%s&scope=%s&window=%s&k=50", addr, k.Type, k.Scope, k.Window))
	if err != nil {
		return 0, 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, 0, nil, err
	}
	if resp.StatusCode != 200 {
		return resp.StatusCode, 0, nil, nil
	}
	var l schemas.List
	if err := json.Unmarshal(b, &l); err != nil {
		return resp.StatusCode, 0, nil, err
	}
	var items []string
	for _, e := range l.Items {
		items = append(items, e.Item)
	}
	return 200, l.Version, items, nil
}

func mkList(k schemas.ListKey, v int64) []byte {
	l := &schemas.List{Type: k.Type, Scope: k.Scope, Window: k.Window, AsOf: time.Unix(v, 0).UTC(),
		MaxOvercount: 0, Complete: true, CertifiedK: 60, Version: v}
	for i := 0; i < 60; i++ {
		c := uint64(1000*v) - uint64(i)
		l.Items = append(l.Items, schemas.Entry{Rank: i + 1, Item: fmt.Sprint("v_", i), Count: c, Lower: c})
	}
	b, err := schemas.MarshalList(l)
	if err != nil {
		panic(err)
	}
	return b
}

// bigtableEnv returns the environment that points the binary at a Bigtable
// emulator: BIGTABLE_EMULATOR_HOST's, or an in-process bttest.
func bigtableEnv(t *testing.T) (env []string, where string) {
	if h := os.Getenv("BIGTABLE_EMULATOR_HOST"); h != "" {
		return []string{"BIGTABLE_EMULATOR_HOST=" + h}, "the Bigtable emulator at " + h
	}
	addr, stop, err := store.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return []string{"BIGTABLE_EMULATOR_HOST=" + addr}, "an in-process bttest (BIGTABLE_EMULATOR_HOST unset)"
}

func TestFaultInjection(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the fault-injection suite takes about 90 s")
	}
	rep := &report{t: t}
	defer rep.print()
	bin := buildBinary(t, "./serving")
	rs := redistest.New(t)
	btEnv, btWhere := bigtableEnv(t)
	t.Logf("services: a private redis-server on %s, %s", rs.Addr(), btWhere)
	instance := fmt.Sprintf("faults%d", time.Now().UnixNano())
	// Pub/Sub for the first two faults: the binary's embedded fake (it is
	// not what they test).
	env := append([]string{"PUBSUB_EMULATOR_HOST="}, btEnv...)
	args := []string{"--redis=" + rs.Addr(), "--removals_bigtable=true", "--bigtable_project=topk-test", "--bigtable_instance=" + instance}
	addr := freePort(t)
	srv := startServing(t, bin, addr, env, args...)

	rc := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	defer rc.Close()
	pub := liststore.NewPublisher(liststore.New(rc, liststore.Options{}), nil)
	k := schemas.ListKey{Type: "video", Scope: "global", Window: schemas.Window1h}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	t.Run("redis_down_30s", func(t *testing.T) {
		faultRedis(ctx, t, rep, rs, pub, srv, k)
	})
	t.Run("serving_restarted", func(t *testing.T) {
		srv = faultServingRestart(ctx, t, rep, bin, rs, pub, srv, env, args, k)
	})
	t.Run("pubsub_restarted", func(t *testing.T) {
		faultPubSub(ctx, t, rep, bin, rs, btEnv, args)
	})
}

// faultRedis: Redis frozen 15 s, then killed and kept down 15 s.
func faultRedis(ctx context.Context, t *testing.T, rep *report, rs *redistest.Server, pub *liststore.Publisher, srv *server, k schemas.ListKey) {
	const fault = "redis down 30 s (15 frozen, 15 killed)"
	var v atomic.Int64
	var pubErrs atomic.Int64
	stopPub := make(chan struct{})
	pubDone := make(chan struct{})
	go func() { // the pipeline: a new version every 500 ms, whatever Redis does
		for {
			n := v.Add(1)
			pub.Offer(k, n, mkList(k, n))
			select {
			case <-stopPub:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	go func() { // and its publish step, flushing continuously
		defer close(pubDone)
		for {
			if _, err := pub.Flush(ctx); err != nil {
				pubErrs.Add(1)
			}
			select {
			case <-stopPub:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	eventuallyServed(t, srv.addr, k, 1, 10*time.Second)

	var reads, bad, empty, back atomic.Int64
	var lastSeen atomic.Int64
	stopRead := make(chan struct{})
	readDone := make(chan struct{})
	go func() { // a client reading every 50 ms
		defer close(readDone)
		for {
			select {
			case <-stopRead:
				return
			case <-time.After(50 * time.Millisecond):
			}
			code, ver, items, err := top(srv.addr, k)
			reads.Add(1)
			switch {
			case err != nil || code != 200:
				bad.Add(1)
			case len(items) == 0:
				empty.Add(1)
			default:
				if ver < lastSeen.Load() {
					back.Add(1)
				}
				lastSeen.Store(ver)
			}
		}
	}()
	time.Sleep(time.Second)
	rs.Freeze()
	time.Sleep(15 * time.Second)
	rs.Thaw()
	rs.Kill()
	time.Sleep(15 * time.Second)
	rs.Start()
	want := v.Load() + 1 // the first version offered after Redis returned
	recovered := eventuallyServed(t, srv.addr, k, want, 20*time.Second)
	st := pub.Stats()
	close(stopRead)
	<-readDone
	close(stopPub)
	<-pubDone
	rep.add(fault, "reads: no 5xx, no error, never an empty list", bad.Load() == 0 && empty.Load() == 0,
		"%d reads, %d failed, %d empty", reads.Load(), bad.Load(), empty.Load())
	rep.add(fault, "reads: the version served never goes back", back.Load() == 0, "%d regressions", back.Load())
	rep.add(fault, "publisher: never returned an error", pubErrs.Load() == 0, "%d errors; %d versions offered, %d written, %d superseded, %d failed attempts",
		pubErrs.Load(), v.Load(), st.Published, st.Superseded, st.Failures)
	rep.add(fault, "newest list served again after Redis returned", recovered >= 0,
		"v%d served %v after Redis returned", want, recovered.Round(time.Millisecond))
}

// eventuallyServed waits until the server serves version >= v of k; it
// returns how long that took, or -1.
func eventuallyServed(t *testing.T, addr string, k schemas.ListKey, v int64, d time.Duration) time.Duration {
	start := time.Now()
	for time.Since(start) < d {
		if code, ver, _, err := top(addr, k); err == nil && code == 200 && ver >= v {
			return time.Since(start)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return -1
}

// faultServingRestart: a takedown, then the binary killed and restarted on
// a Redis that lost its data.
func faultServingRestart(ctx context.Context, t *testing.T, rep *report, bin string, rs *redistest.Server, pub *liststore.Publisher,
	srv *server, env, args []string, k schemas.ListKey) *server {
	const fault = "serving restarted, redis empty"
	body := `{"type":"video","item":"v_3","reason":"takedown 99"}`
	req, _ := http.NewRequest("POST", "http://"+srv.addr+"/v1/admin/removals", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("takedown: %v %v", resp, err)
	}
	resp.Body.Close()
	_, _, items, _ := top(srv.addr, k)
	rep.add(fault, "before: the removed item leaves the list at once", !contains(items, "v_3"), "v_3 listed: %v", contains(items, "v_3"))

	srv.kill()
	rs.Kill()
	rs.Start() // empty
	v := time.Now().Unix()
	pub.Offer(k, v, mkList(k, v))
	if _, err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	srv = startServing(t, bin, srv.addr, env, args...)
	took := time.Since(start)
	code, _, items, err := top(srv.addr, k)
	rep.add(fault, "after: the removed item is still out of the list", err == nil && code == 200 && len(items) > 0 && !contains(items, "v_3"),
		"status %d, %d items, v_3 listed: %v (restart took %v)", code, len(items), contains(items, "v_3"), took.Round(time.Millisecond))
	req, _ = http.NewRequest("GET", "http://"+srv.addr+"/v1/admin/removals", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err = client.Do(req)
	var got struct{ Removals []liststore.Removal }
	if err == nil {
		json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
	}
	rep.add(fault, "after: GET /v1/admin/removals lists it", len(got.Removals) == 1 && got.Removals[0].Item == "v_3", "%+v", got.Removals)
	logb, _ := os.ReadFile(srv.log)
	rep.add(fault, "after: the refill from Bigtable is logged", bytes.Contains(logb, []byte("removals refilled from bigtable")),
		"log line present: %v", bytes.Contains(logb, []byte("removals refilled from bigtable")))
	return srv
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// pubsubUnderTest is a Pub/Sub the test can take away and give back.
type pubsubUnderTest struct {
	addr       string
	what       string
	down, up   func()
	lostOnDown bool // a restart loses topics, subscriptions and messages
}

func newPubSub(t *testing.T) *pubsubUnderTest {
	if emutest.Available() {
		emu := emutest.NewPubSub(t)
		return &pubsubUnderTest{addr: emu.Addr(), what: "the official emulator, killed and restarted", down: emu.Kill, up: emu.Start, lostOnDown: true}
	}
	emb := pubsubx.StartEmbedded()
	t.Cleanup(func() { emb.Close() })
	px, err := NewProxy(emb.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.Close)
	return &pubsubUnderTest{addr: px.Addr(), what: "pstest behind a cut proxy (no gcloud SDK: an outage, not a restart)",
		down: func() { px.Cut() }, up: func() {
			if err := px.Restore(); err != nil {
				t.Fatal(err)
			}
		}}
}

// faultPubSub: clients post beacons while Pub/Sub goes away and returns.
func faultPubSub(ctx context.Context, t *testing.T, rep *report, bin string, rs *redistest.Server, btEnv, args []string) {
	ps := newPubSub(t)
	fault := "pubsub restarted"
	if !ps.lostOnDown {
		fault = "pubsub cut off (stand-in)"
	}
	t.Logf("pub/sub: %s", ps.what)
	const project, topic, sub = "topk-local", "views", "faults-check"
	c, err := pubsubx.NewClient(ctx, project, ps.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ensure := func() {
		t.Helper()
		ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := retry.Policy{Retryable: func(error) bool { return true }}.Do(ectx, func(ctx context.Context) error {
			if err := pubsubx.EnsureTopic(ctx, c, topic); err != nil {
				return err
			}
			return pubsubx.EnsureSubscription(ctx, c, sub, topic, 10)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	ensure()
	env := append([]string{"PUBSUB_EMULATOR_HOST=" + ps.addr}, btEnv...)
	srv := startServing(t, bin, freePort(t), env, append(args, "--pubsub_project="+project)...)

	// The subscriber records every beacon_id it receives.
	var mu sync.Mutex
	received := map[string]bool{}
	receive := func(d time.Duration) {
		rctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		c.Subscriber(sub).Receive(rctx, func(_ context.Context, m *pubsub.Message) {
			m.Ack()
			mu.Lock()
			received[m.Attributes["beacon_id"]] = true
			mu.Unlock()
		})
	}
	var accepted []string
	var n, other, unavailable int
	post := func(d time.Duration) {
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			n++
			id := fmt.Sprintf("fb-%d", n)
			body := fmt.Sprintf(`{"beacon_id":%q,"events":[{"event_id":"%s-e","type":"video","item":"v_1","ts":%q}]}`,
				id, id, time.Now().UTC().Format(time.RFC3339Nano))
			resp, err := client.Post("http://"+srv.addr+"/v1/events", "application/json", strings.NewReader(body))
			switch {
			case err != nil:
				other++ // a connection closed without an answer
			case resp.StatusCode == 202:
				accepted = append(accepted, id)
			case resp.StatusCode == 503 && resp.Header.Get("Retry-After") != "":
				unavailable++
			default:
				other++
			}
			if resp != nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	missing := func() int {
		mu.Lock()
		defer mu.Unlock()
		m := 0
		for _, id := range accepted {
			if !received[id] {
				m++
			}
		}
		return m
	}
	waitReceived := func(d time.Duration) {
		end := time.Now().Add(d)
		for missing() > 0 && time.Now().Before(end) {
			receive(2 * time.Second)
		}
	}

	post(2 * time.Second)
	waitReceived(15 * time.Second) // all delivered before the fault
	before := len(accepted)
	ps.down()
	post(3 * time.Second) // while it is down
	during := len(accepted) - before
	downPosts := n
	ps.up()
	if ps.lostOnDown {
		ensure() // a restarted emulator is empty: recreate, as ops (and the archiver) do
	}
	// Post until ingest accepts again (a restarted JVM emulator and the
	// client's reconnect take longer on a loaded machine), 45 s at most.
	for end := time.Now().Add(45 * time.Second); ; {
		post(4 * time.Second)
		if len(accepted) > before || time.Now().After(end) {
			break
		}
	}
	waitReceived(20 * time.Second)
	rep.add(fault, "ingest: no 202 while Pub/Sub was away", during == 0, "%d of the posts while it was away got 202", during)
	rep.add(fault, "ingest: every 202 beacon reached the subscriber", missing() == 0,
		"%d accepted, %d missing", len(accepted), missing())
	rep.add(fault, "ingest: every other answer was 503 + Retry-After", other == 0,
		"%d posts: %d accepted, %d 503 with Retry-After, %d other (empty reply or other status)", n, len(accepted), unavailable, other)
	rep.add(fault, "ingest: accepts again once Pub/Sub is back", len(accepted) > before,
		"%d accepted after it returned (of %d posts after the %d before and during)", len(accepted)-before, n-downPosts, downPosts)
}
