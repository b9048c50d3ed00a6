package liststore

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/topk-dev/topk/internal/redistest"
	"github.com/topk-dev/topk/schemas"
)

// Property: within one queue the newest version of a list wins: a newer
// offer replaces an older queued one, an older offer is dropped, and Flush
// publishes only the newest.
func TestPublisherNewestWins(t *testing.T) {
	st, _ := testStore(t, Options{})
	p := NewPublisher(st, nil)
	blob := func(v int64) []byte { b, _ := schemas.MarshalList(mkList(key1h, v, int(10+v%50))); return b }
	for _, v := range []int64{3, 5, 4, 1} {
		p.Offer(key1h, v, blob(v))
	}
	if p.Pending() != 1 {
		t.Fatalf("%d lists queued, want 1", p.Pending())
	}
	moved, err := p.Flush(context.Background())
	if err != nil || moved != 1 {
		t.Fatalf("flush: moved=%d err=%v", moved, err)
	}
	raw, v, err := st.Current(context.Background(), key1h)
	if err != nil || v != 5 {
		t.Fatalf("current v%d err=%v, want v5", v, err)
	}
	if err := checkWhole(raw, 5); err != nil {
		t.Fatal(err)
	}
	// An older version after a newer one was written: skipped by the script.
	p.Offer(key1h, 4, blob(4))
	if moved, err := p.Flush(context.Background()); err != nil || moved != 0 {
		t.Fatalf("older flush: moved=%d err=%v", moved, err)
	}
	if s := p.Stats(); s.Published != 2 || s.Moved != 1 || s.Superseded != 3 {
		t.Fatalf("stats %+v", s)
	}
}

// Property: publishing rides out a Redis outage longer than 7 s, both a
// frozen Redis (SIGSTOP: connections hang) and a killed one restarted empty
// on the same port: Flush never returns an error, the pointer a reader sees
// never moves backwards, each outage ends with the list moving again within
// 3 s of Redis returning, and at the end the newest version offered is
// current.
func TestPublisherSurvivesRedisOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the Redis outage test takes about 25 s")
	}
	rs := redistest.New(t)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	defer c.Close()
	st := New(c, Options{})
	p := NewPublisher(st, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The producer offers a new version every 50 ms; the flusher publishes
	// continuously, as the pipeline's bundles do.
	var last atomic.Int64
	var flushErrs atomic.Int64
	var wg sync.WaitGroup
	stopProducing := make(chan struct{})
	wg.Add(2)
	go func() {
		defer wg.Done()
		for v := int64(1); ; v++ {
			select {
			case <-stopProducing:
				return
			case <-time.After(50 * time.Millisecond):
			}
			b, _ := schemas.MarshalList(mkList(key1h, v, int(10+v%50)))
			p.Offer(key1h, v, b)
			last.Store(v)
		}
	}()
	flusherDone := make(chan struct{})
	go func() {
		defer wg.Done()
		for {
			if _, err := p.Flush(ctx); err != nil && ctx.Err() == nil {
				flushErrs.Add(1)
				t.Errorf("Flush returned %v", err)
			}
			select {
			case <-flusherDone:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()

	// The monitor reads the pointer through its own client every 20 ms.
	type obs struct {
		at time.Time
		v  int64
	}
	var mu sync.Mutex
	var seen []obs
	mon := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond})
	defer mon.Close()
	monDone := make(chan struct{})
	go func() {
		for {
			select {
			case <-monDone:
				return
			case <-time.After(20 * time.Millisecond):
			}
			s, err := mon.Get(ctx, st.PointerKey(key1h)).Result()
			if err != nil {
				continue
			}
			v, _ := strconv.ParseInt(s, 10, 64)
			mu.Lock()
			seen = append(seen, obs{time.Now(), v})
			mu.Unlock()
		}
	}()
	movedAfter := func(t0 time.Time, floor int64) time.Duration {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			mu.Lock()
			for _, o := range seen {
				if o.at.After(t0) && o.v > floor {
					mu.Unlock()
					return o.at.Sub(t0)
				}
			}
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
		return -1
	}
	current := func() int64 {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) == 0 {
			return 0
		}
		return seen[len(seen)-1].v
	}

	time.Sleep(2 * time.Second)
	before := current()
	if before == 0 {
		t.Fatal("nothing published before the outage")
	}
	rs.Freeze()
	time.Sleep(8 * time.Second)
	frozenAt := last.Load()
	thawed := time.Now()
	rs.Thaw()
	d1 := movedAfter(thawed, frozenAt-1)
	time.Sleep(time.Second)
	killedAt := current()
	rs.Kill()
	time.Sleep(8 * time.Second)
	restarted := time.Now()
	rs.Start()
	d2 := movedAfter(restarted, 0)
	time.Sleep(time.Second)
	close(stopProducing)
	time.Sleep(100 * time.Millisecond)
	want := last.Load()
	eventually(t, 5*time.Second, func() bool { return current() == want })
	close(flusherDone)
	close(monDone)
	wg.Wait()

	if d1 < 0 || d1 > 3*time.Second {
		t.Errorf("after the freeze the list moved past v%d %v after Redis returned, want within 3 s", frozenAt-1, d1)
	}
	if d2 < 0 || d2 > 3*time.Second {
		t.Errorf("after the restart the list moved %v after Redis returned, want within 3 s", d2)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(seen); i++ {
		if seen[i].v < seen[i-1].v {
			t.Fatalf("pointer moved backwards: v%d then v%d", seen[i-1].v, seen[i].v)
		}
	}
	raw, v, err := st.Current(context.Background(), key1h)
	if err != nil || v != want {
		t.Fatalf("current v%d err=%v, want v%d", v, err, want)
	}
	if err := checkWhole(raw, want); err != nil {
		t.Fatal(err)
	}
	s := p.Stats()
	t.Logf("v%d before, v%d at the freeze, v%d at the kill, v%d at the end; moved again %v after the thaw, %v after the restart; %d reads; stats %+v",
		before, frozenAt, killedAt, want, d1.Round(time.Millisecond), d2.Round(time.Millisecond), len(seen), s)
	if flushErrs.Load() != 0 || s.Failures == 0 {
		t.Fatalf("flush errors %d, failed attempts %d (want 0 errors and some failed attempts)", flushErrs.Load(), s.Failures)
	}
}

func eventually(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
