package store

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/api/option"

	"github.com/topk-dev/topk/internal/svctest"
	"github.com/topk-dev/topk/schemas"
)

var instanceSeq atomic.Int64

// backends runs f against the in-process bttest, and against the official
// emulator when BIGTABLE_EMULATOR_HOST is set (CI sets it). Each run gets its
// own instance name, so tables never collide on a shared emulator.
func backends(t *testing.T, f func(t *testing.T, s *Store)) {
	t.Run("bttest", func(t *testing.T) {
		addr, stop, err := Embedded()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		f(t, open(t, EmulatorOptions(addr)...))
	})
	t.Run("emulator", func(t *testing.T) {
		svctest.Need(t, "bigtable", os.Getenv("BIGTABLE_EMULATOR_HOST") != "", "BIGTABLE_EMULATOR_HOST is not set (CI sets it)")
		f(t, open(t))
	})
}

func open(t testing.TB, opts ...option.ClientOption) *Store {
	t.Helper()
	ctx := context.Background()
	inst := fmt.Sprintf("t%d-%d", time.Now().UnixNano(), instanceSeq.Add(1))
	s, err := Open(ctx, "topk-test", inst, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.EnsureTables(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureTables(ctx); err != nil { // idempotent
		t.Fatalf("second EnsureTables: %v", err)
	}
	return s
}

var h0 = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

func hr(i int) time.Time { return h0.Add(time.Duration(i) * time.Hour) }

func ec(hour time.Time, typ, scope, item string, n int64) schemas.ExactCount {
	return schemas.ExactCount{Hour: hour, Type: typ, Scope: scope, Item: item, Count: n}
}

// dump is every row's latest cells, as "key fam:col=value" lines.
func dump(t *testing.T, s *Store) []string {
	t.Helper()
	var out []string
	err := s.tbl.ReadRows(context.Background(), bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		for fam, items := range r {
			for _, it := range items {
				v := string(it.Value)
				if fam == famC && it.Column == "c:at" { // done time: wall clock
					v = "*"
				}
				out = append(out, r.Key()+" "+it.Column+"="+v)
			}
		}
		return true
	}, latest)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// checkOneVersion: no cell has a second version (overwrites at cellTS
// replace in place; the table has no GC policy to clean up otherwise).
func checkOneVersion(t *testing.T, s *Store) {
	t.Helper()
	err := s.tbl.ReadRows(context.Background(), bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		for _, items := range r {
			seen := map[string]bool{}
			for _, it := range items {
				if seen[it.Column] {
					t.Errorf("row %s column %s has more than one version", r.Key(), it.Column)
					return false
				}
				seen[it.Column] = true
			}
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
}

// genHour makes random counts for an hour: items i0..i{n-1} in two lists.
func genHour(r *rand.Rand, hour time.Time, n int) []schemas.ExactCount {
	var out []schemas.ExactCount
	for _, l := range [][2]string{{"video", "global"}, {"video", "IN"}} {
		for i := range n {
			if r.IntN(4) == 0 {
				continue
			}
			out = append(out, ec(hour, l[0], l[1], fmt.Sprintf("v#%d%%", i), int64(1+r.IntN(50)*r.IntN(50))))
		}
	}
	return out
}

func sumOf(hours ...[]schemas.ExactCount) map[string]int64 {
	m := map[string]int64{}
	for _, h := range hours {
		for _, c := range h {
			m[c.Type+"/"+c.Scope+"/"+c.Item] += c.Count
		}
	}
	return m
}

func items(counts []schemas.ExactCount, typ, scope string) []string {
	set := map[string]bool{}
	for _, c := range counts {
		if c.Type == typ && c.Scope == scope {
			set[c.Item] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// checkTotals: Totals(window) for every item of counts equals want.
func checkTotals(t *testing.T, s *Store, w schemas.Window, universe []schemas.ExactCount, want map[string]int64) {
	t.Helper()
	ctx := context.Background()
	for _, l := range [][2]string{{"video", "global"}, {"video", "IN"}} {
		its := items(universe, l[0], l[1])
		got, err := s.Totals(ctx, l[0], l[1], w, its)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range its {
			if g, e := got[it], want[l[0]+"/"+l[1]+"/"+it]; g != e {
				t.Errorf("%s total of %s/%s/%s = %d, want %d", w, l[0], l[1], it, g, e)
			}
		}
	}
}

// Property: writing an hour replaces it. After a first write of a different
// set, three reruns of the same counts leave byte-identical tables (latest
// cells), and rows of items not in the new set are gone.
func TestWriteHourRerunIdentical(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		r := rand.New(rand.NewPCG(1, 2))
		first := genHour(r, hr(5), 200)
		final := genHour(r, hr(5), 150)
		other := genHour(r, hr(6), 100)
		must(t, s.WriteHour(ctx, hr(6), other, 10))
		must(t, s.WriteHour(ctx, hr(5), first, 10))
		var snaps [][]string
		for range 3 {
			must(t, s.WriteHour(ctx, hr(5), final, 10))
			snaps = append(snaps, dump(t, s))
		}
		for i := 1; i < 3; i++ {
			if !slices.Equal(snaps[0], snaps[i]) {
				t.Fatalf("rerun %d changed the table", i+1)
			}
		}
		checkOneVersion(t, s)
		universe := slices.Concat(first, final, other)
		if got, want := hourCounts(t, s, hr(5), universe), sumOf(final); !maps.Equal(got, want) {
			t.Errorf("hour 5 has %d counts, want the %d of the last write", len(got), len(want))
		}
		if got, want := hourCounts(t, s, hr(6), universe), sumOf(other); !maps.Equal(got, want) {
			t.Errorf("hour 6 changed by writes of hour 5")
		}
		checkTotals(t, s, schemas.WindowAll, universe, sumOf(final, other))
		for _, l := range [][2]string{{"video", "global"}, {"video", "IN"}} {
			top, rest, err := s.HourTop(ctx, hr(5), l[0], l[1])
			must(t, err)
			var want []schemas.ExactCount
			for _, c := range final {
				if c.Type == l[0] && c.Scope == l[1] {
					want = append(want, c)
				}
			}
			want = topOfList(want, len(want))
			var wantRest int64
			if len(want) > 10*10 { // depth TopDepthFactor*k
				want, wantRest = want[:100], want[100].Count
			}
			if len(top) != len(want) || rest != wantRest {
				t.Fatalf("HourTop(%v) has %d items rest %d, want %d rest %d", l, len(top), rest, len(want), wantRest)
			}
			for i := range want {
				if top[i].Item != want[i].Item || top[i].Count != want[i].Count || !top[i].Hour.Equal(hr(5)) {
					t.Fatalf("HourTop(%v)[%d] = %+v, want %+v", l, i, top[i], want[i])
				}
			}
		}
	})
}

// hourCounts reads the hour's count of every item of universe (both lists)
// by point reads, keyed as sumOf keys them.
func hourCounts(t *testing.T, s *Store, hour time.Time, universe []schemas.ExactCount) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, l := range [][2]string{{"video", "global"}, {"video", "IN"}} {
		got, err := s.HourCounts(context.Background(), hour, l[0], l[1], items(universe, l[0], l[1]))
		must(t, err)
		for it, n := range got {
			out[l[0]+"/"+l[1]+"/"+it] = n
		}
	}
	return out
}

func equalCounts(a, b []schemas.ExactCount) bool {
	return maps.Equal(sumOf(a), sumOf(b)) && len(a) == len(b)
}

// Property: all-time totals equal the sum of each hour's latest counts; three
// reruns of an hour leave every table identical; a corrected hour moves the
// totals by the correction only, including items the correction removed.
func TestAllTimeRerunSafe(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		r := rand.New(rand.NewPCG(3, 4))
		hours := [][]schemas.ExactCount{genHour(r, hr(0), 120), genHour(r, hr(1), 120), genHour(r, hr(2), 120)}
		for i, h := range hours {
			must(t, s.WriteHour(ctx, hr(i), h, 10))
		}
		all := slices.Concat(hours...)
		checkTotals(t, s, schemas.WindowAll, all, sumOf(hours...))
		before := dump(t, s)
		for range 3 {
			must(t, s.WriteHour(ctx, hr(1), hours[1], 10))
			if after := dump(t, s); !slices.Equal(before, after) {
				t.Fatalf("rerun of hour 1 changed the tables")
			}
		}
		// Correction: hour 1 loses half its items and changes the rest.
		var fixed []schemas.ExactCount
		for i, c := range hours[1] {
			if i%2 == 0 {
				c.Count += int64(i % 7)
				fixed = append(fixed, c)
			}
		}
		for range 2 {
			must(t, s.WriteHour(ctx, hr(1), fixed, 10))
			checkTotals(t, s, schemas.WindowAll, all, sumOf(hours[0], fixed, hours[2]))
		}
		checkCandidates(t, s, schemas.WindowAll, sumOf(hours[0], fixed, hours[2]), 30)
	})
}

// Property: 24h totals are the sum of the 24 hourly partitions of the window;
// a corrected hour fixes them at the next recompute; items whose hours left
// the window read as zero.
func TestRecompute24h(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		r := rand.New(rand.NewPCG(5, 6))
		var hours [][]schemas.ExactCount
		for i := range 26 {
			h := genHour(r, hr(i), 40)
			if i == 0 { // an item only seen in hour 0
				h = append(h, ec(hr(0), "video", "global", "only-h0", 99))
			}
			hours = append(hours, h)
			must(t, s.WriteHour(ctx, hr(i), h, 5))
		}
		all := slices.Concat(hours...)
		must(t, s.Recompute24h(ctx, hr(24), 5))
		checkTotals(t, s, schemas.Window24h, all, sumOf(hours[0:24]...))
		checkCandidates(t, s, schemas.Window24h, sumOf(hours[0:24]...), 15)
		// Correct hour 10, then recompute the same end: fixed.
		fixed := genHour(r, hr(10), 40)
		must(t, s.WriteHour(ctx, hr(10), fixed, 5))
		hours[10] = fixed
		must(t, s.Recompute24h(ctx, hr(24), 5))
		checkTotals(t, s, schemas.Window24h, all, sumOf(hours[0:24]...))
		// Correct hour 0 without only-h0: gone at the same end.
		must(t, s.WriteHour(ctx, hr(0), hours[0][:len(hours[0])-1], 5))
		must(t, s.Recompute24h(ctx, hr(24), 5))
		if got, _ := s.Totals(ctx, "video", "global", schemas.Window24h, []string{"only-h0"}); len(got) != 0 {
			t.Errorf("item removed by a correction still has a 24h total: %v", got)
		}
		must(t, s.WriteHour(ctx, hr(0), hours[0], 5))
		// Move the window: hour 0 drops out.
		must(t, s.Recompute24h(ctx, hr(26), 5))
		checkTotals(t, s, schemas.Window24h, all, sumOf(hours[2:26]...))
		got, err := s.Totals(ctx, "video", "global", schemas.Window24h, []string{"only-h0"})
		must(t, err)
		if len(got) != 0 {
			t.Errorf("item of a dropped hour still has a 24h total: %v", got)
		}
		checkCandidates(t, s, schemas.Window24h, sumOf(hours[2:26]...), 15)
		_, until, _, err := s.Candidates(ctx, "video", "global", schemas.Window24h)
		must(t, err)
		if !until.Equal(hr(26)) {
			t.Errorf("24h candidates exact until %v, want %v", until, hr(26))
		}
	})
}

// checkCandidates: the candidates of each list are the true top n by the
// exact totals (counts equal rank by rank; items equal above the last tied
// count), and say they are every item exactly when the list has fewer than
// n items.
func checkCandidates(t *testing.T, s *Store, w schemas.Window, totals map[string]int64, n int) {
	t.Helper()
	for _, scope := range []string{"global", "IN"} {
		got, _, all, err := s.Candidates(context.Background(), "video", scope, w)
		must(t, err)
		if msg := sameTop(got, trueTop(totals, scope, n)); msg != "" {
			t.Fatalf("%s/%s: %s", scope, w, msg)
		}
		if every := len(trueTop(totals, scope, len(totals)+1)) < n; all != every {
			t.Fatalf("%s/%s: candidates are every item: %v, want %v", scope, w, all, every)
		}
	}
}

// sameTop reports how got differs from the true top want ("" if it does
// not): counts equal rank by rank, items equal above the last count (items
// tied with the last entry may be any of the tied ones).
func sameTop(got, want []schemas.ExactCount) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d entries, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Count != want[i].Count {
			return fmt.Sprintf("rank %d: count %d, want %d", i+1, got[i].Count, want[i].Count)
		}
		if want[i].Count > want[len(want)-1].Count && got[i].Item != want[i].Item {
			return fmt.Sprintf("rank %d: item %q, want %q", i+1, got[i].Item, want[i].Item)
		}
	}
	return ""
}

// trueTop is the top n of the video list of scope in totals (sumOf keys).
func trueTop(totals map[string]int64, scope string, n int) []schemas.ExactCount {
	var l []schemas.ExactCount
	for k, c := range totals {
		if p := strings.SplitN(k, "/", 3); p[1] == scope && c > 0 {
			l = append(l, schemas.ExactCount{Item: p[2], Count: c})
		}
	}
	return topOfList(l, n)
}

func topOfList(l []schemas.ExactCount, n int) []schemas.ExactCount {
	m := map[string]int64{}
	for _, c := range l {
		m[c.Item] = c.Count
	}
	return topOf(m, n)
}

// Property: all-time candidates stay the true top through many hours,
// reruns and corrections that lower counts (which force a rescan), for a
// small k so the list is full.
func TestAllTimeCandidatesTrueTop(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		r := rand.New(rand.NewPCG(7, 8))
		var hours [][]schemas.ExactCount
		for i := range 8 {
			h := genHour(r, hr(i), 60)
			hours = append(hours, h)
			must(t, s.WriteHour(ctx, hr(i), h, 4))
			checkCandidates(t, s, schemas.WindowAll, sumOf(hours...), 12)
		}
		// Correct hour 3 down to a few small counts: the old top loses.
		var low []schemas.ExactCount
		for _, c := range hours[3][:10] {
			c.Count = 1
			low = append(low, c)
		}
		hours[3] = low
		must(t, s.WriteHour(ctx, hr(3), low, 4))
		checkCandidates(t, s, schemas.WindowAll, sumOf(hours...), 12)
		// A different k rescans the lists the next hour touches.
		hours = append(hours, genHour(r, hr(8), 60))
		must(t, s.WriteHour(ctx, hr(8), hours[8], 6))
		checkCandidates(t, s, schemas.WindowAll, sumOf(hours...), 18)
	})
}

// Property: ids with '#' and '%' round-trip through every key, and a scope
// that is a prefix of another ("IN" and "IN-MH") never reads the other's rows.
func TestKeyEscaping(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		h := hr(0)
		counts := []schemas.ExactCount{
			ec(h, "tag", "IN", "#fun", 3), ec(h, "tag", "IN", "a%23b", 2),
			ec(h, "tag", "IN-MH", "#fun", 7), ec(h, "tag", "IN", "x#IN-MH#y", 1),
		}
		must(t, s.WriteHour(ctx, h, counts, 10))
		got, err := s.HourCounts(ctx, h, "tag", "IN", []string{"#fun", "a%23b", "x#IN-MH#y", "a#b"})
		must(t, err)
		want := map[string]int64{"#fun": 3, "a%23b": 2, "x#IN-MH#y": 1}
		if !maps.Equal(got, want) {
			t.Errorf("HourCounts(tag, IN) = %v, want %v", got, want)
		}
		tot, err := s.Totals(ctx, "tag", "IN-MH", schemas.WindowAll, []string{"#fun", "a%23b"})
		must(t, err)
		if !maps.Equal(tot, map[string]int64{"#fun": 7}) {
			t.Errorf("Totals(IN-MH) = %v", tot)
		}
		c, _, all, err := s.Candidates(ctx, "tag", "IN", schemas.WindowAll)
		must(t, err)
		if !all {
			t.Errorf("3 candidates of capacity 30 do not say they are every item")
		}
		if len(c) != 3 || c[0].Item != "#fun" || c[0].Count != 3 {
			t.Errorf("Candidates(tag, IN) = %+v", c)
		}
	})
}

// Property: exact_until only moves over hours done without a gap, never back.
func TestExactUntil(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		eu, err := s.ExactUntil(ctx)
		must(t, err)
		if !eu.IsZero() {
			t.Fatalf("fresh store exact_until %v", eu)
		}
		for _, i := range []int{3, 4, 6} {
			must(t, s.MarkHourDone(ctx, hr(i)))
		}
		eu, err = s.AdvanceExactUntil(ctx)
		must(t, err)
		if !eu.Equal(hr(5)) {
			t.Fatalf("exact_until %v, want %v (hour 5 missing)", eu, hr(5))
		}
		must(t, s.MarkHourDone(ctx, hr(5)))
		eu, err = s.AdvanceExactUntil(ctx)
		must(t, err)
		if !eu.Equal(hr(7)) {
			t.Fatalf("exact_until %v, want %v", eu, hr(7))
		}
		must(t, s.MarkHourDone(ctx, hr(3))) // rerun of an old hour
		if eu, _ = s.AdvanceExactUntil(ctx); !eu.Equal(hr(7)) {
			t.Fatalf("exact_until moved to %v on a rerun", eu)
		}
		must(t, s.SetExactUntil(ctx, hr(9)))
		if eu, _ = s.ExactUntil(ctx); !eu.Equal(hr(9)) {
			t.Fatalf("SetExactUntil: %v", eu)
		}
	})
}

// Property: grades round-trip and a regrade replaces the old one.
func TestGrades(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		g := Grade{Hour: hr(1), Type: "video", Scope: "global", RecallAt100: 0.98, RecallAt1000: 0.97,
			MaxOvercountVsBound: -3, MaxDisplacement100: 4, Alert: true}
		must(t, s.WriteGrade(ctx, g))
		g.Alert, g.RecallAt100 = false, 1
		must(t, s.WriteGrade(ctx, g))
		must(t, s.WriteGrade(ctx, Grade{Hour: hr(2), Type: "video", Scope: "IN"}))
		must(t, s.WriteGrade(ctx, Grade{Hour: hr(5), Type: "video", Scope: "IN"}))
		got, err := s.Grades(ctx, hr(0), hr(3))
		must(t, err)
		if len(got) != 2 || got[0] != g || got[1].Scope != "IN" {
			t.Fatalf("Grades = %+v", got)
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Property: TopOfHours is the exact top of any set of hours (with gaps), by
// either path: answered from the hours' tops, or by the scan when the tops
// are too shallow to prove it (small k: tops of 10k items of 60).
func TestTopOfHours(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		r := rand.New(rand.NewPCG(9, 10))
		var hours [][]schemas.ExactCount
		for i := range 12 {
			h := genHour(r, hr(i), 60)
			hours = append(hours, h)
			must(t, s.WriteHour(ctx, hr(i), h, 1+i%3))
		}
		for trial := range 40 {
			var set []time.Time
			var parts [][]schemas.ExactCount
			for i := range hours {
				if r.IntN(3) > 0 {
					set = append(set, hr(i))
					parts = append(parts, hours[i])
				}
			}
			limit := 1 + r.IntN(12)
			sums := sumOf(parts...)
			for _, scope := range []string{"global", "IN"} {
				got, err := s.TopOfHours(ctx, "video", scope, set, limit)
				must(t, err)
				want := trueTop(sums, scope, limit)
				if msg := sameTop(got, want); msg != "" {
					t.Fatalf("trial %d %s limit %d hours %v: %s\n got %v\nwant %v", trial, scope, limit, set, msg, got, want)
				}
				for _, e := range got {
					if e.Type != "video" || e.Scope != scope || sums["video/"+scope+"/"+e.Item] != e.Count {
						t.Fatalf("trial %d: entry %+v is not its list's exact total", trial, e)
					}
				}
			}
		}
		if n := s.topScans.Load(); n == 0 {
			t.Errorf("no TopOfHours call needed the scan: the fallback is untested")
		}
	})
}
