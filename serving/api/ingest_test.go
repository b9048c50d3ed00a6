package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/topk-dev/topk/internal/pubsubx"
	"github.com/topk-dev/topk/internal/svctest"
	"github.com/topk-dev/topk/schemas"
)

var jsonHdr = map[string]string{"Content-Type": "application/json; charset=utf-8"}

type ingestCase struct {
	body     string
	accepted []schemas.Event
	earliest time.Time
}

// beaconBody builds a beacon with two valid events (the second earlier) and
// one invalid one (index 1). The client's country and region are ignored:
// without a geo database the accepted events have none.
func beaconBody(id string, now time.Time) ingestCase {
	t1 := now.Add(-time.Minute).Truncate(time.Millisecond).UTC()
	t2 := now.Add(-2 * time.Minute).Truncate(time.Millisecond).UTC()
	body := fmt.Sprintf(`{"beacon_id":%q,"events":[
		{"event_id":"%s-a","type":"video","item":"v_1","user":"u_1","ts":%q,"country":"IN","region":"IN-MH"},
		{"event_id":"%s-b","type":"Video","item":"v_2","ts":%q,"country":"india"},
		{"event_id":"%s-c","type":"hashtag","item":"h_3","ts":%q}]}`,
		id, id, t1.Format(time.RFC3339Nano), id, t1.Format(time.RFC3339Nano), id, t2.Format(time.RFC3339Nano))
	return ingestCase{
		body: body,
		accepted: []schemas.Event{
			{EventID: id + "-a", Type: "video", Item: "v_1", User: "u_1", TS: t1},
			{EventID: id + "-c", Type: "hashtag", Item: "h_3", TS: t2},
		},
		earliest: t2,
	}
}

func decodeReply(t *testing.T, b []byte) ingestReply {
	t.Helper()
	var r ingestReply
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return r
}

// checkMessage verifies that a published message is the accepted events as
// one binary beacon with the ts and beacon_id attributes.
func checkMessage(t *testing.T, data []byte, attrs map[string]string, id string, c ingestCase) {
	t.Helper()
	var b schemas.Beacon
	if err := schemas.UnmarshalBeacon(data, &b); err != nil {
		t.Fatal(err)
	}
	if b.BeaconID != id || len(b.Events) != len(c.accepted) {
		t.Fatalf("published beacon %q with %d events, want %q with %d", b.BeaconID, len(b.Events), id, len(c.accepted))
	}
	for i := range b.Events {
		if !b.Events[i].TS.Equal(c.accepted[i].TS) {
			t.Fatalf("event %d ts %v, want %v", i, b.Events[i].TS, c.accepted[i].TS)
		}
		b.Events[i].TS = c.accepted[i].TS
		if b.Events[i] != c.accepted[i] {
			t.Fatalf("event %d = %+v, want %+v", i, b.Events[i], c.accepted[i])
		}
	}
	if attrs["ts"] != strconv.FormatInt(c.earliest.UnixMilli(), 10) || attrs["beacon_id"] != id {
		t.Fatalf("attributes %v, want ts=%d beacon_id=%s", attrs, c.earliest.UnixMilli(), id)
	}
}

// Property: accepted events are published once as one beacon with the
// right attributes, rejected ones are named with reasons, and a retried
// beacon_id is acknowledged without a second message.
func TestIngestPublishesOnceAndDedupes(t *testing.T) {
	e := newEnv(t, nil).start(t)
	c := beaconBody("b-1", time.Now())
	resp, b := e.do(t, "POST", "/v1/events", jsonHdr, c.body)
	if resp.StatusCode != 202 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	r := decodeReply(t, b)
	if r.Accepted != 2 || len(r.Rejected) != 1 || r.Rejected[0].Index != 1 || r.Rejected[0].EventID != "b-1-b" || r.MessageID == "" || r.Duplicate {
		t.Fatalf("reply %+v", r)
	}
	msgs := e.fake.Srv.Messages()
	if len(msgs) != 1 {
		t.Fatalf("%d messages, want 1", len(msgs))
	}
	checkMessage(t, msgs[0].Data, msgs[0].Attributes, "b-1", c)

	for i := 0; i < 3; i++ {
		resp, b = e.do(t, "POST", "/v1/events", jsonHdr, c.body)
		r2 := decodeReply(t, b)
		if resp.StatusCode != 202 || !r2.Duplicate || r2.MessageID != r.MessageID || r2.Accepted != 2 {
			t.Fatalf("retry %d: %d %+v", i, resp.StatusCode, r2)
		}
	}
	if n := len(e.fake.Srv.Messages()); n != 1 {
		t.Fatalf("%d messages after retries, want 1", n)
	}
	if resp, b = e.do(t, "POST", "/v1/events", jsonHdr, beaconBody("b-2", time.Now()).body); resp.StatusCode != 202 {
		t.Fatalf("second beacon: %d %s", resp.StatusCode, b)
	}
	if n := len(e.fake.Srv.Messages()); n != 2 {
		t.Fatalf("%d messages, want 2", n)
	}
}

// Property: the 202 comes only after Pub/Sub acknowledged the message; a
// retry while it is in flight gets 409; a failed publish gets 503 and
// releases the beacon_id so that the retry publishes.
func TestIngestAcksOnlyAfterPublish(t *testing.T) {
	e := newEnv(t, nil).start(t)
	e.fake.Srv.SetAutoPublishResponse(false)
	c := beaconBody("slow-1", time.Now())
	type result struct {
		code int
		body []byte
	}
	done := make(chan result, 1)
	var answered atomic.Bool
	go func() {
		resp, b := e.do(t, "POST", "/v1/events", jsonHdr, c.body)
		answered.Store(true)
		done <- result{resp.StatusCode, b}
	}()
	time.Sleep(500 * time.Millisecond)
	if answered.Load() {
		r := <-done
		t.Fatalf("answered %d before Pub/Sub acknowledged: %s", r.code, r.body)
	}
	resp, b := e.do(t, "POST", "/v1/events", jsonHdr, c.body)
	if resp.StatusCode != http.StatusConflict || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("retry in flight: %d %s", resp.StatusCode, b)
	}
	e.fake.Srv.AddPublishResponse(&pb.PublishResponse{MessageIds: []string{"m-acked"}}, nil)
	select {
	case r := <-done:
		if r.code != 202 || decodeReply(t, r.body).MessageID != "m-acked" {
			t.Fatalf("after ack: %d %s", r.code, r.body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no answer after Pub/Sub acknowledged")
	}

	c2 := beaconBody("fail-1", time.Now())
	e.fake.Srv.AddPublishResponse(nil, status.Error(codes.PermissionDenied, "denied by test"))
	resp, b = e.do(t, "POST", "/v1/events", jsonHdr, c2.body)
	if resp.StatusCode != 503 || !json.Valid(b) {
		t.Fatalf("failed publish: %d %s", resp.StatusCode, b)
	}
	e.fake.Srv.SetAutoPublishResponse(true)
	resp, b = e.do(t, "POST", "/v1/events", jsonHdr, c2.body)
	if r := decodeReply(t, b); resp.StatusCode != 202 || r.Duplicate {
		t.Fatalf("retry after failure: %d %s", resp.StatusCode, b)
	}
	msgs := e.fake.Srv.Messages()
	if len(msgs) != 1 {
		t.Fatalf("%d messages stored, want 1 (the retried beacon)", len(msgs))
	}
	checkMessage(t, msgs[0].Data, msgs[0].Attributes, "fail-1", c2)
}

// Property: a beacon whose client went away before it was claimed is not
// published (the client, without a 202, sends it again: publishing it
// unclaimed would only add a duplicate), is counted as abandoned and not
// as a Redis error, leaves no claim behind, and its retry publishes once.
func TestIngestClientGoneBeforeClaim(t *testing.T) {
	e := newEnv(t, nil).start(t)
	c := beaconBody("gone-1", time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the client is gone before the handler claims the beacon
	req := httptest.NewRequestWithContext(ctx, "POST", "/v1/events", strings.NewReader(c.body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	e.srv.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("answer %d %s, want 503", rec.Code, rec.Body)
	}
	if n := len(e.fake.Srv.Messages()); n != 0 {
		t.Fatalf("%d messages published for an abandoned beacon, want 0", n)
	}
	if n := counterValue(t, e.srv.metrics.beacons.WithLabelValues("abandoned")); n != 1 {
		t.Fatalf("abandoned beacons %v, want 1", n)
	}
	if n := counterValue(t, e.srv.metrics.redisErrors.WithLabelValues("dedupe")); n != 0 {
		t.Fatalf("dedupe redis errors %v, want 0: the client's cancel is not Redis failing", n)
	}
	if n, err := e.rc.Exists(context.Background(), e.srv.dedupeKey("gone-1")).Result(); err != nil || n != 0 {
		t.Fatalf("claim left behind: exists=%d err=%v", n, err)
	}
	resp, b := e.do(t, "POST", "/v1/events", jsonHdr, c.body)
	if r := decodeReply(t, b); resp.StatusCode != 202 || r.Duplicate {
		t.Fatalf("retry: %d %s", resp.StatusCode, b)
	}
	if msgs := e.fake.Srv.Messages(); len(msgs) != 1 {
		t.Fatalf("%d messages after the retry, want 1", len(msgs))
	} else {
		checkMessage(t, msgs[0].Data, msgs[0].Attributes, "gone-1", c)
	}
}

// The same contract against the official Pub/Sub emulator (CI starts it and
// sets PUBSUB_EMULATOR_HOST): 202 after publish, a retry not published
// twice, read back through a subscription.
func TestIngestOfficialEmulator(t *testing.T) {
	addr := os.Getenv(pubsubx.EnvEmulator)
	svctest.Need(t, "pubsub", addr != "", "PUBSUB_EMULATOR_HOST is not set: the official emulator variant of the ingest test did not run (the pstest variants did)")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topic := fmt.Sprintf("views-test-%d", time.Now().UnixNano())
	const project = "topk-test"
	client, err := pubsubx.NewClient(ctx, project, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if err := pubsubx.EnsureTopic(ctx, client, topic); err != nil {
		t.Fatal(err)
	}
	if err := pubsubx.EnsureSubscription(ctx, client, topic+"-sub", topic, 10); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *Config) { c.PubSubAddr = addr; c.PubSubProject = project; c.Topic = topic }).start(t)
	c := beaconBody("emu-1", time.Now())
	for i := 0; i < 3; i++ {
		resp, b := e.do(t, "POST", "/v1/events", jsonHdr, c.body)
		if r := decodeReply(t, b); resp.StatusCode != 202 || r.Duplicate != (i > 0) {
			t.Fatalf("post %d: %d %s", i, resp.StatusCode, b)
		}
	}
	rctx, rcancel := context.WithTimeout(ctx, 8*time.Second)
	defer rcancel()
	var mu sync.Mutex
	var got []*pubsub.Message
	var first atomic.Bool
	err = client.Subscriber(topic+"-sub").Receive(rctx, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		mu.Lock()
		got = append(got, m)
		mu.Unlock()
		if first.CompareAndSwap(false, true) {
			// Wait a little longer for a duplicate that must not come.
			time.AfterFunc(2*time.Second, rcancel)
		}
	})
	if err != nil && ctx.Err() != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 {
		t.Fatalf("received %d messages, want 1", len(got))
	}
	checkMessage(t, got[0].Data, got[0].Attributes, "emu-1", c)
}

// Property: the publish timeout must leave room for the answer inside the
// HTTP write timeout; a configuration where it does not is refused.
func TestConfigPublishTimeoutInsideWriteTimeout(t *testing.T) {
	for _, c := range []struct {
		publish, write time.Duration
		ok             bool
	}{
		{0, 0, true},                                // 10 s inside 30 s
		{30 * time.Second, 0, false},                // the old setting: equal
		{28 * time.Second, 30 * time.Second, false}, // no room for the margin
		{0, 10 * time.Second, false},                // default publish, short write
		{time.Second, 4 * time.Second, true},
	} {
		err := Config{PublishTimeout: c.publish, WriteTimeout: c.write}.Validate()
		if (err == nil) != c.ok {
			t.Errorf("publish %v write %v: err %v, want ok=%v", c.publish, c.write, err, c.ok)
		}
	}
}

// Property: when Pub/Sub does not acknowledge (it hangs, or it is down),
// the client of a real HTTP server with its write timeout gets a 503 with
// Retry-After and a JSON body, after about the publish timeout and before
// the write timeout: never a connection closed without an answer. The
// beacon_id is released, so the retry publishes once Pub/Sub is back.
func TestIngestAnswers503BeforeDeadline(t *testing.T) {
	for _, mode := range []string{"hung", "down"} {
		t.Run(mode, func(t *testing.T) {
			const publish, write = time.Second, 4 * time.Second
			e := newEnv(t, func(c *Config) { c.PublishTimeout = publish; c.WriteTimeout = write }).start(t)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			served := make(chan error, 1)
			go func() { served <- e.srv.Serve(ctx, ln) }()
			defer func() { cancel(); <-served }()
			url := "http://" + ln.Addr().String() + "/v1/events"
			if mode == "hung" {
				e.fake.Srv.SetAutoPublishResponse(false)
			} else {
				e.fake.Close()
			}
			for i := 0; i < 3; i++ {
				start := time.Now()
				resp, b := request(t, "POST", url, jsonHdr, beaconBody(fmt.Sprintf("%s-%d", mode, i), time.Now()).body)
				took := time.Since(start)
				if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !json.Valid(b) {
					t.Fatalf("beacon %d: %d Retry-After=%q %s", i, resp.StatusCode, resp.Header.Get("Retry-After"), b)
				}
				if took < publish/2 || took >= write {
					t.Fatalf("beacon %d answered after %v, want about %v and before %v", i, took, publish, write)
				}
				t.Logf("%s: 503 with Retry-After %s after %v", mode, resp.Header.Get("Retry-After"), took.Round(time.Millisecond))
			}
			if mode == "hung" {
				// The claim was released: once Pub/Sub answers, the retry
				// is published and accepted (not a 409 for 30 s). pstest
				// holds its lock while a publish waits for its response:
				// answer the hung ones first.
				for i := 0; i < 10; i++ {
					e.fake.Srv.AddPublishResponse(&pb.PublishResponse{MessageIds: []string{"late"}}, nil)
				}
				e.fake.Srv.SetAutoPublishResponse(true)
				resp, b := request(t, "POST", url, jsonHdr, beaconBody("hung-0", time.Now()).body)
				if resp.StatusCode != http.StatusAccepted {
					t.Fatalf("retry after Pub/Sub returned: %d %s", resp.StatusCode, b)
				}
			}
		})
	}
}
