package source

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/passert"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"

	"github.com/topk-dev/topk/internal/pubsubx"
	"github.com/topk-dev/topk/internal/recoverylog"
	"github.com/topk-dev/topk/transforms/exact/store"
)

// TestPubsubSourceRecoveryLog is a crash between acknowledgement and
// counting, in one process. Run 1 logs and acknowledges what it pulls, then
// its job fails (a bundle fails at element 23: everything emitted was
// acknowledged, and Prism's in-memory state dies with the job, as with a
// kill -9). A few messages it had not pulled yet are then written to the
// log as if run 1 had logged them and died before acknowledging them (they
// stay in the subscription and are delivered to run 2 too). Run 2 replays
// the log and reads the subscription: every beacon arrives exactly once,
// with its own timestamp, though ten of them were published twice (the
// retry of an ambiguous publish: another message with the same beacon_id).
func TestPubsubSourceRecoveryLog(t *testing.T) {
	srv := pubsubx.StartEmbedded()
	defer srv.Close()
	btAddr, stopBT, err := store.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	defer stopBT()
	c, topic, sub := testSub(t, srv.Addr)
	const n = 120
	var msgs []*pb.PubsubMessage
	var want, wantIDs []string
	for i := range n {
		data, ts := testBeacon(t, i, 1+i%7)
		msgs = append(msgs, &pb.PubsubMessage{Data: data, Attributes: map[string]string{
			TSAttribute: strconv.FormatInt(ts, 10), BeaconAttribute: fmt.Sprint("b", i)}})
		want = append(want, fmt.Sprintf("b%d@%d", i, ts))
		wantIDs = append(wantIDs, fmt.Sprintf("b%d@pub", i))
	}
	// Ten beacons published twice, as a client's retry after an ambiguous
	// publish (503) does: new messages, same beacon_id.
	publish(t, c, topic, append(msgs, msgs[100:110]...))
	spec, err := ParseSpec(fmt.Sprintf("pubsub:%s?idle_stop=2s,readers=1", sub))
	if err != nil {
		t.Fatal(err)
	}
	// A fresh instance: with BIGTABLE_EMULATOR_HOST set (CI) the client
	// goes to that shared emulator, whatever address it is given.
	logCfg := recoverylog.Config{Project: "p", Instance: fmt.Sprintf("src%d", time.Now().UnixNano()), EmulatorAddr: btAddr}
	opts := func(run string) Options {
		return Options{PubsubEndpoint: srv.Addr, MaxMessages: 5, BundleTime: time.Nanosecond,
			RecoveryLog: RecoveryLog{Config: logCfg, Horizon: time.Hour, Run: run}}
	}

	// Run 1: fails after logging and acknowledging some messages.
	p, s := beam.NewPipelineWithRoot()
	beacons, _ := Read(s, spec, opts("r1"))
	failOnSeen.Store(0)
	beam.ParDo0(s, &failOnFn{FailAt: 23}, beacons)
	if err := ptest.Run(p); err == nil || !strings.Contains(err.Error(), "failing on purpose") {
		t.Fatalf("run 1: %v; want the bundle holding element 23 to fail it", err)
	}
	acked := 0
	var unacked []*recoverylog.Record
	for _, m := range srv.Srv.Messages() {
		if m.Acks > 0 {
			acked++
			continue
		}
		ts, _ := strconv.ParseInt(m.Attributes[TSAttribute], 10, 64)
		unacked = append(unacked, &recoverylog.Record{ID: m.ID, Publish: m.PublishTime.UnixMilli(), TS: ts, Data: m.Data})
	}
	if acked == 0 || len(unacked) < 3 {
		t.Fatalf("run 1 acknowledged %d of %d; want some but not all", acked, n)
	}
	// Run 1 "died" after logging three more it never acknowledged.
	ctx := context.Background()
	l, err := recoverylog.Open(ctx, logCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tail := []recoverylog.Record{*unacked[0], *unacked[1], *unacked[2]}
	if err := l.Append(ctx, "r1", tail); err != nil {
		t.Fatal(err)
	}
	t.Logf("run 1: %d of %d messages logged and acknowledged, then the job failed; 3 more logged, not acknowledged", acked, n)

	// Run 2: replay plus subscription, each message once. (Messages run 1
	// pulled but never acknowledged come back after their ack deadline,
	// behind the watermark, so they carry the reader's clock: compare ids.)
	runLogged(t, spec, opts("r2"), wantIDs, false)
	// Run 3 starts after the ack deadline of what run 1 pulled without
	// acknowledging: run 2 logged everything it emitted, so its replay emits
	// every beacon once more; the redelivered messages are acknowledged,
	// not emitted again; replayed messages keep their own timestamps.
	time.Sleep(11 * time.Second)
	runLogged(t, spec, opts("r3"), want, true)
	for _, m := range srv.Srv.Messages() {
		if m.Acks == 0 {
			t.Errorf("message %s unacknowledged after run 3", m.ID)
		}
	}
}

// runLogged runs Read with opts until idle and asserts the "id@ts" keys
// (withTS) or "id@pub" keys.
func runLogged(t *testing.T, spec Spec, opts Options, want []string, withTS bool) {
	t.Helper()
	p, s := beam.NewPipelineWithRoot()
	beacons, _ := Read(s, spec, opts)
	kf := &messageKeyFn{PubFrom: math.MinInt64, PubTo: math.MaxInt64}
	if withTS {
		kf = &messageKeyFn{}
	}
	keys := beam.ParDo(s, kf, beacons)
	passert.EqualsList(s, keys, want)
	if err := ptest.Run(p); err != nil {
		t.Fatalf("run %s: %v", opts.RecoveryLog.Run, err)
	}
}
