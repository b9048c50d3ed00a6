package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/topk-dev/topk/internal/emutest"
	"github.com/topk-dev/topk/internal/pubsubx"
	"github.com/topk-dev/topk/internal/retry"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/archive"
)

// Property: the archiver waits out a restart of the official Pub/Sub
// emulator instead of exiting: every beacon acknowledged by Pub/Sub before
// the restart (and archived) and every beacon published after it is in the
// archive, and Run returns nil only when its context ends. The emulator is
// a private one on a spare port (the test kills it).
func TestRunSurvivesEmulatorRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the emulator restart test takes about 20 s")
	}
	emu := emutest.NewPubSub(t)
	root := t.TempDir()
	f, err := ParseFlags([]string{"--root=" + root, "--pubsub_endpoint=" + emu.Addr(),
		"--subscription=projects/p/subscriptions/archive", "--flush_every=300ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, f) }()

	hour := time.Now().UTC().Truncate(time.Hour)
	publish := func(from, to int) {
		t.Helper()
		c, err := pubsubx.NewClient(ctx, "p", emu.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// A subscription only gets what is published after it exists:
		// wait until the archiver has created it (at its start, and again
		// after the restart).
		ectx, ecancel := context.WithTimeout(ctx, 30*time.Second)
		_, err = retry.Policy{Retryable: func(error) bool { return true }}.Do(ectx, func(ctx context.Context) error {
			_, err := c.SubscriptionAdminClient.GetSubscription(ctx, &pb.GetSubscriptionRequest{Subscription: "projects/p/subscriptions/archive"})
			return err
		})
		ecancel()
		if err != nil {
			t.Fatal(err)
		}
		pub := c.Publisher("views")
		defer pub.Stop()
		for i := from; i < to; i++ {
			ts := time.Now().UTC().Truncate(time.Millisecond)
			if ts.Truncate(time.Hour) != hour {
				ts = hour // the test straddled an hour: keep every event in one
			}
			data, _ := schemas.MarshalBeacon(&schemas.Beacon{BeaconID: fmt.Sprint("b", i), Events: []schemas.Event{
				{EventID: fmt.Sprint("e", i), Type: "video", Item: "v_1", TS: ts}}})
			pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
			_, err := retry.Policy{Retryable: func(error) bool { return true }}.Do(pctx, func(ctx context.Context) error {
				_, err := pub.Publish(ctx, &pubsub.Message{Data: data, Attributes: map[string]string{"ts": strconv.FormatInt(ts.UnixMilli(), 10)}}).Get(ctx)
				return err
			})
			pcancel()
			if err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
		}
	}
	archived := func() map[string]bool {
		rows, err := archive.ReadHour(root, hour)
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]bool{}
		for _, r := range rows {
			ids[r.EventID] = true
		}
		return ids
	}
	waitFor := func(n int, d time.Duration) {
		t.Helper()
		deadline := time.Now().Add(d)
		for {
			got := archived()
			all := true
			for i := 0; i < n; i++ {
				all = all && got[fmt.Sprint("e", i)]
			}
			if all {
				return
			}
			select {
			case err := <-done:
				t.Fatalf("archiver returned %v", err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("after %v: %d of %d events archived", d, len(got), n)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	publish(0, 20)
	waitFor(20, 20*time.Second)
	emu.Kill()
	time.Sleep(3 * time.Second) // pulls fail meanwhile
	select {
	case err := <-done:
		t.Fatalf("archiver exited while the emulator was down: %v", err)
	default:
	}
	restarted := time.Now()
	emu.Start()
	publish(20, 40)
	waitFor(40, 30*time.Second)
	t.Logf("40 of 40 events archived; the 20 after the restart %v after the emulator was started again", time.Since(restarted).Round(time.Millisecond))
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
}
