package recoverylog

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/topk-dev/topk/transforms/exact/store"
)

// TestNextReadsEverythingOnceInOrder: reading the log in steps of at most
// 7 rows per key range returns every record of the range exactly once,
// ordered by publish time and id, without the records of the skipped run;
// a millisecond holding more than 7 rows of one range (the fallback) and
// long empty stretches included. Seen finds records by message id and by
// beacon id.
func TestNextReadsEverythingOnceInOrder(t *testing.T) {
	addr, stop, err := store.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx := context.Background()
	// A fresh instance: with BIGTABLE_EMULATOR_HOST set (CI) the client
	// goes to that shared emulator, whatever address it is given.
	l, err := Open(ctx, Config{Project: "p", Instance: fmt.Sprintf("rl%d", time.Now().UnixNano()), EmulatorAddr: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	var old, cur []Record
	var want []string
	for i := range 400 {
		pub := int64(1_000_000 + (i/50)*3_600) // 8 bursts an hour apart...
		if i < 200 {
			pub = 1_000_000 // ...and 200 records in one millisecond
		}
		r := Record{ID: fmt.Sprintf("m%03d", i), Publish: pub, TS: pub - 5, Data: []byte{byte(i)}, Beacon: fmt.Sprintf("b%d", i)}
		if i%9 == 4 {
			cur = append(cur, r) // logged by the run that replays: skipped
			continue
		}
		old = append(old, r)
		want = append(want, fmt.Sprintf("%d/%s", r.Publish, r.ID))
	}
	if err := l.Append(ctx, "old", old); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(ctx, "cur", cur); err != nil {
		t.Fatal(err)
	}
	var got []string
	from, to := int64(999_000), int64(2_000_000)
	for steps := 0; from < to; steps++ {
		if steps > 1000 {
			t.Fatal("Next does not advance")
		}
		recs, next, err := l.Next(ctx, from, to, "cur", 7)
		if err != nil {
			t.Fatal(err)
		}
		if next <= from {
			t.Fatalf("Next(%d) moved to %d", from, next)
		}
		for _, r := range recs {
			if r.Publish < from || r.Publish >= next || r.TS != r.Publish-5 || len(r.Data) != 1 {
				t.Fatalf("record %+v outside [%d, %d) or damaged", r, from, next)
			}
			got = append(got, fmt.Sprintf("%d/%s", r.Publish, r.ID))
		}
		from = next
	}
	slices.Sort(want) // publish times are 7 digits, ids 3: string order is (publish, id) order
	if !slices.Equal(got, want) {
		t.Fatalf("replayed %d records, want %d, in order:\n got %v\nwant %v", len(got), len(want), got, want)
	}

	// Seen: a logged message by id, another message of a logged beacon by
	// beacon id, a new one not at all.
	seen, err := l.Seen(ctx, []Record{
		{ID: old[3].ID, Publish: old[3].Publish},
		{ID: "retry", Publish: 1_900_000, Beacon: cur[0].Beacon},
		{ID: "new", Publish: 1_900_000, Beacon: "b-new"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen[0] != (Logged{Run: "old", Publish: old[3].Publish}) || seen[1] != (Logged{Run: "cur", Publish: cur[0].Publish}) || len(seen) != 2 {
		t.Fatalf("Seen = %+v", seen)
	}
}
