package stitch

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/teststream"

	"github.com/topk-dev/topk/internal/prismopt/prismtest"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/exact/store"
	"github.com/topk-dev/topk/transforms/exact/store/storetest"
	"github.com/topk-dev/topk/transforms/preagg"
	"github.com/topk-dev/topk/transforms/summary"
)

func TestMain(m *testing.M) { prismtest.Main(m) }

func init() {
	register.Function3x1[beam.EventTime, []byte, func(beam.EventTime, string, []byte), error](decodeElemFn)
	register.DoFn2x1[string, []byte, error](&writeListFn{})
}

const (
	typ   = "video"
	scope = "global"
	parts = 2
	k     = 5
)

var h0 = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

func hr(i int) time.Time { return h0.Add(time.Duration(i) * time.Hour) }

// fixture is a store with exact hours and the true counts behind them.
type fixture struct {
	st    *store.Store
	cfg   StoreConfig
	exact map[time.Time]map[string]int64 // hour -> item -> count
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	st := storetest.New(t)
	cfg := StoreConfig{Project: st.Project, Instance: st.Instance, EmulatorAddr: st.EmulatorAddr}
	return &fixture{st: st.Store, cfg: cfg, exact: map[time.Time]map[string]int64{}}
}

func items(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("v%02d", i)
	}
	return out
}

// randCounts draws counts for items; a few items dominate.
func randCounts(r *rand.Rand, its []string) map[string]int64 {
	m := map[string]int64{}
	for i, it := range its {
		if r.IntN(5) == 0 {
			continue
		}
		m[it] = int64(1 + r.IntN(20) + (len(its)-i)*r.IntN(4))
	}
	return m
}

// recount writes hour's exact counts as the exact pipeline does and moves
// exact_until.
func (f *fixture) recount(t *testing.T, hour time.Time, counts map[string]int64) time.Time {
	t.Helper()
	ctx := context.Background()
	f.exact[hour] = counts
	var ecs []schemas.ExactCount
	for it, n := range counts {
		ecs = append(ecs, schemas.ExactCount{Hour: hour, Type: typ, Scope: scope, Item: it, Count: n})
	}
	if err := f.st.WriteHour(ctx, hour, ecs, 3*k); err != nil {
		t.Fatal(err)
	}
	if err := f.st.Recompute24h(ctx, hour.Add(time.Hour), 3*k); err != nil {
		t.Fatal(err)
	}
	if err := f.st.MarkHourDone(ctx, hour); err != nil {
		t.Fatal(err)
	}
	e, err := f.st.AdvanceExactUntil(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// seed recounts 25 hours (h0..h24): E = hr(25).
func (f *fixture) seed(t *testing.T, r *rand.Rand, its []string) time.Time {
	var e time.Time
	for i := range 25 {
		e = f.recount(t, hr(i), randCounts(r, its))
	}
	if !e.Equal(hr(25)) {
		t.Fatalf("exact_until %v, want %v", e, hr(25))
	}
	return e
}

// minute is one (partition, minute)'s true counts and its summary.
type minute struct {
	start  time.Time
	part   int
	counts map[string]int64
	sm     []byte
}

// minutes makes n minutes of open data from start, per partition, with
// small summaries (N = 3) so the open part has real bounds.
func minutes(t *testing.T, r *rand.Rand, its []string, start time.Time, n int) []minute {
	t.Helper()
	var out []minute
	for i := range n {
		for p := range parts {
			c := summary.NewCounter(1000)
			counts := map[string]int64{}
			for _, it := range its {
				h := summary.Hash(it)
				if summary.Partition(h, parts) != p || r.IntN(3) == 0 {
					continue
				}
				v := int64(1 + r.IntN(6))
				counts[it] = v
				c.Add(it, h, uint64(v))
			}
			b, err := c.Summary(summary.Config{N: 3}).MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, minute{start: start.Add(time.Duration(i) * time.Minute), part: p, counts: counts, sm: b})
		}
	}
	return out
}

// truth is the true counts of [from, to) (from zero: all time) given the
// exact hours and the open minutes of hours not recounted yet.
func (f *fixture) truth(open []minute, from, to time.Time) map[string]int64 {
	m := map[string]int64{}
	for h, c := range f.exact {
		if !h.Before(from) && h.Before(to) {
			for it, n := range c {
				m[it] += n
			}
		}
	}
	for _, mn := range open {
		if _, recounted := f.exact[mn.start.Truncate(time.Hour)]; recounted {
			continue // the recount of its hour holds it
		}
		if !mn.start.Before(from) && mn.start.Before(to) {
			for it, n := range mn.counts {
				m[it] += n
			}
		}
	}
	return m
}

// check verifies a list against the true counts of its window.
func check(t *testing.T, l *schemas.List, e time.Time, truth map[string]int64) {
	t.Helper()
	name := fmt.Sprintf("%s@%s", l.Window, l.AsOf.Format("15:04"))
	if l.ExactUntil == nil || !l.ExactUntil.Equal(e) {
		t.Errorf("%s: exact_until %v, want %v", name, l.ExactUntil, e)
	}
	listed := map[string]bool{}
	for _, en := range l.Items {
		tr := uint64(truth[en.Item])
		listed[en.Item] = true
		if en.Count < tr || en.Lower > tr {
			t.Errorf("%s: %s count %d lower %d, true %d", name, en.Item, en.Count, en.Lower, tr)
		}
		if en.Count-en.Lower > l.MaxOvercount {
			t.Errorf("%s: %s count-lower %d > max_overcount %d", name, en.Item, en.Count-en.Lower, l.MaxOvercount)
		}
	}
	// The certified prefix is the true top certified_k.
	var minCert int64 = 1 << 62
	for _, en := range l.Items[:l.CertifiedK] {
		minCert = min(minCert, truth[en.Item])
	}
	for it, n := range truth {
		inCert := false
		for _, en := range l.Items[:l.CertifiedK] {
			inCert = inCert || en.Item == it
		}
		if !inCert && l.CertifiedK > 0 && n > minCert {
			t.Errorf("%s: %s (true %d) outside the certified top %d (smallest true %d)", name, it, n, l.CertifiedK, minCert)
		}
	}
}

// ---- pipeline ----

func encodeElem(key string, sm []byte) []byte {
	b := binary.AppendUvarint(nil, uint64(len(key)))
	return append(append(b, key...), sm...)
}

func decodeElemFn(ts beam.EventTime, b []byte, emit func(beam.EventTime, string, []byte)) error {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return fmt.Errorf("bad element")
	}
	emit(ts, string(b[k:k+int(n)]), b[k+int(n):])
	return nil
}

type writeListFn struct{ Dir string }

func (fn *writeListFn) ProcessElement(key string, js []byte) error {
	l, err := schemas.UnmarshalList(js)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("%s_%d.json", l.Window, l.AsOf.UnixMilli())
	return os.WriteFile(filepath.Join(fn.Dir, name), js, 0o644)
}

func readLists(t *testing.T, dir string) []*schemas.List {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	var out []*schemas.List
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		l, err := schemas.UnmarshalList(b)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].AsOf.Equal(out[j].AsOf) {
			return out[i].AsOf.Before(out[j].AsOf)
		}
		return out[i].Window < out[j].Window
	})
	return out
}

// TestPipeline feeds five open minutes after E through a TestStream into
// OpenParts and Lists on Prism and checks every 24h and all list.
func TestPipeline(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	its := items(30)
	f := newFixture(t)
	e := f.seed(t, r, its)
	open := minutes(t, r, its, e, 5)

	ts := teststream.NewConfig()
	for i := 0; i < len(open); i += parts {
		end := open[i].start.Add(time.Minute)
		for _, mn := range open[i : i+parts] {
			if err := ts.AddElements(end.UnixMilli()-1, encodeElem(preagg.Key(typ, scope, mn.part), mn.sm)); err != nil {
				t.Fatal(err)
			}
		}
		if err := ts.AdvanceWatermark(end.UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}
	if err := ts.AdvanceWatermarkToInfinity(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.Store, cfg.K, cfg.Margin = f.cfg, k, 2
	cfg.IdleLimit, cfg.ExactUntilTTL = time.Minute, 0
	p, s := beam.NewPipelineWithRoot()
	elems := teststream.Create(s, ts)
	mins := beam.ParDo(s, decodeElemFn, elems)
	lists := Lists(s, OpenParts(s, mins, cfg), cfg)
	beam.ParDo0(s, &writeListFn{Dir: dir}, lists)
	if err := ptest.Run(p); err != nil {
		t.Fatal(err)
	}
	got := readLists(t, dir)
	seen := map[schemas.Window]int{}
	for _, l := range got {
		seen[l.Window]++
		var from time.Time
		if l.Window == schemas.Window24h {
			from = e.Add(-24 * time.Hour)
		}
		check(t, l, e, f.truth(open, from, l.AsOf))
		if l.AsOf.Sub(e) <= 5*time.Minute && l.MaxOvercount == 0 {
			t.Logf("%s@%v: open part without bounds", l.Window, l.AsOf)
		}
	}
	// Minutes 1..5 with data, then the idle re-arming to the end of the
	// hour plus IdleLimit: every minute has both lists.
	want := 61
	if seen[schemas.Window24h] != want || seen[schemas.WindowAll] != want {
		t.Errorf("lists per window %v, want %d each", seen, want)
	}
}

// TestMovingExactUntil: a recount of the oldest open hour moves E, and the
// next list uses one fewer estimated hour; once every open hour is recounted
// the lists are the exact totals.
func TestMovingExactUntil(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	its := items(30)
	f := newFixture(t)
	e := f.seed(t, r, its)
	// Open data: 3 minutes in hour E and 3 in hour E+1.
	open := append(minutes(t, r, its, e.Add(10*time.Minute), 3), minutes(t, r, its, e.Add(70*time.Minute), 3)...)
	state := make([]struct{ hours, minutes map[int64][]byte }, parts)
	for p := range state {
		state[p].hours, state[p].minutes = map[int64][]byte{}, map[int64][]byte{}
	}
	for _, mn := range open {
		state[mn.part].minutes[mn.start.UnixMilli()] = mn.sm
	}
	step := func(asOf, e time.Time, wantHours int) []*schemas.List {
		t.Helper()
		var ps []Part
		for p := range state {
			changed, delH, delM, hours, err := Fold(state[p].hours, state[p].minutes, asOf, e)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range delM {
				delete(state[p].minutes, m)
			}
			for _, h := range delH {
				delete(state[p].hours, h)
			}
			for h, v := range changed {
				state[p].hours[h] = v
			}
			if len(hours) != wantHours {
				t.Errorf("as of %v, E %v: partition %d has %d open hours, want %d", asOf, e, p, len(hours), wantHours)
			}
			// Through the wire format.
			dec, err := DecodeHours(EncodeHours(hours))
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, Part{Partition: p, Hours: dec})
		}
		lists, err := Build(ctx, f.st, typ, scope, asOf, ps, k, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(lists) != 2 {
			t.Fatalf("as of %v: %d lists, want 24h and all", asOf, len(lists))
		}
		for _, l := range lists {
			var from time.Time
			if l.Window == schemas.Window24h {
				from = e.Add(-24 * time.Hour)
			}
			check(t, l, e, f.truth(open, from, asOf))
		}
		return lists
	}
	asOf := e.Add(80 * time.Minute)
	two := step(asOf, e, 2)

	// Recount hour E with the open data's true counts.
	e1 := f.recount(t, e, f.truth(open, e, e.Add(time.Hour)))
	if !e1.Equal(e.Add(time.Hour)) {
		t.Fatalf("exact_until %v", e1)
	}
	one := step(asOf.Add(time.Minute), e1, 1)
	for i := range one {
		if one[i].MaxOvercount > two[i].MaxOvercount {
			t.Errorf("%s: max_overcount %d with one open hour > %d with two", one[i].Window, one[i].MaxOvercount, two[i].MaxOvercount)
		}
	}

	// Recount hour E+1 too: nothing is open, the lists are exact.
	e2 := f.recount(t, e1, f.truth(open, e1, e1.Add(time.Hour)))
	none := step(e2, e2, 0)
	for _, l := range none {
		var from time.Time
		if l.Window == schemas.Window24h {
			from = e2.Add(-24 * time.Hour)
		}
		truth := f.truth(nil, from, e2)
		if l.MaxOvercount != 0 || l.CertifiedK != len(l.Items) || !l.Complete {
			t.Errorf("%s: empty open part: max_overcount %d, certified %d of %d, complete %v", l.Window, l.MaxOvercount, l.CertifiedK, len(l.Items), l.Complete)
		}
		for _, en := range l.Items {
			if en.Count != en.Lower || en.Count != uint64(truth[en.Item]) {
				t.Errorf("%s: %s count %d lower %d, exact %d", l.Window, en.Item, en.Count, en.Lower, truth[en.Item])
			}
		}
		if len(l.Items) != k+2 {
			t.Errorf("%s: %d items, want %d", l.Window, len(l.Items), k+2)
		}
	}
}
