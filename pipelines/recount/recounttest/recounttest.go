// Package recounttest holds test helpers for the exact recount: seeded
// archive hours and a plain-map oracle of their exact counts.
package recounttest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/archive"
	"github.com/topk-dev/topk/transforms/exact/store"
	"github.com/topk-dev/topk/transforms/exact/store/storetest"
)

// Hour0 is the event hour the tests seed.
var Hour0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

// NewStore is a fresh exact store (storetest.New: BIGTABLE_EMULATOR_HOST's
// emulator or an in-process bttest, its own instance), closed when the test
// ends.
func NewStore(t testing.TB) *store.Store {
	t.Helper()
	return storetest.New(t).Store
}

// GenEvents makes n distinct events in hour with skewed items, two types and
// three scope shapes (global only, country, country + region).
func GenEvents(seed uint64, hour time.Time, n int) []schemas.Event {
	r := rand.New(rand.NewPCG(seed, 99))
	z := rand.NewZipf(r, 1.2, 1, 300)
	out := make([]schemas.Event, n)
	for i := range out {
		e := schemas.Event{
			EventID: fmt.Sprintf("e-%d-%d", seed, i),
			Type:    []string{"video", "hashtag"}[r.IntN(2)],
			Item:    fmt.Sprintf("it_%d", z.Uint64()),
			User:    fmt.Sprintf("u%d", r.IntN(100)),
			TS:      hour.Add(time.Duration(r.Int64N(int64(time.Hour)))).Truncate(time.Millisecond),
		}
		switch r.IntN(3) {
		case 1:
			e.Country = "US"
		case 2:
			e.Country, e.Region = "IN", "IN-MH"
		}
		if i%50 == 0 {
			e.Item = "tag#" + e.Item // '#' in an id
		}
		out[i] = e
	}
	return out
}

// WriteArchive writes events to the archive layout of hour, under a local or
// a gs:// root: two part files, a late/ file, and _CLOSED. Every 7th event is
// written again (same event_id, at-least-once redelivery) in another file,
// some of them in late/.
func WriteArchive(t testing.TB, root string, hour time.Time, events []schemas.Event) {
	t.Helper()
	ctx := context.Background()
	dir := schemas.ArchiveHourPath(root, hour)
	if !archive.IsGCS(root) {
		must(t, os.RemoveAll(dir))
	}
	files := make([][]schemas.ArchiveEvent, 3)
	for i := range events {
		a := schemas.ArchiveEventOf(&events[i])
		files[i%3] = append(files[i%3], a)
		if i%7 == 0 {
			files[(i+1)%3] = append(files[(i+1)%3], a)
		}
	}
	names := []string{"part-w1-0.parquet", "part-w2-0.parquet", schemas.ArchiveLateDir + "/part-w1-1.parquet"}
	for i, rows := range files {
		must(t, archive.WriteFile(ctx, dir+"/"+names[i], func(w io.Writer) error { return parquet.Write(w, rows) }))
	}
	must(t, archive.WriteFile(ctx, dir+"/"+schemas.ArchiveClosed, func(io.Writer) error { return nil }))
}

// WriteReplay writes events in time order as NDJSON to a new file and
// returns its path: the fast path's file source over the same events.
func WriteReplay(t testing.TB, events []schemas.Event) string {
	t.Helper()
	sorted := slices.Clone(events)
	slices.SortStableFunc(sorted, func(a, b schemas.Event) int { return a.TS.Compare(b.TS) })
	path := filepath.Join(t.TempDir(), "events.ndjson")
	f, err := os.Create(path)
	must(t, err)
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for i := range sorted {
		must(t, enc.Encode(&sorted[i]))
	}
	must(t, w.Flush())
	must(t, f.Close())
	return path
}

// Oracle counts events exactly with a plain map, duplicates removed by
// event_id, per "type/scope/item".
func Oracle(events ...[]schemas.Event) map[string]int64 {
	seen := map[string]bool{}
	out := map[string]int64{}
	for _, evs := range events {
		for _, e := range evs {
			if seen[e.EventID] {
				continue
			}
			seen[e.EventID] = true
			for _, sc := range e.Scopes(nil) {
				out[e.Type+"/"+sc+"/"+e.Item]++
			}
		}
	}
	return out
}

// AsMap keys counts as Oracle does.
func AsMap(counts []schemas.ExactCount) map[string]int64 {
	out := map[string]int64{}
	for _, c := range counts {
		out[c.Type+"/"+c.Scope+"/"+c.Item] += c.Count
	}
	return out
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
