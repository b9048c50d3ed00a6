package liststore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/topk-dev/topk/internal/svctest"
	"github.com/topk-dev/topk/schemas"
)

// testStore returns a Store on the real Redis named by REDIS_ADDR, or on an
// in-process miniredis otherwise, under a key prefix unique to the test; the
// test's keys are deleted at the end (never a FLUSH).
func testStore(t *testing.T, opts Options) (*Store, *miniredis.Miniredis) {
	t.Helper()
	var mr *miniredis.Miniredis
	addr := os.Getenv("REDIS_ADDR")
	svctest.Report(t, "redis", addr != "", "REDIS_ADDR is not set: miniredis")
	if addr == "" {
		mr = miniredis.RunT(t)
		addr = mr.Addr()
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("redis %s: %v", addr, err)
	}
	if opts.Prefix == "" {
		opts.Prefix = fmt.Sprintf("topktest:%s:%d", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().UnixNano())
	}
	t.Cleanup(func() {
		iter := c.Scan(ctx, 0, escapeGlob(opts.Prefix)+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
		c.Close()
	})
	return New(c, opts), mr
}

var key1h = schemas.ListKey{Type: "video", Scope: "global", Window: schemas.Window1h}

// mkList builds a valid list whose every item name and count encodes its
// version, so that a reader can tell a mixed list from a whole one.
func mkList(k schemas.ListKey, version int64, n int) *schemas.List {
	l := &schemas.List{
		Type: k.Type, Scope: k.Scope, Window: k.Window,
		AsOf:         time.Unix(version, 0).UTC(),
		MaxOvercount: 3, Complete: true, CertifiedK: n, Version: version,
	}
	for i := 0; i < n; i++ {
		c := uint64(version)*10 + uint64(n-i)
		l.Items = append(l.Items, schemas.Entry{Rank: i + 1, Item: fmt.Sprintf("i%d-v%d", i, version), Count: c, Lower: c - 3})
	}
	return l
}

// checkWhole verifies that raw is exactly the list mkList builds for version.
func checkWhole(raw []byte, version int64) error {
	l, err := schemas.UnmarshalList(raw)
	if err != nil {
		return err
	}
	if l.Version != version {
		return fmt.Errorf("pointer says v%d, blob says v%d", version, l.Version)
	}
	want := mkList(key1h, version, len(l.Items))
	if len(l.Items) != int(10+version%50) {
		return fmt.Errorf("v%d has %d items, want %d", version, len(l.Items), 10+version%50)
	}
	for i := range l.Items {
		if l.Items[i] != want.Items[i] {
			return fmt.Errorf("v%d entry %d is %+v, want %+v", version, i, l.Items[i], want.Items[i])
		}
	}
	return nil
}

// Property: while 1,000 versions are published, concurrent readers (atomic
// Current, and a two-step reader that reads the pointer then the blob) only
// ever see whole lists, never a missing one, and never a version older than
// one they saw before.
func TestPublishAtomicUnderConcurrentReads(t *testing.T) {
	st, _ := testStore(t, Options{})
	ctx := context.Background()
	const first, publishes = 1, 1000
	size := func(v int64) int { return int(10 + v%50) }
	if _, err := st.Publish(ctx, mkList(key1h, first, size(first))); err != nil {
		t.Fatal(err)
	}
	var done atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	var reads, twoStep atomic.Int64
	versionsSeen := make([]map[int64]bool, 3)
	for r := 0; r < 3; r++ {
		versionsSeen[r] = map[int64]bool{}
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			var last int64
			for !done.Load() {
				raw, v, err := st.Current(ctx, key1h)
				if err != nil {
					errs <- fmt.Errorf("reader %d: %w", r, err)
					return
				}
				if v < last {
					errs <- fmt.Errorf("reader %d: version went back from %d to %d", r, last, v)
					return
				}
				last = v
				versionsSeen[r][v] = true
				if err := checkWhole(raw, v); err != nil {
					errs <- fmt.Errorf("reader %d: %w", r, err)
					return
				}
				reads.Add(1)
			}
		}(r)
	}
	// A reader without the script: pointer, then blob, in two round trips.
	// The old version's TTL is what keeps its blob readable.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !done.Load() {
			ns, err := st.c.Get(ctx, st.PointerKey(key1h)).Int64()
			if err != nil {
				errs <- fmt.Errorf("two-step pointer: %w", err)
				return
			}
			raw, err := st.c.Get(ctx, st.BlobKey(key1h, ns)).Bytes()
			if err != nil {
				errs <- fmt.Errorf("two-step blob v%d: %w", ns, err)
				return
			}
			if err := checkWhole(raw, ns); err != nil {
				errs <- fmt.Errorf("two-step: %w", err)
				return
			}
			twoStep.Add(1)
		}
	}()
	for v := int64(first + 1); v <= first+publishes; v++ {
		moved, err := st.Publish(ctx, mkList(key1h, v, size(v)))
		if err != nil {
			t.Fatal(err)
		}
		if !moved {
			t.Fatalf("v%d did not move the pointer", v)
		}
	}
	done.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	distinct := 0
	for _, m := range versionsSeen {
		distinct += len(m)
	}
	t.Logf("%d atomic reads (%d distinct versions over 3 readers), %d two-step reads during %d publishes", reads.Load(), distinct, twoStep.Load(), publishes)
	if reads.Load() == 0 || twoStep.Load() == 0 || distinct < 3 {
		t.Fatalf("readers did not overlap the publishes: %d reads, %d distinct versions", reads.Load(), distinct)
	}
	raw, v, err := st.Current(ctx, key1h)
	if err != nil || v != first+publishes {
		t.Fatalf("final Current = v%d, %v; want v%d", v, err, first+publishes)
	}
	if err := checkWhole(raw, v); err != nil {
		t.Fatal(err)
	}
}

// Property: republishing the same version is a no-op (no write, no message),
// and an older version never moves the pointer back nor leaves a blob.
func TestPublishIdempotentAndMonotone(t *testing.T) {
	st, _ := testStore(t, Options{OldVersionTTL: 90 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	moves, err := st.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v7 := mkList(key1h, 7, 20)
	for i, want := range []bool{true, false, false} {
		moved, err := st.Publish(ctx, v7)
		if err != nil || moved != want {
			t.Fatalf("publish v7 #%d: moved=%v err=%v, want moved=%v", i, moved, err, want)
		}
	}
	// A replay with different content for the same version changes nothing.
	other := mkList(key1h, 7, 30)
	if moved, err := st.Publish(ctx, other); err != nil || moved {
		t.Fatalf("publish other v7: moved=%v err=%v", moved, err)
	}
	if moved, err := st.Publish(ctx, mkList(key1h, 6, 20)); err != nil || moved {
		t.Fatalf("publish v6 after v7: moved=%v err=%v, want no move", moved, err)
	}
	if n, _ := st.c.Exists(ctx, st.BlobKey(key1h, 6)).Result(); n != 0 {
		t.Fatalf("v6 blob written although the pointer did not move")
	}
	raw, v, err := st.Current(ctx, key1h)
	if err != nil || v != 7 {
		t.Fatalf("Current = v%d, %v; want v7", v, err)
	}
	want, _ := schemas.MarshalList(v7)
	if string(raw) != string(want) {
		t.Fatalf("v7 blob changed by a replay")
	}
	if ttl := st.c.PTTL(ctx, st.BlobKey(key1h, 7)).Val(); ttl != -1 {
		t.Fatalf("current blob has TTL %v, want none", ttl)
	}
	if moved, err := st.Publish(ctx, mkList(key1h, 8, 20)); err != nil || !moved {
		t.Fatalf("publish v8: moved=%v err=%v", moved, err)
	}
	// v7 is now the previous version: kept, without expiry.
	if ttl := st.c.PTTL(ctx, st.BlobKey(key1h, 7)).Val(); ttl != -1 {
		t.Fatalf("previous blob v7 has TTL %v, want none", ttl)
	}
	if ttl := st.c.PTTL(ctx, st.BlobKey(key1h, 8)).Val(); ttl != -1 {
		t.Fatalf("new current blob has TTL %v, want none", ttl)
	}
	// Versions compare as numbers, not strings: 10 > 9.
	if _, err := st.Publish(ctx, mkList(key1h, 9, 20)); err != nil {
		t.Fatal(err)
	}
	if ttl := st.c.PTTL(ctx, st.BlobKey(key1h, 7)).Val(); ttl <= 0 || ttl > 90*time.Second {
		t.Fatalf("old blob v7 TTL %v, want in (0, 90s]", ttl)
	}
	if moved, err := st.Publish(ctx, mkList(key1h, 10, 20)); err != nil || !moved {
		t.Fatalf("publish v10 after v9: moved=%v err=%v", moved, err)
	}
	var got []string
	timeout := time.After(3 * time.Second)
	for len(got) < 4 {
		select {
		case k := <-moves:
			got = append(got, k.String())
		case <-timeout:
			t.Fatalf("got %d pointer-move messages %v, want 4 (v7, v8, v9, v10)", len(got), got)
		}
	}
	select {
	case k := <-moves:
		t.Fatalf("extra pointer-move message %v", k)
	case <-time.After(200 * time.Millisecond):
	}
	for _, s := range got {
		if s != key1h.String() {
			t.Fatalf("message %q, want %q", s, key1h.String())
		}
	}
}

func TestOldVersionExpires(t *testing.T) {
	st, mr := testStore(t, Options{OldVersionTTL: 300 * time.Millisecond})
	ctx := context.Background()
	for v := int64(1); v <= 3; v++ {
		if _, err := st.Publish(ctx, mkList(key1h, v, 5)); err != nil {
			t.Fatal(err)
		}
	}
	if mr != nil {
		mr.FastForward(time.Second)
	} else {
		time.Sleep(time.Second)
	}
	if n := st.c.Exists(ctx, st.BlobKey(key1h, 1)).Val(); n != 0 {
		t.Fatalf("v1 still exists after its TTL")
	}
	if n := st.c.Exists(ctx, st.BlobKey(key1h, 2)).Val(); n != 1 {
		t.Fatalf("previous version v2 expired")
	}
	if _, v, err := st.Current(ctx, key1h); err != nil || v != 3 {
		t.Fatalf("Current = v%d, %v", v, err)
	}
}

func TestPublishRejects(t *testing.T) {
	st, _ := testStore(t, Options{})
	ctx := context.Background()
	zero := mkList(key1h, 0, 3)
	badRank := mkList(key1h, 5, 3)
	badRank.Items[1].Rank = 7
	badScope := mkList(schemas.ListKey{Type: "video", Scope: "global:x", Window: "1h"}, 5, 3)
	for name, l := range map[string]*schemas.List{"version 0": zero, "bad rank": badRank, "bad scope": badScope} {
		if moved, err := st.Publish(ctx, l); err == nil || moved {
			t.Errorf("%s: moved=%v err=%v, want an error", name, moved, err)
		}
	}
	if _, _, err := st.Current(ctx, key1h); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Current after rejected publishes: %v, want ErrNotFound", err)
	}
}

func TestKeysAndPointers(t *testing.T) {
	st, _ := testStore(t, Options{})
	ctx := context.Background()
	want := []schemas.ListKey{
		{Type: "hashtag", Scope: "IN-MH", Window: schemas.Window5m},
		{Type: "video", Scope: "IN", Window: schemas.Window24h},
		{Type: "video", Scope: "global", Window: schemas.Window1h},
	}
	for i, k := range want {
		if _, err := st.Publish(ctx, mkList(k, int64(100+i), 3)); err != nil {
			t.Fatal(err)
		}
	}
	// Junk under the prefix is ignored.
	st.c.Set(ctx, st.Options().Prefix+":bogus:cur", "1", 0)
	st.c.Set(ctx, st.Options().Prefix+":a:b:c:d:cur", "1", 0)
	got, err := st.Keys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Keys = %v, want %v", got, want)
	}
	missing := schemas.ListKey{Type: "search", Scope: "global", Window: schemas.WindowAll}
	ptrs, err := st.Pointers(ctx, append(want, missing))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ptrs) != "[100 101 102 0]" {
		t.Fatalf("Pointers = %v", ptrs)
	}
}

func TestParseListKey(t *testing.T) {
	for _, s := range []string{"video:global:1h", "a1_b:IN-MH:all", "x:IN:24h"} {
		k, err := ParseListKey(s)
		if err != nil || k.String() != s {
			t.Errorf("ParseListKey(%q) = %v, %v", s, k, err)
		}
	}
	for _, s := range []string{"", "video:global", "video:global:2h", "Video:global:1h", "video:glob al:1h", "video:global:1h:x"} {
		if _, err := ParseListKey(s); err == nil {
			t.Errorf("ParseListKey(%q) accepted", s)
		}
	}
}

func TestRemovals(t *testing.T) {
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	st, _ := testStore(t, Options{Now: func() time.Time { return at }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, err := st.SubscribeRemovals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AddRemoval(ctx, "video", "v_9", "takedown #12"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AddRemoval(ctx, "hashtag", "spam", ""); err != nil {
		t.Fatal(err)
	}
	got, err := st.Removals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []Removal{{Type: "hashtag", Item: "spam", At: at}, {Type: "video", Item: "v_9", Reason: "takedown #12", At: at}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Removals = %+v, want %+v", got, want)
	}
	existed, err := st.DeleteRemoval(ctx, "video", "v_9")
	if err != nil || !existed {
		t.Fatalf("DeleteRemoval = %v, %v", existed, err)
	}
	existed, err = st.DeleteRemoval(ctx, "video", "v_9")
	if err != nil || existed {
		t.Fatalf("second DeleteRemoval = %v, %v; want false", existed, err)
	}
	var ops []string
	timeout := time.After(3 * time.Second)
	for len(ops) < 3 {
		select {
		case ev := <-events:
			ops = append(ops, ev.Op+":"+ev.Type+"/"+ev.Item)
		case <-timeout:
			t.Fatalf("removal events %v, want 3", ops)
		}
	}
	if fmt.Sprint(ops) != "[add:video/v_9 add:hashtag/spam delete:video/v_9]" {
		t.Fatalf("removal events %v", ops)
	}
	for _, bad := range [][3]string{{"Video", "x", ""}, {"video", "", ""}, {"video", "a b", ""}, {"video", "x", strings.Repeat("r", MaxReasonLen+1)}, {"video", "x", "\xff"}} {
		if _, err := st.AddRemoval(ctx, bad[0], bad[1], bad[2]); !errors.Is(err, ErrBadRemoval) {
			t.Errorf("AddRemoval(%q) = %v, want ErrBadRemoval", bad, err)
		}
	}
}
