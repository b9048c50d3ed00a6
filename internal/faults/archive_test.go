package faults

import (
	"context"
	"fmt"
	"slices"
	"syscall"
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
// are durable. Then its Pub/Sub (it reads through a proxy) is cut for 20 s
// while more events are published: it must keep running and archive them
// all once Pub/Sub is back.
func TestArchiverKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the archiver kill -9 and Pub/Sub faults take about 3 minutes (a killed archiver's messages come back after the 60 s ack deadline)")
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
	// The archiver reaches Pub/Sub through a proxy, cut in the second
	// phase (the test publishes to Pub/Sub directly).
	px, err := NewProxy(psAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.Close)
	args := []string{"--root=" + root, "--pubsub_endpoint=" + px.Addr(), "--subscription=" + sub, "--topic=" + name, "--flush_every=300ms"}
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
	missing, dups := waitArchived(t, root, events, first, last, lastKill.Add(80*time.Second))
	rep.add(fault, "the archive holds every published event_id", missing == 0,
		"%d events published over 20 s: %d missing, %d written twice (the exact path dedupes them); complete %.0f s after the last kill",
		len(events), missing, dups, time.Since(lastKill).Seconds())

	// Second phase: the archiver's Pub/Sub is cut for 20 s while 500 more
	// events are published. It must keep running, and once Pub/Sub is back
	// archive them all (what it pulled just before the cut and could not
	// acknowledge comes back after the ack deadline: written twice at
	// most).
	const outage = "archiver's Pub/Sub cut 20 s"
	var more []schemas.Event
	for i := range 500 {
		more = append(more, schemas.Event{EventID: fmt.Sprint("b", i), Type: "video", Item: fmt.Sprint("v_", i%37), User: fmt.Sprint("w_", i)})
	}
	if err := publishEvents(ctx, pc, pubsubx.TopicName(project, name), more[:20], 0, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // pulled by the streaming pull, not yet acknowledged (flush_every 300 ms)
	conns := px.Cut()
	cut := time.Now()
	if err := publishEvents(ctx, pc, pubsubx.TopicName(project, name), more[20:], 10*time.Second, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20*time.Second - time.Since(cut))
	alive := job.cmd.ProcessState == nil && job.cmd.Process.Signal(syscall.Signal(0)) == nil
	rep.add(outage, "the archiver keeps running", alive && conns > 0,
		"%s; %d of its connections cut (0: the proxy is not in its path)",
		map[bool]string{true: "still running after 20 s without Pub/Sub", false: "the archiver exited:\n" + job.tail()}[alive], conns)
	if err := px.Restore(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	all := append(slices.Clone(events), more...)
	missing, dups = waitArchived(t, root, all, first, time.Now().UTC(), back.Add(90*time.Second))
	rep.add(outage, "the archive holds every published event_id", missing == 0,
		"%d more events, published during the cut: %d of all %d missing, %d written twice; complete %.0f s after Pub/Sub returned",
		len(more), missing, len(all), dups, time.Since(back).Seconds())
}

// waitArchived reads the archive's hours from first to last until it holds
// every event_id of events or the deadline passes, and returns how many
// are missing and how many rows are second copies.
func waitArchived(t *testing.T, root string, events []schemas.Event, first, last, deadline time.Time) (missing, dups int) {
	t.Helper()
	for ; ; time.Sleep(300 * time.Millisecond) {
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
		if missing == 0 || time.Now().After(deadline) {
			return missing, dups
		}
	}
}
