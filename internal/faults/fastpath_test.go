package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/redis/go-redis/v9"

	"github.com/topk-dev/topk/internal/pubsubx"
	"github.com/topk-dev/topk/internal/redistest"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/publish/liststore"
	"github.com/topk-dev/topk/transforms/source"
)

// TestFastPathKilled: while events are published for 40 s, the streaming
// job is killed with SIGKILL at three moments (5 s into the stream, once it
// has published a 5m list, 2 s after a start) and the same command is
// started again each time (every 10th beacon is published twice, as a
// retry after an ambiguous publish does); every message pulled before a kill was
// acknowledged, and the windows die with the process. The last run replays
// the recovery log: its 5m and 1h lists must count every published event
// exactly once (the test's own recount of what it published; 40 items, so
// the summaries are exact and any loss or double count shows), and its
// trending list (no warm-up, so it lists from the first minute) must list
// items and give each its exact distinct users in count_5m: the scorer's
// state dies with the process too and is rebuilt from the replay. Then the
// log's Bigtable is cut for 15 s while more events arrive: the job must keep
// running and count them once Bigtable is back; and last its Pub/Sub (the
// job reads it through a proxy) is cut for 20 s while more are published:
// the same, once Pub/Sub is back, with no beacon it pulled before the cut
// and acked too late counted twice. Services: Pub/Sub at
// PUBSUB_EMULATOR_HOST (the official emulator in CI) or an in-process pstest
// (it lives in this process, so it outlives the killed job), Bigtable as in
// the rest of the suite, a private redis-server.
func TestFastPathKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the kill -9, Bigtable and Pub/Sub faults take about 4 minutes")
	}
	t.Parallel() // mostly waiting: runs beside the other parallel fault
	rep := &report{t: t}
	defer rep.print()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	psAddr, psWhere := pubsubEnv(t)
	btEnv, btWhere := bigtableEnv(t)
	// The job reaches Pub/Sub through a proxy too, cut in phase 4 (the
	// test publishes to Pub/Sub directly).
	psProxy, err := NewProxy(psAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(psProxy.Close)
	// The job reaches Bigtable through a proxy the test cuts (a Bigtable
	// outage in phase 3).
	btProxy, err := NewProxy(strings.TrimPrefix(btEnv[0], "BIGTABLE_EMULATOR_HOST="))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(btProxy.Close)
	rs := redistest.New(t)
	t.Logf("services: %s, %s, a private redis-server on %s", psWhere, btWhere, rs.Addr())

	const project = "topk-faults"
	name := fmt.Sprintf("killed-%d", time.Now().UnixNano())
	pc, err := pubsubx.NewClient(ctx, project, psAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	if err := pubsubx.EnsureTopic(ctx, pc, name); err != nil {
		t.Fatal(err)
	}
	if err := pubsubx.EnsureSubscription(ctx, pc, name, name, 10); err != nil {
		t.Fatal(err)
	}
	topic := pubsubx.TopicName(project, name)

	bin := buildBinary(t, "./pipelines/streaming")
	instance := fmt.Sprintf("killed%d", time.Now().UnixNano())
	args := []string{
		"--source=pubsub:" + pubsubx.SubscriptionName(project, name),
		"--pubsub_endpoint=" + psProxy.Addr(),
		"--redis=" + rs.Addr(), "--types=video", "--scopes=false", "--rules=none",
		"--bigtable_project=topk-test", "--bigtable_instance=" + instance,
		// Trending lists from the first minute (no 20-minute warm-up), so
		// that the trending state's recovery is checked too.
		"--trend_warm_up=0s",
	}
	env := []string{"REDIS_ADDR=", "BIGTABLE_EMULATOR_HOST=" + btProxy.Addr()}

	// 40 items, item i with 10*(40-i) events, published over 40 s while the
	// job is killed at three moments and started again each time.
	// TOPK_FAULTS_SCALE multiplies the events (the recovery measurement in
	// BENCHMARKS.md runs it at 25: 205,000 events).
	scale := 1
	if v, err := strconv.Atoi(os.Getenv("TOPK_FAULTS_SCALE")); err == nil && v > 0 {
		scale = v
	}
	rng := rand.New(rand.NewPCG(7, 9))
	exact := map[string]uint64{}
	var events []schemas.Event
	for i := range 40 {
		item := fmt.Sprintf("v_%d", i)
		n := 10 * (40 - i) * scale
		exact[item] = uint64(n)
		for j := range n {
			events = append(events, schemas.Event{EventID: fmt.Sprintf("%s-%d", item, j), Type: "video", Item: item, User: fmt.Sprintf("u_%d_%d", i, j)})
		}
	}
	rng.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
	total := len(events)

	rc := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rc.Close()
	st := liststore.New(rc, liststore.Options{})
	k := schemas.ListKey{Type: "video", Scope: "global", Window: schemas.Window1h}
	k5 := schemas.ListKey{Type: "video", Scope: "global", Window: schemas.Window5m}

	published := make(chan error, 1)
	go func() { published <- publishEvents(ctx, pc, topic, events, 40*time.Second, 10) }()
	// Moment 1: 5 s into the stream, before any list.
	job := startJob(t, bin, env, args)
	time.Sleep(5 * time.Second)
	job.kill()
	// Moment 2: once the restarted job has published a 5m list.
	started := time.Now()
	job = startJob(t, bin, env, args)
	for end := started.Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if l, err := st.CurrentList(ctx, k5); err == nil && l != nil && l.AsOf.After(started) {
			break
		}
		if time.Now().After(end) {
			job.kill()
			t.Fatalf("no 5m list within 90 s of the second start; log:\n%s", job.tail())
		}
	}
	job.kill()
	// Moment 3: 2 s after the next start (Prism starting, or the replay).
	job = startJob(t, bin, env, args)
	time.Sleep(2 * time.Second)
	job.kill()
	restart := time.Now()
	job = startJob(t, bin, env, args)
	defer job.kill()
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	done := time.Now() // the last event published
	t.Logf("killed (SIGKILL) three times: 5 s into the stream, after a 5m list, 2 s after a start; %d events published, every 10th beacon twice", total)
	const fault = "fast path kill -9 at 3 moments"
	// Both lists cover every event: the whole test is well inside 5 minutes
	// of event time. A list counts once its as_of is after the restart.
	type outcome struct {
		list                 *schemas.List
		under, over, missing int
		exactAt              time.Duration // since the last event was published; 0: never exact
	}
	res := map[schemas.Window]*outcome{schemas.Window5m: {}, schemas.Window1h: {}}
	var trend trendOutcome
	for end := time.Now().Add(150 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		pending := trend.exactAt == 0
		if pending {
			trend.check(ctx, st, restart, done, exact)
		}
		for w, o := range res {
			if o.exactAt > 0 {
				continue
			}
			pending = true
			l, err := st.CurrentList(ctx, schemas.ListKey{Type: "video", Scope: "global", Window: w})
			if err == nil && l != nil && !l.AsOf.Before(restart) {
				o.list = l
				o.under, o.over, o.missing = compareCounts(l, exact)
				if o.under == 0 && o.over == 0 && o.missing == 0 {
					o.exactAt = max(time.Since(done), time.Millisecond)
				}
			}
		}
		if !pending {
			break
		}
	}
	for _, w := range []schemas.Window{schemas.Window5m, schemas.Window1h} {
		o := res[w]
		check := fmt.Sprintf("%s list counts every event exactly once", w)
		if o.list == nil {
			rep.add(fault, check, false, "no %s list as of after the last start within 150 s; log:\n%s", w, job.tail())
			continue
		}
		rep.add(fault, check, o.exactAt > 0,
			"%d items (%d events, every 10th beacon published twice): list as of %s: %d under-counted, %d over-counted, %d missing; %s after the last event",
			len(exact), total, o.list.AsOf.Format("15:04:05"), o.under, o.over, o.missing, exactAfter(o.exactAt))
	}
	trendCheck := "trending list's count_5m exact for every item listed"
	if trend.list == nil {
		rep.add(fault, trendCheck, false, "no trending list as of after the last event within 150 s; log:\n%s", job.tail())
	} else {
		rep.add(fault, trendCheck, trend.exactAt > 0,
			"distinct users (the job's trending counts) of %d items: list as of %s with %d items (%s): %d under-counted, %d over-counted; %s after the last event",
			len(exact), trend.list.AsOf.Format("15:04:05"), len(trend.list.Items), trend.list.Counts, trend.under, trend.over, exactAfter(trend.exactAt))
	}
	logText, _ := os.ReadFile(job.log)
	replayed := strings.Contains(string(logText), "replay done")
	t.Logf("the last run's replay: %s", replaySpan(string(logText)))
	rep.add(fault, "the restarted job replayed its recovery log", replayed,
		"%s", map[bool]string{true: "its log says the replay is done", false: "no replay in its log"}[replayed])

	// Phase 3: the log's Bigtable goes away for 15 s while events arrive.
	const outage = "recovery log's Bigtable cut 15 s"
	var third []schemas.Event
	for i := range 10 {
		item := fmt.Sprintf("v_%d", i)
		for j := range 30 {
			third = append(third, schemas.Event{EventID: fmt.Sprintf("%s-late-%d", item, j), Type: "video", Item: item, User: fmt.Sprintf("w_%d_%d", i, j)})
		}
		exact[item] += 30
	}
	btProxy.Cut()
	cut := time.Now()
	if err := publishEvents(ctx, pc, topic, third, 5*time.Second, 10); err != nil {
		t.Fatal(err)
	}
	time.Sleep(15*time.Second - time.Since(cut))
	alive := job.cmd.ProcessState == nil && job.cmd.Process.Signal(syscall.Signal(0)) == nil
	rep.add(outage, "the job keeps running", alive, "%s", map[bool]string{true: "still running after 15 s without Bigtable", false: "the job exited:\n" + job.tail()}[alive])
	if err := btProxy.Restore(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	last, under, over, missing, exactAt := waitExact(ctx, st, k, exact, back, 120*time.Second)
	if last == nil {
		rep.add(outage, "1h list exact once Bigtable is back", false, "no 1h list within 120 s of its return; log:\n%s", job.tail())
	} else {
		rep.add(outage, "1h list exact once Bigtable is back", exactAt > 0,
			"%d more events during the outage: list as of %s: %d under-counted, %d over-counted, %d missing; %s after its return",
			len(third), last.AsOf.Format("15:04:05"), under, over, missing, exactAfter(exactAt))
	}

	// Phase 4: the job's Pub/Sub goes away for 20 s while events are
	// published (to Pub/Sub itself, which keeps them): the job's connections
	// are closed and new ones refused, so its pulls and acks fail or wait
	// in the client's own retries; a message it pulled just before the cut
	// and could not ack in time comes again after its 10 s ack deadline.
	// The job must neither stop, nor count a redelivered beacon twice (the
	// recovery log knows its beacon_id; the event_id dedupe is behind it),
	// nor lose one.
	const psOutage = "job's Pub/Sub cut 20 s"
	var fourth []schemas.Event
	for i := range 10 {
		item := fmt.Sprintf("v_%d", 2*i+1)
		for j := range 30 {
			fourth = append(fourth, schemas.Event{EventID: fmt.Sprintf("%s-cut-%d", item, j), Type: "video", Item: item, User: fmt.Sprintf("x_%d_%d", i, j)})
		}
		exact[item] += 30
	}
	// A beacon in flight as the cut comes: published (twice) just before
	// it, pulled perhaps, acked not.
	if err := publishEvents(ctx, pc, topic, fourth[:20], 0, 1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // pulled (every 200 ms when idle), its ack a second later
	logBefore := len(job.logText())
	conns := psProxy.Cut()
	cut = time.Now()
	if err := publishEvents(ctx, pc, topic, fourth[20:], 10*time.Second, 10); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20*time.Second - time.Since(cut))
	alive = job.cmd.ProcessState == nil && job.cmd.Process.Signal(syscall.Signal(0)) == nil
	during := job.logText()[logBefore:]
	pulls, acks := strings.Count(during, "pubsub pull"), strings.Count(during, "pubsub ack")
	rep.add(psOutage, "the job keeps running", alive, "%s", map[bool]string{true: "still running after 20 s without Pub/Sub", false: "the job exited:\n" + job.tail()}[alive])
	// The fault must have reached the job: only the job dials Pub/Sub
	// through the proxy.
	rep.add(psOutage, "the cut reached the job", conns > 0,
		"%d of the job's connections cut (0: the proxy is not in its path); %d pulls and %d acks failed after the client's retries (its log)", conns, pulls, acks)
	if err := psProxy.Restore(); err != nil {
		t.Fatal(err)
	}
	back = time.Now()
	last, under, over, missing, exactAt = waitExact(ctx, st, k, exact, back, 150*time.Second)
	if last == nil {
		rep.add(psOutage, "1h list exact once Pub/Sub is back", false, "no 1h list within 150 s of its return; log:\n%s", job.tail())
		return
	}
	rep.add(psOutage, "1h list exact once Pub/Sub is back", exactAt > 0,
		"%d more events (every 10th beacon twice): list as of %s: %d under-counted, %d over-counted, %d missing; %s after its return",
		len(fourth), last.AsOf.Format("15:04:05"), under, over, missing, exactAfter(exactAt))
}

// waitExact polls list k until a version as of after from counts exact
// exactly, or d passes; it returns the last list as of after from (nil:
// none), its differences from exact, and how long after from it became
// exact (0: never).
func waitExact(ctx context.Context, st *liststore.Store, k schemas.ListKey, exact map[string]uint64, from time.Time, d time.Duration) (last *schemas.List, under, over, missing int, exactAt time.Duration) {
	for end := from.Add(d); time.Now().Before(end) && exactAt == 0; time.Sleep(500 * time.Millisecond) {
		l, err := st.CurrentList(ctx, k)
		if err == nil && l != nil && l.AsOf.After(from) {
			last = l
			if under, over, missing = compareCounts(l, exact); under == 0 && over == 0 && missing == 0 {
				exactAt = time.Since(from)
			}
		}
	}
	return last, under, over, missing, exactAt
}

// exactAfter says when a list became exact: "exact N s", or "never exact"
// (0: the check's deadline passed first; the figures are the last list's).
func exactAfter(d time.Duration) string {
	if d == 0 {
		return "never exact"
	}
	return fmt.Sprintf("exact %.0f s", d.Seconds())
}

// trendOutcome is the trending list's check in TestFastPathKilled.
type trendOutcome struct {
	list        *schemas.Trending
	under, over int
	exactAt     time.Duration // since the last event was published; 0: not yet
}

// check reads the video/global trending list and, once it is as of after
// both the last start and the last event, compares each listed item's
// count_5m with exact (every user posts an item once, so the distinct
// users are the events; the beacons published twice repeat users, which
// must count once). The whole stream is inside its 5 minutes. Which items
// the list holds depends on when its ticks fell against the stream (an
// item scores against its own earlier shares, and the restarts move the
// ticks), so only a non-empty list is required of its membership.
func (o *trendOutcome) check(ctx context.Context, st *liststore.Store, restart, done time.Time, exact map[string]uint64) {
	raw, _, err := st.Current(ctx, schemas.ListKey{Type: "video", Scope: "global", Window: schemas.WindowTrending})
	if err != nil || raw == nil {
		return
	}
	l, err := schemas.UnmarshalTrending(raw)
	if err != nil || l.AsOf.Before(restart) || l.AsOf.Before(done) {
		return
	}
	o.list = l
	o.under, o.over = 0, 0
	for _, e := range l.Items {
		switch want := exact[e.Item]; {
		case e.Count5m < want:
			o.under++
		case e.Count5m > want:
			o.over++
		}
	}
	if o.under == 0 && o.over == 0 && len(l.Items) > 0 && l.Counts == schemas.CountsUsers {
		o.exactAt = max(time.Since(done), time.Millisecond)
	}
}

// replaySpan reports how long the replay in a job's log took, from its
// "replays messages" line to its "replay done" line.
func replaySpan(log string) string {
	at := func(marker string) (time.Time, bool) {
		for _, line := range strings.Split(log, "\n") {
			if !strings.Contains(line, marker) {
				continue
			}
			if f := strings.Fields(line); len(f) > 0 {
				if ts, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(f[0], "time=")); err == nil {
					return ts, true
				}
			}
		}
		return time.Time{}, false
	}
	from, ok1 := at("replays messages")
	to, ok2 := at("replay done")
	if !ok1 || !ok2 {
		return "not found in the log"
	}
	n := "?"
	if _, rest, ok := strings.Cut(log, "replay done: "); ok {
		n, _, _ = strings.Cut(rest, " ")
	}
	return fmt.Sprintf("%s messages in %s", n, to.Sub(from).Round(time.Millisecond))
}

// compareCounts counts the list's entries below, above and missing from
// exact (an item in the list but not in exact is over-counted).
func compareCounts(l *schemas.List, exact map[string]uint64) (under, over, missing int) {
	seen := map[string]bool{}
	for _, e := range l.Items {
		seen[e.Item] = true
		switch want := exact[e.Item]; {
		case e.Count < want:
			under++
		case e.Count > want:
			over++
		}
	}
	for item := range exact {
		if !seen[item] {
			missing++
		}
	}
	return under, over, missing
}

// publishEvents publishes events stamped now, in beacons of 20, spread over
// d; every dupEvery-th beacon (0: none) twice, as two messages with the same
// beacon_id (a client's retry after an ambiguous publish).
func publishEvents(ctx context.Context, c *pubsub.Client, topic string, events []schemas.Event, d time.Duration, dupEvery int) error {
	const per = 20
	n := (len(events) + per - 1) / per
	for b := 0; len(events) > 0; b++ {
		m := min(per, len(events))
		now := time.Now().UTC()
		beacon := schemas.Beacon{BeaconID: fmt.Sprintf("%s-%d", events[0].EventID, b), Events: slices.Clone(events[:m])}
		for i := range beacon.Events {
			beacon.Events[i].TS = now
		}
		data, err := schemas.MarshalBeacon(&beacon)
		if err != nil {
			return err
		}
		msg := &pb.PubsubMessage{Data: data, Attributes: map[string]string{
			source.TSAttribute: strconv.FormatInt(now.UnixMilli(), 10), source.BeaconAttribute: beacon.BeaconID}}
		copies := 1
		if dupEvery > 0 && b%dupEvery == 0 {
			copies = 2
		}
		for range copies {
			if _, err := c.TopicAdminClient.Publish(ctx, &pb.PublishRequest{Topic: topic, Messages: []*pb.PubsubMessage{msg}}); err != nil {
				return err
			}
		}
		events = events[m:]
		time.Sleep(d / time.Duration(n))
	}
	return nil
}

// job is one run of a binary under test (streaming, archive).
type job struct {
	cmd *exec.Cmd
	log string
}

func startJob(t *testing.T, bin string, env, args []string) *job {
	t.Helper()
	logf := filepath.Join(t.TempDir(), "streaming.log")
	f, err := os.Create(logf)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	j := &job{cmd: cmd, log: logf}
	t.Cleanup(func() { j.kill(); f.Close() })
	return j
}

// kill sends SIGKILL (only to the process this test started) and reaps it.
func (j *job) kill() {
	if j.cmd.ProcessState == nil {
		j.cmd.Process.Kill()
		j.cmd.Wait()
	}
}

// logText is the job's whole log so far.
func (j *job) logText() string {
	b, _ := os.ReadFile(j.log)
	return string(b)
}

// tail is the last 4 KB of the job's log.
func (j *job) tail() string {
	b, _ := os.ReadFile(j.log)
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}
