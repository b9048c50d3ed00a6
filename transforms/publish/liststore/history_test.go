package liststore

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// ttls returns the PTTL of every held version of key1h: -1 for none.
func ttls(t *testing.T, st *Store) map[int64]time.Duration {
	t.Helper()
	ctx := context.Background()
	vs, err := st.Versions(ctx, key1h)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]time.Duration{}
	for _, v := range vs {
		out[v] = st.c.PTTL(ctx, st.BlobKey(key1h, v)).Val()
	}
	return out
}

// checkRetention asserts the store's retention invariant: exactly the
// current and the previous version are kept without expiry, every other
// held version expires within OldVersionTTL.
func checkRetention(t *testing.T, st *Store, cur, prev int64) {
	t.Helper()
	for v, ttl := range ttls(t, st) {
		keep := v == cur || v == prev
		switch {
		case keep && ttl != -1:
			t.Errorf("v%d (current v%d, previous v%d) has TTL %v, want none", v, cur, prev, ttl)
		case !keep && (ttl <= 0 || ttl > st.opts.OldVersionTTL):
			t.Errorf("v%d (current v%d, previous v%d) has TTL %v, want in (0, %v]", v, cur, prev, ttl, st.opts.OldVersionTTL)
		}
	}
}

// Property: CurrentWithPrevious returns the current blob and the one current
// before it, survives any number of publishes (the previous blob never
// expires), and skips sending a blob the caller holds.
func TestCurrentWithPrevious(t *testing.T) {
	st, mr := testStore(t, Options{OldVersionTTL: time.Second})
	ctx := context.Background()
	if _, err := st.CurrentWithPrevious(ctx, key1h, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("empty: %v, want ErrNotFound", err)
	}
	if _, err := st.Publish(ctx, mkList(key1h, 10, 20)); err != nil {
		t.Fatal(err)
	}
	snap, err := st.CurrentWithPrevious(ctx, key1h, 0)
	if err != nil || snap.Version != 10 || snap.PrevVersion != 0 || snap.PrevRaw != nil {
		t.Fatalf("first version: %+v %v, want v10 and no previous", snap, err)
	}
	for v := int64(20); v <= 50; v += 10 {
		if _, err := st.Publish(ctx, mkList(key1h, v, int(10+v%50))); err != nil {
			t.Fatal(err)
		}
	}
	// Long after every TTL: the previous version is still there.
	if mr != nil {
		mr.FastForward(time.Hour)
	} else {
		time.Sleep(1500 * time.Millisecond)
	}
	snap, err = st.CurrentWithPrevious(ctx, key1h, 0)
	if err != nil || snap.Version != 50 || snap.PrevVersion != 40 {
		t.Fatalf("after publishes: v%d prev v%d, %v; want v50, v40", snap.Version, snap.PrevVersion, err)
	}
	if err := checkWhole(snap.Raw, 50); err != nil {
		t.Fatal(err)
	}
	if err := checkWhole(snap.PrevRaw, 40); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.Versions(ctx, key1h); !slices.Equal(got, []int64{40, 50}) {
		t.Fatalf("held after the TTL: %v, want [40 50]", got)
	}
	snap, err = st.CurrentWithPrevious(ctx, key1h, 40)
	if err != nil || snap.PrevVersion != 40 || snap.PrevRaw != nil {
		t.Fatalf("skip v40: prev v%d raw %d bytes, %v; want v40 without its blob", snap.PrevVersion, len(snap.PrevRaw), err)
	}
}

// Property: a rollback moves the pointer back to a held earlier version,
// announces it like a publish, keeps the retention invariant, and never
// blocks the pipeline: the next publish above it moves the pointer forward.
// Versions not held, not earlier, or of a list never published are refused
// and change nothing.
func TestRollback(t *testing.T) {
	st, _ := testStore(t, Options{OldVersionTTL: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := st.Rollback(ctx, key1h, 5); !errors.Is(err, ErrNotFound) {
		t.Fatalf("rollback of an unpublished list: %v, want ErrNotFound", err)
	}
	for _, v := range []int64{100, 110, 120, 130} {
		if _, err := st.Publish(ctx, mkList(key1h, v, int(10+v%50))); err != nil {
			t.Fatal(err)
		}
	}
	checkRetention(t, st, 130, 120)
	moves, err := st.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		to   int64
		want error
	}{{130, ErrNotEarlier}, {140, ErrNotEarlier}, {105, ErrVersionNotHeld}, {0, ErrVersionNotHeld}} {
		if _, err := st.Rollback(ctx, key1h, tc.to); !errors.Is(err, tc.want) {
			t.Fatalf("rollback to v%d: %v, want %v", tc.to, err, tc.want)
		}
	}
	if _, v, _ := st.Current(ctx, key1h); v != 130 {
		t.Fatalf("refused rollbacks moved the pointer to v%d", v)
	}

	// Two versions back: the previous version becomes the newest below it.
	from, err := st.Rollback(ctx, key1h, 110)
	if err != nil || from != 130 {
		t.Fatalf("rollback to v110: from v%d, %v; want from v130", from, err)
	}
	select {
	case k := <-moves:
		if k != key1h {
			t.Fatalf("move message for %v", k)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("no pointer-move message for the rollback")
	}
	snap, err := st.CurrentWithPrevious(ctx, key1h, 0)
	if err != nil || snap.Version != 110 || snap.PrevVersion != 100 {
		t.Fatalf("after rollback: v%d prev v%d, %v; want v110 prev v100", snap.Version, snap.PrevVersion, err)
	}
	if err := checkWhole(snap.Raw, 110); err != nil {
		t.Fatal(err)
	}
	checkRetention(t, st, 110, 100)

	// The pipeline's next publish moves it forward again; so would a
	// replay of the abandoned version.
	if moved, err := st.Publish(ctx, mkList(key1h, 140, 50)); err != nil || !moved {
		t.Fatalf("publish after rollback: moved=%v %v", moved, err)
	}
	snap, err = st.CurrentWithPrevious(ctx, key1h, 0)
	if err != nil || snap.Version != 140 || snap.PrevVersion != 110 {
		t.Fatalf("after the next publish: v%d prev v%d, %v; want v140 prev v110", snap.Version, snap.PrevVersion, err)
	}
	checkRetention(t, st, 140, 110)

	// Rolling back to the oldest held version leaves no previous one.
	if _, err := st.Rollback(ctx, key1h, 100); err != nil {
		t.Fatal(err)
	}
	snap, err = st.CurrentWithPrevious(ctx, key1h, 0)
	if err != nil || snap.Version != 100 || snap.PrevVersion != 0 {
		t.Fatalf("rollback to the oldest: v%d prev v%d, %v", snap.Version, snap.PrevVersion, err)
	}
	checkRetention(t, st, 100, 0)
}
