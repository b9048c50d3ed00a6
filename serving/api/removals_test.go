package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/topk-dev/topk/internal/pubsubx"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/exact/store/storetest"
	"github.com/topk-dev/topk/transforms/publish/liststore"
)

// Property: takedowns are durable. A removed item stays out of every
// response when Redis loses all its data while the server runs (the server
// refills Redis from Bigtable, logs it, and never serves the list without
// the filter meanwhile), and when the server restarts on an empty Redis;
// GET /v1/admin/removals shows the durable set; a restore is durable too.
// Redis is a private miniredis here, since the test flushes it.
func TestTakedownsSurviveRedisLoss(t *testing.T) {
	bt := storetest.New(t)
	mr := miniredis.RunT(t)
	rc := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rc.Close()
	k := key("video", "global", schemas.Window1h)
	writer := liststore.New(rc, liststore.Options{Prefix: "topk"})
	publish := func(v int64) {
		t.Helper()
		if _, err := writer.Publish(context.Background(), mkList(k, v, 50, 1)); err != nil {
			t.Fatal(err)
		}
	}
	var logs syncBuffer
	start := func() *testEnv {
		e := &testEnv{rc: rc, mr: mr, store: writer}
		e.fake = startFake(t)
		e.cfg = Config{Redis: rc, AdminToken: testToken, Removals: bt.Store, PubSubAddr: e.fake.Addr,
			Logger: slog.New(slog.NewTextHandler(&logs, nil)), PollInterval: 100 * time.Millisecond, ScanInterval: 200 * time.Millisecond}
		return e.start(t)
	}
	items := func(e *testEnv) map[string]bool {
		t.Helper()
		resp, b := e.do(t, "GET", topPath(k, 40), nil, "")
		if resp.StatusCode != 200 {
			t.Fatalf("top: %d %s", resp.StatusCode, b)
		}
		out := map[string]bool{}
		for _, it := range decodeList(t, b).Items {
			out[it.Item] = true
		}
		return out
	}
	listed := func(e *testEnv) []liststore.Removal {
		t.Helper()
		resp, b := e.do(t, "GET", "/v1/admin/removals", map[string]string{"Authorization": "Bearer " + testToken}, "")
		var got struct{ Removals []liststore.Removal }
		if resp.StatusCode != 200 || json.Unmarshal(b, &got) != nil {
			t.Fatalf("removals: %d %s", resp.StatusCode, b)
		}
		return got.Removals
	}
	admin := map[string]string{"Authorization": "Bearer " + testToken, "Content-Type": "application/json"}

	publish(1)
	e := start()
	if !items(e)["v_2"] {
		t.Fatal("v_2 not listed before its removal")
	}
	if resp, b := e.do(t, "POST", "/v1/admin/removals", admin, `{"type":"video","item":"v_2","reason":"takedown 7"}`); resp.StatusCode != 201 {
		t.Fatalf("remove: %d %s", resp.StatusCode, b)
	}
	if items(e)["v_2"] {
		t.Fatal("v_2 listed after its removal")
	}

	// Redis loses everything while the server runs; the pipeline publishes
	// again. Every read meanwhile keeps v_2 out; the server refills Redis.
	mr.FlushAll()
	publish(2)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), "removals refilled from bigtable") || rc.HExists(context.Background(), "topk:removed", "video\x00v_2").Val() == false {
		if items(e)["v_2"] {
			t.Fatal("v_2 served after Redis lost its data")
		}
		if time.Now().After(deadline) {
			t.Fatalf("no refill within 5 s; logs:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	eventually(t, 3*time.Second, "v2 served", func() bool {
		_, b := e.do(t, "GET", topPath(k, 40), nil, "")
		return decodeList(t, b).Version == 2
	})
	if items(e)["v_2"] {
		t.Fatal("v_2 served after the refill")
	}

	// The server restarts on an empty Redis.
	e.ts.Close()
	e.srv.Close()
	mr.FlushAll()
	publish(3)
	e2 := start()
	if items(e2)["v_2"] {
		t.Fatal("v_2 served by a server restarted on an empty Redis")
	}
	if got := listed(e2); len(got) != 1 || got[0].Item != "v_2" || got[0].Reason != "takedown 7" {
		t.Fatalf("GET removals after restart: %+v", got)
	}

	// A restore is durable too: not resurrected by the next refill.
	if resp, b := e2.do(t, "DELETE", "/v1/admin/removals?type=video&item=v_2", admin, ""); resp.StatusCode != 200 {
		t.Fatalf("restore: %d %s", resp.StatusCode, b)
	}
	e2.ts.Close()
	e2.srv.Close()
	mr.FlushAll()
	publish(4)
	e3 := start()
	if !items(e3)["v_2"] || len(listed(e3)) != 0 {
		t.Fatalf("restored v_2 missing after a restart on an empty Redis: %v %+v", items(e3)["v_2"], listed(e3))
	}
	t.Logf("refills logged: %d", strings.Count(logs.String(), "removals refilled from bigtable"))
}

func startFake(t testing.TB) *pubsubx.Embedded {
	f := pubsubx.StartEmbedded()
	t.Cleanup(func() { f.Close() })
	return f
}
