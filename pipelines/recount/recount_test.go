package recount

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/topk-dev/topk/internal/gcstest"
	"github.com/topk-dev/topk/internal/prismopt/prismtest"
	"github.com/topk-dev/topk/pipelines/recount/recounttest"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/archive"
	"github.com/topk-dev/topk/transforms/exact/store"
)

func TestMain(m *testing.M) { prismtest.Main(m) }

var hour0 = recounttest.Hour0

func recount(t *testing.T, root string, st *store.Store, hours ...time.Time) []HourReport {
	t.Helper()
	reps, err := Run(context.Background(), Config{Archive: root, Hours: hours, K: 10, Shards: 4, Parts: 3,
		RequireClosed: true, Store: st})
	must(t, err)
	return reps
}

// snapshot is everything a reader can see: the Parquet table's bytes, the
// hour's Bigtable rows, 24h and all-time totals of every item, candidates.
func snapshot(t *testing.T, root string, st *store.Store, hours []time.Time, universe map[string]int64) string {
	t.Helper()
	ctx := context.Background()
	var b bytes.Buffer
	for _, h := range hours {
		raw, err := os.ReadFile(schemas.ExactHourPath(root, h))
		must(t, err)
		b.Write(raw)
		fmt.Fprintln(&b, hourCounts(t, st, h, universe))
	}
	for _, key := range slices.Sorted(maps.Keys(universe)) {
		parts := splitKey(key)
		typ, scope, item := parts[0], parts[1], parts[2]
		for _, w := range []schemas.Window{schemas.Window24h, schemas.WindowAll} {
			m, err := st.Totals(ctx, typ, scope, w, []string{item})
			must(t, err)
			fmt.Fprintln(&b, key, w, m[item])
			c, until, _, err := st.Candidates(ctx, typ, scope, w)
			must(t, err)
			fmt.Fprintln(&b, w, c, until)
		}
	}
	return b.String()
}

// hourCounts point-reads the hour's count of every "type/scope/item" key of
// universe from Bigtable; keys without a count are absent.
func hourCounts(t *testing.T, st *store.Store, hour time.Time, universe map[string]int64) map[string]int64 {
	t.Helper()
	byList := map[[2]string][]string{}
	for key := range universe {
		p := splitKey(key)
		byList[[2]string{p[0], p[1]}] = append(byList[[2]string{p[0], p[1]}], p[2])
	}
	out := map[string]int64{}
	for l, items := range byList {
		m, err := st.HourCounts(context.Background(), hour, l[0], l[1], items)
		must(t, err)
		for it, n := range m {
			out[l[0]+"/"+l[1]+"/"+it] = n
		}
	}
	return out
}

func splitKey(k string) [3]string {
	var out [3]string
	i := 0
	start := 0
	for j := 0; j < len(k) && i < 2; j++ {
		if k[j] == '/' {
			out[i] = k[start:j]
			i++
			start = j + 1
		}
	}
	out[2] = k[start:]
	return out
}

// Property: the recount of an hour (duplicates across files and in late/)
// equals an independent exact count, in Bigtable and in the Parquet table;
// rerunning it three times leaves identical tables and all-time totals.
func TestRecountExactAndRerunIdentical(t *testing.T) {
	root, st := t.TempDir(), recounttest.NewStore(t)
	evs := recounttest.GenEvents(1, hour0, 6000)
	recounttest.WriteArchive(t, root, hour0, evs)
	reps := recount(t, root, st, hour0)
	want := recounttest.Oracle(evs)

	if g := hourCounts(t, st, hour0, want); !maps.Equal(g, want) {
		t.Fatalf("Bigtable hour counts differ from the exact count: %d keys, want %d", len(g), len(want))
	}
	rows, err := parquet.ReadFile[schemas.ExactCount](schemas.ExactHourPath(root, hour0))
	must(t, err)
	if g := recounttest.AsMap(rows); !maps.Equal(g, want) {
		t.Fatalf("Parquet exact table differs from the exact count: %d keys, want %d", len(g), len(want))
	}
	for _, r := range rows {
		if !r.Hour.Equal(hour0) {
			t.Fatalf("row hour %v", r.Hour)
		}
	}
	if m := reps[0].Metrics; m["exact_duplicates_dropped"] == 0 || m["exact_events_counted"] != int64(len(evs)) {
		t.Errorf("metrics %v: want duplicates dropped and %d events counted", m, len(evs))
	}
	if reps[0].ExactUntil != store.HourKey(hour0.Add(time.Hour)) {
		t.Errorf("exact_until %s, want %s", reps[0].ExactUntil, store.HourKey(hour0.Add(time.Hour)))
	}
	first := snapshot(t, root, st, []time.Time{hour0}, want)
	for i := range 3 {
		recount(t, root, st, hour0)
		if s := snapshot(t, root, st, []time.Time{hour0}, want); s != first {
			t.Fatalf("rerun %d changed the tables", i+1)
		}
	}
	all, err := st.Totals(context.Background(), "video", "global", schemas.WindowAll, []string{"it_1"})
	must(t, err)
	if all["it_1"] != want["video/global/it_1"] {
		t.Errorf("all-time total of it_1 after reruns %d, want %d", all["it_1"], want["video/global/it_1"])
	}
}

// Property: recounting an hour from a gs:// archive (the in-process fake
// Cloud Storage) gives the same exact counts, in Bigtable and in the Parquet
// exact table (the same bytes, uploaded next to the archive), as from a
// local archive holding the same files.
func TestRecountFromGCS(t *testing.T) {
	ctx := context.Background()
	evs := recounttest.GenEvents(6, hour0, 5000)
	want := recounttest.Oracle(evs)
	var tables [][]byte
	for _, root := range []string{t.TempDir(), gcstest.Root(t)} {
		st := recounttest.NewStore(t)
		recounttest.WriteArchive(t, root, hour0, evs)
		reps := recount(t, root, st, hour0)
		if reps[0].Files != 3 || reps[0].Metrics["exact_events_counted"] != int64(len(evs)) {
			t.Fatalf("%s: report %+v, want 3 files and %d events counted", root, reps[0], len(evs))
		}
		if g := hourCounts(t, st, hour0, want); !maps.Equal(g, want) {
			t.Fatalf("%s: Bigtable hour counts differ from the exact count: %d keys, want %d", root, len(g), len(want))
		}
		f, err := archive.OpenFile(ctx, schemas.ExactHourPath(root, hour0))
		must(t, err)
		raw, err := io.ReadAll(io.NewSectionReader(f, 0, f.Size()))
		must(t, err)
		f.Close()
		rows, err := parquet.Read[schemas.ExactCount](bytes.NewReader(raw), int64(len(raw)))
		must(t, err)
		if g := recounttest.AsMap(rows); !maps.Equal(g, want) {
			t.Fatalf("%s: Parquet exact table differs from the exact count: %d keys, want %d", root, len(g), len(want))
		}
		tables = append(tables, raw)
	}
	if !bytes.Equal(tables[0], tables[1]) {
		t.Error("the exact tables from the local and the gs:// archive differ")
	}
}

// Property: with two hours recounted, 24h and all-time totals are their sum;
// a corrected hour (files rewritten, hour rerun) fixes the 24h totals and
// moves all-time by the correction only, including items that disappeared.
func TestCorrectedHourFixesTotals(t *testing.T) {
	root, st := t.TempDir(), recounttest.NewStore(t)
	h1 := hour0.Add(time.Hour)
	a, b := recounttest.GenEvents(2, hour0, 3000), recounttest.GenEvents(3, h1, 3000)
	recounttest.WriteArchive(t, root, hour0, a)
	recounttest.WriteArchive(t, root, h1, b)
	reps := recount(t, root, st, hour0, h1)
	if reps[1].ExactUntil != store.HourKey(h1.Add(time.Hour)) {
		t.Fatalf("exact_until %s", reps[1].ExactUntil)
	}
	check := func(what string, want map[string]int64, universe map[string]int64) {
		t.Helper()
		ctx := context.Background()
		for key := range universe {
			p := splitKey(key)
			for _, w := range []schemas.Window{schemas.Window24h, schemas.WindowAll} {
				m, err := st.Totals(ctx, p[0], p[1], w, []string{p[2]})
				must(t, err)
				if m[p[2]] != want[key] {
					t.Fatalf("%s: %s total of %s = %d, want %d", what, w, key, m[p[2]], want[key])
				}
			}
		}
		for _, l := range [][2]string{{"video", "global"}, {"hashtag", "IN-MH"}} {
			c, _, _, err := st.Candidates(ctx, l[0], l[1], schemas.Window24h)
			must(t, err)
			if len(c) == 0 || c[0].Count != maxOf(want, l[0], l[1]) {
				t.Fatalf("%s: 24h top of %v = %+v, want count %d", what, l, c[:min(1, len(c))], maxOf(want, l[0], l[1]))
			}
		}
	}
	universe := recounttest.Oracle(a, b)
	check("two hours", recounttest.Oracle(a, b), universe)
	// Correct hour 0: a different set of events (some items vanish).
	fixed := recounttest.GenEvents(4, hour0, 2000)
	recounttest.WriteArchive(t, root, hour0, fixed)
	recount(t, root, st, hour0)
	for k := range recounttest.Oracle(fixed) {
		universe[k] = 1
	}
	check("corrected hour 0", recounttest.Oracle(fixed, b), universe)
	eu, err := st.ExactUntil(context.Background())
	must(t, err)
	if !eu.Equal(h1.Add(time.Hour)) {
		t.Errorf("exact_until moved to %v on a rerun", eu)
	}
}

func maxOf(m map[string]int64, typ, scope string) int64 {
	var best int64
	for k, n := range m {
		if p := splitKey(k); p[0] == typ && p[1] == scope && n > best {
			best = n
		}
	}
	return best
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
