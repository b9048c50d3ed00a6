package trend

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/topk-dev/topk/schemas"
)

var t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

const tick = 10 * time.Second

// viral is the ramp: from nothing to frac of the background's
// rate over 5 minutes from start, holding for hold, then halving every 3
// minutes.
func viral(bgRate, frac float64, start time.Time, hold time.Duration) func(time.Time) float64 {
	top := bgRate * frac
	return func(t time.Time) float64 {
		switch d := t.Sub(start); {
		case d < 0:
			return 0
		case d < 5*time.Minute:
			return top * float64(d) / float64(5*time.Minute)
		case d < 5*time.Minute+hold:
			return top
		default:
			return top * math.Exp2(-float64(d-5*time.Minute-hold)/float64(3*time.Minute))
		}
	}
}

func rankOf(l *schemas.Trending, item string) int {
	for _, e := range l.Items {
		if e.Item == item {
			return e.Rank
		}
	}
	return 0
}

func checkList(t *testing.T, l *schemas.Trending) {
	t.Helper()
	raw, err := schemas.MarshalTrending(l)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := schemas.UnmarshalTrending(raw); err != nil {
		t.Fatalf("list at %s does not check: %v", l.AsOf, err)
	}
}

// TestViralRampOverZipf: a viral item ramping to 5% of the traffic over 5
// minutes, after 30 minutes of a steady Zipf background, is rank 1 within 2
// minutes of its ramp's end and stays listed for at least one half-life
// after its peak (decayed peak); the background's top 10 (constant shares)
// never enter the top 20 after the warm-up; the list is empty during the
// warm-up and every list passes schemas' checks.
func TestViralRampOverZipf(t *testing.T) {
	if testing.Short() {
		t.Skip("3 simulated hours")
	}
	const rate = 200.0
	w := newWorld(1, 2000, rate)
	rampStart := t0.Add(30 * time.Minute)
	w.special["viral"] = viral(rate, 0.05, rampStart, 10*time.Minute)
	cfg := DefaultConfig()
	sc := New("hashtag", "IN-MH", cfg)
	top10 := w.bg[:10]

	rampEnd := rampStart.Add(5 * time.Minute)
	var firstRank1 time.Time
	var peakAt time.Time
	lastListed := time.Time{}
	end := rampEnd.Add(10*time.Minute + cfg.HalfLife + 15*time.Minute)
	for now := t0.Add(tick); !now.After(end); now = now.Add(tick) {
		w.step(now)
		l, err := sc.Step(context.Background(), w.input(now, 1100), nil)
		if err != nil {
			t.Fatal(err)
		}
		if now.Sub(t0) < cfg.WarmUp {
			if len(l.Items) != 0 {
				t.Fatalf("%s: warm-up list has %d items", now, len(l.Items))
			}
			continue
		}
		if now.Sub(t0) == cfg.WarmUp || now.Equal(end) {
			checkList(t, l)
		}
		for _, it := range top10 {
			if r := rankOf(l, it); r >= 1 && r <= 20 {
				t.Fatalf("%s: evergreen %s is trending at rank %d: %+v", now, it, r, l.Items[r-1])
			}
		}
		r := rankOf(l, "viral")
		if r == 1 && firstRank1.IsZero() {
			firstRank1 = now
		}
		if r > 0 {
			lastListed = now
			peakAt = l.Items[r-1].PeakAt
		}
	}
	if firstRank1.IsZero() || firstRank1.After(rampEnd.Add(2*time.Minute)) {
		t.Fatalf("viral first rank 1 at %s, want by %s", firstRank1, rampEnd.Add(2*time.Minute))
	}
	if peakAt.IsZero() || lastListed.Before(peakAt.Add(cfg.HalfLife)) {
		t.Fatalf("viral peaked at %s, last listed at %s: want listed until at least %s", peakAt, lastListed, peakAt.Add(cfg.HalfLife))
	}
	t.Logf("viral rank 1 at ramp end %+v, peak at %s, listed until %s; tracked items %d", firstRank1.Sub(rampEnd), peakAt.Format(time.TimeOnly), lastListed.Format(time.TimeOnly), sc.Len())
}

// TestReference: over a shorter run with a ramp, every list (items, ranks,
// scores, count_5m, baseline_5m) equals an independent computation from the
// raw events' 5-minute windows (world_test.go's reference: flat history, no
// rings), with the list truncated so that the cut matters.
func TestReference(t *testing.T) {
	const rate = 100.0
	w := newWorld(2, 500, rate)
	w.special["spike"] = viral(rate, 0.04, t0.Add(22*time.Minute), 4*time.Minute)
	w.special["slow"] = func(t time.Time) float64 { return rate * 0.002 * float64(t.Sub(t0)) / float64(time.Hour) }
	cfg := DefaultConfig()
	cfg.Hours = 2
	cfg.HalfLife = 10 * time.Minute
	cfg.Enter, cfg.Leave = 2e-4, 1e-4
	cfg.Size = 30
	sc := New("hashtag", "global", cfg)
	ref := newReference(cfg)
	listed := 0
	for now := t0.Add(tick); !now.After(t0.Add(75 * time.Minute)); now = now.Add(tick) {
		w.step(now)
		in := w.input(now, 80)
		l, err := sc.Step(context.Background(), in, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := ref.add(in)
		if len(l.Items) != len(want) {
			t.Fatalf("%s: %d items, reference %d\ngot  %+v\nwant %+v", now, len(l.Items), len(want), l.Items, want)
		}
		for i, e := range l.Items {
			x := want[i]
			if e.Item != x.item || e.Count5m != x.count || !close(e.Score, x.score) || !close(e.Baseline5m, x.base) {
				t.Fatalf("%s rank %d: got %+v, reference %+v", now, i+1, e, x)
			}
		}
		listed += len(l.Items)
	}
	if listed == 0 {
		t.Fatal("nothing was ever listed: the comparison is vacuous")
	}
}

func close(a, b float64) bool { return math.Abs(a-b) <= 1e-12+1e-9*math.Abs(b) }

// TestFloor: over a small steady background, after the warm-up, a
// brand-new item with 3 events in its first 5-minute window does not trend
// (minimum volume; its floor is "three an hour") and one with 300 does, at
// rank 1, with a full list (every item listed) and with a truncated one,
// observing every item (MinTrack 1) and the default (MinTrack 2). Its
// baseline is the list's cut: the floor, 0.25 events, when the list held
// every item and every item was observed; otherwise the largest share an
// untracked item may have had in an earlier slot (refCut).
func TestFloor(t *testing.T) {
	for _, minTrack := range []uint64{1, 2} {
		for _, listLen := range []int{0, 150} {
			w := newWorld(3, 300, 100)
			cfg := DefaultConfig()
			cfg.MinTrack = minTrack
			sc := New("hashtag", "global", cfg)
			var in Input
			now := t0
			var maxCut float64 // the largest cut share of the earlier slots
			for now = t0.Add(tick); !now.After(t0.Add(30 * time.Minute)); now = now.Add(tick) {
				w.step(now)
				in = w.input(now, listLen)
				if now.Before(t0.Add(30 * time.Minute)) {
					maxCut = max(maxCut, refCut(in, minTrack))
				}
				if _, err := sc.Step(context.Background(), in, nil); err != nil {
					t.Fatal(err)
				}
			}
			w.step(now)
			in = w.input(now, listLen)
			in.Items = append(in.Items, Count{"few", 3}, Count{"many", 300})
			in.Total += 303
			l, err := sc.Step(context.Background(), in, nil)
			if err != nil {
				t.Fatal(err)
			}
			if rankOf(l, "few") != 0 {
				t.Errorf("min track %d, list %d: 3 events of a new item trend: %+v", minTrack, listLen, l.Items)
			}
			if r := rankOf(l, "many"); r != 1 {
				t.Fatalf("min track %d, list %d: 300 events of a new item are at rank %d: %+v", minTrack, listLen, r, l.Items)
			}
			e := l.Items[0]
			wantBase := max(0.25, maxCut*float64(in.Total))
			if minTrack == 1 && listLen == 0 && maxCut != 0 {
				t.Errorf("a full list observed whole has a cut: %v", maxCut)
			}
			if !close(e.Baseline5m, wantBase) || e.Count5m != 300 {
				t.Errorf("min track %d, list %d: many = %+v, want count 300 and baseline %v", minTrack, listLen, e, wantBase)
			}
			t.Logf("min track %d, list %d: %+v", minTrack, listLen, e)
		}
	}
}

// refCut is the share of the list's cut in input in: what an item the
// scorer does not track had at most, written from the package doc rather
// than taken from Observe: the smallest count observed when the input
// leaves events out, and the largest count under minTrack (an item
// counted less is treated as absent), over the input's total (at least
// its sum), as a float32 share.
func refCut(in Input, minTrack uint64) float64 {
	var sum, cut uint64
	smallest := uint64(0)
	for _, c := range in.Items {
		sum += c.Count
		if c.Count < minTrack {
			cut = max(cut, c.Count)
		} else if smallest == 0 || c.Count < smallest {
			smallest = c.Count
		}
	}
	total := max(in.Total, sum)
	if sum < total {
		cut = max(cut, smallest)
	}
	if total == 0 {
		return 0
	}
	return float64(float32(float64(cut) / float64(total)))
}

// TestHysteresis: an item whose live score alternates between above Enter
// and between Leave and Enter on consecutive lists (peaks decay within a
// tick here, so only hysteresis can hold it) enters once and never leaves
// while it oscillates; with Leave = Enter the same input flickers, which
// shows the test has teeth.
func TestHysteresis(t *testing.T) {
	run := func(leave float64) (transitions, lowTicks int) {
		cfg := DefaultConfig()
		cfg.WarmUp = 0
		cfg.HalfLife = time.Millisecond
		cfg.Enter, cfg.Leave = 1.5e-3, leave
		sc := New("video", "global", cfg)
		const total = 1_000_000
		in := false
		for i := 0; i < 6*30; i++ {
			now := t0.Add(time.Duration(i+1) * tick)
			k := float64((i + 1) / 30) // the tick's 5-minute slot: the share grows 1.2x a slot
			a := 0.05
			if i%2 == 1 {
				a = -0.05
			}
			c := uint64(math.Round(10000 * math.Pow(1.2, k) * (1 + a)))
			l, err := sc.Step(context.Background(), Input{AsOf: now, Total: total, Items: []Count{{"x", c}, {"steady", 5000}}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if k >= 1 && Live(cfg, c, total, 10000*math.Pow(1.2, k-1)*1.05/total) < cfg.Enter {
				lowTicks++
			}
			nowIn := rankOf(l, "x") > 0
			if i > 0 && nowIn != in {
				transitions++
			}
			in = nowIn
		}
		return transitions, lowTicks
	}
	tr, low := run(5e-4)
	if low < 50 {
		t.Fatalf("only %d ticks below Enter: the input does not oscillate", low)
	}
	if tr != 0 {
		t.Errorf("with hysteresis: %d transitions after entering, want 0", tr)
	}
	if tr, _ := run(1.5e-3); tr < 10 {
		t.Errorf("without hysteresis: %d transitions, want the item to flicker", tr)
	}
}

// TestBoundedState: a spam wave of fresh keys (a new full list of junk
// every tick) never grows the tracked items beyond MaxItems, and a listed
// trend survives it.
func TestBoundedState(t *testing.T) {
	cfg := DefaultConfig()
	cfg.WarmUp = 0
	cfg.MaxItems = 300
	sc := New("video", "global", cfg)
	for i := 0; i < 200; i++ {
		now := t0.Add(time.Duration(i+1) * tick)
		in := Input{AsOf: now, Total: 1_000_000}
		if i < 5 {
			in.Items = append(in.Items, Count{"trend", uint64(50_000)})
		}
		for j := 0; j < 100; j++ {
			in.Items = append(in.Items, Count{Item: "junk-" + itoa(i) + "-" + itoa(j), Count: 25})
		}
		l, err := sc.Step(context.Background(), in, nil)
		if err != nil {
			t.Fatal(err)
		}
		if sc.Len() > cfg.MaxItems {
			t.Fatalf("tick %d: %d tracked items, cap %d", i, sc.Len(), cfg.MaxItems)
		}
		if rankOf(l, "trend") != 1 {
			t.Fatalf("tick %d: the trend was evicted or unlisted: %+v", i, l.Items[:min(3, len(l.Items))])
		}
	}
}

func itoa(i int) string {
	return string(rune('a'+i/26/26%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i%26))
}

// TestStaleInput: an input not after the last is refused and changes
// nothing.
func TestStaleInput(t *testing.T) {
	sc := New("video", "global", DefaultConfig())
	if _, err := sc.Observe(Input{AsOf: t0, Total: 10, Items: []Count{{"a", 10}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Observe(Input{AsOf: t0, Total: 10, Items: []Count{{"b", 10}}}); err == nil {
		t.Fatal("same as_of accepted")
	}
	if sc.Len() != 1 {
		t.Fatalf("stale input changed the state: %d items", sc.Len())
	}
}

// TestEncodeRoundTrip: a scorer decoded from its encoding continues exactly
// as the original (same lists), and encodes to the same bytes.
func TestEncodeRoundTrip(t *testing.T) {
	cfg := DefaultConfig()
	cfg.WarmUp = 5 * time.Minute
	w := newWorld(4, 300, 100)
	w.special["v"] = viral(100, 0.05, t0.Add(10*time.Minute), 3*time.Minute)
	a := New("video", "IN", cfg)
	var b *Scorer
	for i := 0; i < 180; i++ {
		now := t0.Add(time.Duration(i+1) * tick)
		w.step(now)
		in := w.input(now, 100)
		la, err := a.Step(context.Background(), in, nil)
		if err != nil {
			t.Fatal(err)
		}
		if i == 90 {
			raw, _ := a.MarshalBinary()
			if b, err = Decode("video", "IN", cfg, raw); err != nil {
				t.Fatal(err)
			}
			again, _ := b.MarshalBinary()
			if string(again) != string(raw) {
				t.Fatal("decode-encode changed the bytes")
			}
			continue
		}
		if b != nil {
			lb, err := b.Step(context.Background(), in, nil)
			if err != nil {
				t.Fatal(err)
			}
			ja, _ := schemas.MarshalTrending(la)
			jb, _ := schemas.MarshalTrending(lb)
			if string(ja) != string(jb) {
				t.Fatalf("tick %d: decoded scorer diverged\n%s\n%s", i, ja, jb)
			}
		}
	}
	raw, _ := a.MarshalBinary()
	t.Logf("state: %d items, %d bytes", a.Len(), len(raw))
}

// FuzzDecode: arbitrary bytes decode to an error or to a state that
// re-encodes to the same bytes; never a panic.
func FuzzDecode(f *testing.F) {
	cfg := DefaultConfig()
	cfg.WarmUp = 0
	sc := New("video", "IN", cfg)
	for i := 0; i < 40; i++ {
		sc.Step(context.Background(), Input{AsOf: t0.Add(time.Duration(i) * time.Minute), Total: 1000, Items: []Count{{"a", uint64(10 + i*i)}, {"b", 50}}}, nil)
	}
	raw, _ := sc.MarshalBinary()
	f.Add(raw)
	f.Add([]byte("tr\x01"))
	minute, _, _ := sc.MarshalSplit()
	f.Add(minute)
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Decode("video", "IN", cfg, data)
		if err != nil {
			return
		}
		again, err := d.MarshalBinary()
		if errors.Is(err, ErrRings) { // a minute state: re-encoded as one
			again, _, err = d.MarshalSplit()
		}
		if err != nil {
			t.Fatal(err)
		}
		if d2, err := Decode("video", "IN", cfg, again); err != nil || d2.Len() != d.Len() {
			t.Fatalf("re-decode: %v", err)
		}
		_ = slices.Clone(again)
	})
}

// TestSeasonal: with a week of hourly history seeded, an item that had 5%
// of the list yesterday at 20:00 does not trend at 20:00 today by default
// (the week's maximum) but does with Seasonal (last week's 20:00 was
// quiet); an item that had 5% a week ago at 20:00 trends in neither.
func TestSeasonal(t *testing.T) {
	now := time.Date(2026, 11, 30, 20, 5, 0, 0, time.UTC)
	for _, seasonal := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.Seasonal = seasonal
		sc := New("hashtag", "global", cfg)
		in := Input{AsOf: now, Total: 100_000, Items: []Count{{"yesterday", 5000}, {"lastweek", 5000}, {"steady", 1000}}}
		added, err := sc.Observe(in)
		if err != nil || len(added) != 3 {
			t.Fatal(added, err)
		}
		at20 := time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC)
		sc.Seed("yesterday", map[time.Time]float64{at20.Add(-24 * time.Hour): 0.05})
		sc.Seed("lastweek", map[time.Time]float64{at20.Add(-7 * 24 * time.Hour): 0.05})
		sc.Seed("steady", map[time.Time]float64{at20.Add(-time.Hour): 0.01})
		sc.SeedCoverage(at20.Add(-7 * 24 * time.Hour))
		l := sc.List()
		if got := rankOf(l, "yesterday") > 0; got != seasonal {
			t.Errorf("seasonal=%v: yesterday's item trending = %v: %+v", seasonal, got, l.Items)
		}
		if rankOf(l, "lastweek") > 0 || rankOf(l, "steady") > 0 {
			t.Errorf("seasonal=%v: last week's or the steady item trends: %+v", seasonal, l.Items)
		}
	}
	bad := DefaultConfig()
	bad.Seasonal, bad.Hours = true, 168
	if bad.Validate() == nil {
		t.Error("seasonal with 168 hours validated")
	}
}

// TestDecodedEveryScore: scored as the streaming job scores (the state
// decoded before and encoded after every score, once a minute) for three
// hours, a scorer lists exactly what one kept in memory lists, so what
// Decode derives (each item's past, taken while its ring is read) matches
// what the scorer keeps.
func TestDecodedEveryScore(t *testing.T) {
	for _, seasonal := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.WarmUp = 5 * time.Minute
		cfg.Seasonal = seasonal
		w := newWorld(4, 300, 100)
		w.special["v"] = viral(100, 0.05, t0.Add(70*time.Minute), 3*time.Minute)
		mem := New("video", "IN", cfg)
		var raw []byte
		listed := 0
		for i := 0; i < 180; i++ {
			now := t0.Add(time.Duration(i+1) * time.Minute)
			w.step(now)
			in := w.input(now, 100)
			lm, err := mem.Step(context.Background(), in, nil)
			if err != nil {
				t.Fatal(err)
			}
			st := New("video", "IN", cfg)
			if raw != nil {
				if st, err = Decode("video", "IN", cfg, raw); err != nil {
					t.Fatal(err)
				}
			}
			ls, err := st.Step(context.Background(), in, nil)
			if err != nil {
				t.Fatal(err)
			}
			if raw, err = st.MarshalBinary(); err != nil {
				t.Fatal(err)
			}
			st.Release() // as trendbeam does: the next Decode reuses its rings' memory
			jm, _ := schemas.MarshalTrending(lm)
			js, _ := schemas.MarshalTrending(ls)
			if string(jm) != string(js) {
				t.Fatalf("seasonal %v, minute %d: decoded scorer diverged\n%s\n%s", seasonal, i+1, jm, js)
			}
			if ls != nil {
				listed += len(ls.Items)
			}
		}
		if listed == 0 {
			t.Fatalf("seasonal %v: nothing listed in three hours", seasonal)
		}
	}
}

// TestStateFlatUnderJunkWave: a spam wave of about a million junk keys
// (910 ticks whose 5-minute list is 1,100 fresh junk items over a steady
// background of 200 real ones, the most new items a list of K + margin
// can bring) leaves the scorer at the default cap of 2,000 items and its
// encoded state within the 1.6 MB per list BENCHMARKS.md states, and the
// real items, present at every tick, are never evicted for junk.
func TestStateFlatUnderJunkWave(t *testing.T) {
	cfg := DefaultConfig()
	sc := New("hashtag", "global", cfg)
	const ticks, junk, real = 910, 1100, 200
	maxBytes := 0
	for i := 0; i < ticks; i++ {
		now := t0.Add(time.Duration(i+1) * tick)
		in := Input{AsOf: now, Total: 5_000_000}
		for j := 0; j < real; j++ {
			in.Items = append(in.Items, Count{Item: "#real" + strconv.Itoa(j), Count: uint64(20_000 - 50*j)})
		}
		for j := 0; j < junk; j++ {
			in.Items = append(in.Items, Count{Item: "#junk" + strconv.Itoa(i*junk+j), Count: 30})
		}
		if _, err := sc.Step(context.Background(), in, nil); err != nil {
			t.Fatal(err)
		}
		if sc.Len() > cfg.MaxItems {
			t.Fatalf("tick %d: %d tracked items, cap %d", i, sc.Len(), cfg.MaxItems)
		}
		if i%10 == 9 || i == ticks-1 {
			enc, err := sc.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			maxBytes = max(maxBytes, len(enc))
		}
	}
	for j := 0; j < real; j++ {
		if _, ok := sc.items["#real"+strconv.Itoa(j)]; !ok {
			t.Fatalf("#real%d evicted during the wave", j)
		}
	}
	if maxBytes > 1_600_000 {
		t.Fatalf("encoded state reached %d bytes, over the 1.6 MB stated per list", maxBytes)
	}
	t.Logf("%d junk keys: %d items tracked, encoded state at most %d bytes", ticks*junk, sc.Len(), maxBytes)
}

// ringPast is the reference for an item's past, written here rather than
// taken from the scorer: the largest share in its hourly ring outside the
// current hour, or (seasonal) in the hours 1 and 2 back and a week (the
// ring's length) less 1 and 2 back.
func ringPast(hourly []float32, cur int64, seasonal bool) float32 {
	n := int64(len(hourly))
	at := func(back int64) float32 { return hourly[((cur-back)%n+n)%n] }
	var p float32
	if seasonal {
		for _, back := range []int64{1, 2, n - 1, n - 2} {
			p = max(p, at(back))
		}
		return p
	}
	for back := int64(1); back < n; back++ {
		p = max(p, at(back))
	}
	return p
}

// TestPastCacheExact: every tracked item's cached past (its highest
// hourly share before the current hour, which new items take from the
// list's cut instead of scanning their ring) equals ringPast's scan of
// its ring, at every score of three hours of churn, seasonal or not.
func TestPastCacheExact(t *testing.T) {
	for _, seasonal := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.WarmUp = 5 * time.Minute
		cfg.Seasonal = seasonal
		cfg.MaxItems = 150 // churn: items leave and come back with the cut's past
		w := newWorld(5, 400, 100)
		sc := New("video", "IN", cfg)
		fromCut := 0
		for i := 0; i < 180; i++ {
			now := t0.Add(time.Duration(i+1) * time.Minute)
			w.step(now)
			added, err := sc.Observe(w.input(now, 120))
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range added {
				if sc.items[n].past > 0 {
					fromCut++
				}
			}
			for n, it := range sc.items {
				if !it.pastOK || it.pastHour != hourOf(sc.last) {
					continue
				}
				if got, want := it.past, ringPast(it.hourly, hourOf(sc.last), seasonal); got != want {
					t.Fatalf("seasonal %v, minute %d, item %s: cached past %v, its ring's %v", seasonal, i+1, n, got, want)
				}
			}
			sc.List()
		}
		if fromCut == 0 {
			t.Fatalf("seasonal %v: no new item took a non-zero past from the cut: the test exercises nothing", seasonal)
		}
	}
}

// TestReleasedRingsReused: a decode that reuses a released scorer's ring
// memory (full rings) reads a young state (mostly empty rings) back to
// its own bytes: nothing of the old rings shows through.
func TestReleasedRingsReused(t *testing.T) {
	cfg := DefaultConfig()
	cfg.WarmUp = 0
	full := New("video", "IN", cfg)
	young := New("video", "IN", cfg)
	in := func(at time.Time, prefix string) Input {
		in := Input{AsOf: at, Total: 1_000_000}
		for r := 0; r < 500; r++ {
			in.Items = append(in.Items, Count{Item: fmt.Sprintf("%s%03d", prefix, r), Count: uint64(100_000/(r+1) + 10)})
		}
		return in
	}
	at := t0
	for h := 0; h < cfg.Hours; h++ {
		at = at.Add(time.Hour)
		if _, err := full.Step(context.Background(), in(at, "v"), nil); err != nil {
			t.Fatal(err)
		}
		if h == cfg.Hours-2 {
			if _, err := young.Step(context.Background(), in(at, "v"), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	fullRaw, _ := full.MarshalBinary()
	youngRaw, _ := young.MarshalBinary()
	for i := 0; i < 20; i++ { // a sync.Pool may drop what it holds: try a few times
		f, err := Decode("video", "IN", cfg, fullRaw)
		if err != nil {
			t.Fatal(err)
		}
		f.Release()
		y, err := Decode("video", "IN", cfg, youngRaw)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := y.MarshalBinary()
		if string(got) != string(youngRaw) {
			t.Fatalf("round %d: a young state decoded into released rings re-encodes to %d bytes, not its own %d", i, len(got), len(youngRaw))
		}
		y.Release()
	}
}

// TestContendedRoom: when the input brings more new items than eviction
// can make room for, the biggest get the room whatever the input's order;
// the tracked items it holds are never evicted for them; and the list's
// cut is the input's smallest count.
func TestContendedRoom(t *testing.T) {
	cfg := DefaultConfig()
	cfg.WarmUp = 0
	cfg.MaxItems = 100
	cfg.MinTrack = 1 // every item observed: TestMinTrack has the rest
	sc := New("hashtag", "global", cfg)
	// 60 items tracked, all in the next input too.
	var in Input
	for j := range 60 {
		in.Items = append(in.Items, Count{Item: "#old" + strconv.Itoa(j), Count: 5})
	}
	in.AsOf, in.Total = t0.Add(tick), 1_000_000
	if _, err := sc.Observe(in); err != nil {
		t.Fatal(err)
	}
	// Then 90 new items, counts 1..90 in shuffled order, beside them:
	// room for 40, which must go to counts 51..90.
	next := Input{AsOf: t0.Add(tick + SlotLen), Total: 1_000_000, Items: slices.Clone(in.Items)}
	for _, c := range []int{17, 88, 3, 51, 90, 50, 1, 64, 2, 89, 49, 52} {
		next.Items = append(next.Items, Count{Item: "#new" + strconv.Itoa(c), Count: uint64(c)})
	}
	for c := 4; c <= 87; c++ {
		if !slices.Contains([]int{17, 49, 50, 51, 52, 64}, c) {
			next.Items = append(next.Items, Count{Item: "#new" + strconv.Itoa(c), Count: uint64(c)})
		}
	}
	if len(next.Items) != 150 {
		t.Fatalf("test input has %d items", len(next.Items))
	}
	added, err := sc.Observe(next)
	if err != nil {
		t.Fatal(err)
	}
	if sc.Len() != cfg.MaxItems || len(added) != 40 {
		t.Fatalf("%d tracked, %d added; want %d and 40", sc.Len(), len(added), cfg.MaxItems)
	}
	for c := 1; c <= 90; c++ {
		_, ok := sc.items["#new"+strconv.Itoa(c)]
		if ok != (c > 50) {
			t.Errorf("#new%d (count %d) tracked %v", c, c, ok)
		}
	}
	for j := range 60 {
		if sc.items["#old"+strconv.Itoa(j)] == nil {
			t.Errorf("#old%d evicted though in the input", j)
		}
	}
	if got, want := sc.cut.recent[mod(slotOf(next.AsOf.UnixMilli()), recentSlots)], float32(1)/1_000_000; got != want {
		t.Errorf("cut share %v, want the smallest count's %v", got, want)
	}
}

// TestMinTrackKeepsHistory: a list whose 5-minute input is mostly items
// counted once (a region's hashtags: one user each) keeps the history of
// an evergreen item through 20 minutes of absence with MinTrack 2, so the
// item does not trend when it comes back at its usual share; observing
// every item (MinTrack 1), the one-off items churn every tracked slot
// within minutes, the evergreen item's history is evicted and it comes
// back as new and trends: what MinTrack is for. Items under MinTrack are
// never tracked, and the cut covers them.
func TestMinTrackKeepsHistory(t *testing.T) {
	run := func(minTrack uint64) (rank int, tracked bool, sc *Scorer) {
		cfg := DefaultConfig()
		cfg.MinTrack = minTrack
		sc = New("hashtag", "MX-JAL", cfg)
		for m := 1; m <= 81; m++ {
			in := Input{AsOf: t0.Add(time.Duration(m) * time.Minute)}
			var sum uint64
			add := func(item string, n uint64) {
				in.Items = append(in.Items, Count{Item: item, Count: n})
				sum += n
			}
			for j := range 50 {
				add("#bg"+strconv.Itoa(j), uint64(10+j))
			}
			switch {
			case m <= 60 || m == 81:
				add("#evergreen", 30)
			default:
				for j := range 700 {
					add("#once-"+strconv.Itoa(m)+"-"+strconv.Itoa(j), 1)
				}
			}
			in.Total = sum + 500 // the list leaves some events out
			l, err := sc.Step(context.Background(), in, nil)
			if err != nil {
				t.Fatal(err)
			}
			if minTrack > 1 && sc.Len() > 51 {
				t.Fatalf("min track %d, minute %d: %d items tracked, want the 51 counted twice or more", minTrack, m, sc.Len())
			}
			rank = rankOf(l, "#evergreen")
		}
		return rank, sc.items["#evergreen"] != nil, sc
	}
	rank, tracked, sc := run(2)
	if rank != 0 || !tracked {
		t.Errorf("min track 2: the evergreen item back at its usual share: rank %d, tracked %v; want not trending, still tracked", rank, tracked)
	}
	// The cut covers the one-off items: at least 1 of the minute's total.
	if got, want := sc.cut.recent[mod(slotOf(t0.Add(80*time.Minute).UnixMilli()), recentSlots)], float32(1.0/float64(50*10+1225+700+500)); got < want {
		t.Errorf("cut share %v under the one-off items' %v", got, want)
	}
	if rank, tracked, _ := run(1); rank == 0 {
		t.Errorf("min track 1: the evergreen item came back at rank %d (tracked %v); the test expects its history evicted and a false trend", rank, tracked)
	}
}

// TestMinTrackUnderMinCount: an item that may score is always tracked, so
// Validate refuses a MinTrack over MinCount (MinCount 0, no minimum
// count, allows any).
func TestMinTrackUnderMinCount(t *testing.T) {
	for _, c := range []struct {
		minCount, minTrack uint64
		ok                 bool
	}{{20, 2, true}, {1, 2, false}, {2, 2, true}, {0, 5, true}, {3, 0, true}} {
		cfg := DefaultConfig()
		cfg.MinCount, cfg.MinTrack = c.minCount, c.minTrack
		if err := cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("min count %d, min track %d: %v", c.minCount, c.minTrack, err)
		}
	}
}
