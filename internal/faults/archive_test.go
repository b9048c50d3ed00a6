package faults

import (
	"context"
	"fmt"
	"testing"
	"time"

	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/topk-dev/topk/internal/pubsubx"
	"github.com/topk-dev/topk/internal/retry"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/archive"
)

// TestArchiverKilled: the archiver is killed with SIGKILL mid-hour, twice,
// while events are published for 20 s, and started again each time. Every
// published event_id must be in the archive afterwards (the exact path
// dedupes, so a message written twice is allowed; it is counted in the
// table), because the archiver acknowledges a message only once its files
// are durable.
func TestArchiverKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the archiver kill -9 fault takes about 90 s (a killed archiver's messages come back after the 60 s ack deadline)")
	}
	t.Parallel() // mostly waiting: runs beside the other parallel fault
	rep := &report{t: t}
	defer rep.print()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	psAddr, psWhere := pubsubEnv(t)
	t.Logf("services: %s", psWhere)
	const project = "topk-faults"
	name := fmt.Sprintf("archived-%d", time.Now().UnixNano())
	sub := pubsubx.SubscriptionName(project, name)
	root := t.TempDir()
	bin := buildBinary(t, "./pipelines/archive")
	args := []string{"--root=" + root, "--pubsub_endpoint=" + psAddr, "--subscription=" + sub, "--topic=" + name, "--flush_every=300ms"}
	start := func() *job { return startJob(t, bin, nil, args) }

	pc, err := pubsubx.NewClient(ctx, project, psAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	job := start()
	// A subscription gets only what is published after it exists: wait
	// until the archiver has created it.
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = retry.Policy{Retryable: func(error) bool { return true }}.Do(wctx, func(ctx context.Context) error {
		_, err := pc.SubscriptionAdminClient.GetSubscription(ctx, &pb.GetSubscriptionRequest{Subscription: sub})
		return err
	})
	wcancel()
	if err != nil {
		t.Fatalf("the archiver did not create %s: %v\n%s", sub, err, job.tail())
	}

	var events []schemas.Event
	for i := range 2000 {
		events = append(events, schemas.Event{EventID: fmt.Sprint("a", i), Type: "video", Item: fmt.Sprint("v_", i%37), User: fmt.Sprint("u_", i)})
	}
	first := time.Now().UTC()
	published := make(chan error, 1)
	go func() {
		published <- publishEvents(ctx, pc, pubsubx.TopicName(project, name), events, 20*time.Second, 0)
	}()
	var lastKill time.Time
	for _, at := range []time.Duration{5 * time.Second, 6 * time.Second} {
		time.Sleep(at)
		job.kill()
		lastKill = time.Now()
		job = start()
	}
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	last := time.Now().UTC()
	defer job.kill()

	const fault = "archiver kill -9 twice mid-hour"
	// What a killed archiver had pulled and not acknowledged comes back
	// after the subscription's 60 s ack deadline.
	var missing, dups int
	for end := lastKill.Add(80 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		seen := map[string]int{}
		for h := first.Truncate(time.Hour); !h.After(last); h = h.Add(time.Hour) {
			rows, err := archive.ReadHour(root, h)
			if err != nil {
				t.Fatalf("reading the archive's hour %s: %v", h, err)
			}
			for _, r := range rows {
				seen[r.EventID]++
			}
		}
		missing, dups = 0, 0
		for _, e := range events {
			switch n := seen[e.EventID]; {
			case n == 0:
				missing++
			case n > 1:
				dups += n - 1
			}
		}
		if missing == 0 || time.Now().After(end) {
			break
		}
	}
	rep.add(fault, "the archive holds every published event_id", missing == 0,
		"%d events published over 20 s: %d missing, %d written twice (the exact path dedupes them); complete %.0f s after the last kill",
		len(events), missing, dups, time.Since(lastKill).Seconds())
}
