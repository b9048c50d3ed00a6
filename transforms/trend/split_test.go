package trend

import (
	"context"
	"errors"
	"hash/fnv"
	"testing"
	"time"

	"github.com/topk-dev/topk/schemas"
)

// seedHistory is a History that knows every item: each has, in a few past
// hours that its name picks, a share that its name picks too, and every
// hour of the ring has a known total. It is deterministic, so two scorers
// asking the same questions get the same answers.
type seedHistory struct{ calls int }

func (h *seedHistory) HourlyShares(_ context.Context, _, _ string, items []string, from, to time.Time) (map[string]map[time.Time]float64, []time.Time, error) {
	h.calls++
	var hours []time.Time
	for t := from; t.Before(to); t = t.Add(time.Hour) {
		hours = append(hours, t)
	}
	out := map[string]map[time.Time]float64{}
	for _, it := range items {
		f := fnv.New64a()
		f.Write([]byte(it))
		x := f.Sum64()
		m := map[time.Time]float64{}
		for k := 0; k < 3 && len(hours) > 0; k++ {
			at := hours[int((x>>(8*k))%uint64(len(hours)))]
			m[at] = float64((x>>(24+4*k))%50+1) / 2000 // 0.05%-2.5%
		}
		out[it] = m
	}
	return out, hours, nil
}

// TestSplitStateEveryScore: scored as trendbeam scores (the minute state
// decoded before and encoded after every score; the rings value read only
// when a score starts a new hour and written when the scorer holds its
// rings), for four hours with evictions (a cap below the world's items)
// and, in one variant, items seeded from History as they start tracking,
// a scorer lists exactly what one kept in memory lists, and its whole
// state (rings loaded) encodes to the same bytes. The rings are read and
// written about once an hour, not once a minute.
func TestSplitStateEveryScore(t *testing.T) {
	for _, tc := range []struct {
		name     string
		seasonal bool
		history  bool
	}{{"plain", false, false}, {"seasonal", true, false}, {"history", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.WarmUp = 5 * time.Minute
			cfg.Seasonal = tc.seasonal
			cfg.MaxItems = 150 // below the world's 300 items: evictions, and items tracked again
			w := newWorld(7, 300, 100)
			w.special["v"] = viral(100, 0.05, t0.Add(70*time.Minute), 3*time.Minute)
			w.special["w"] = viral(100, 0.04, t0.Add(150*time.Minute), 4*time.Minute)
			var hm, hs History
			if tc.history {
				hm, hs = &seedHistory{}, &seedHistory{}
			}
			mem := New("video", "IN", cfg)
			var minute, rings []byte
			loads, writes, listed, maxMinute, maxRings := 0, 0, 0, 0, 0
			const minutes = 4*60 + 7
			for i := 0; i < minutes; i++ {
				// Not on whole minutes from the hour: an hour's first
				// score is at :00:30, so the hour's last minute state
				// and the next hour's input straddle it.
				now := t0.Add(time.Duration(i+1)*time.Minute + 30*time.Second)
				w.step(now)
				in := w.input(now, 100)
				lm, err := mem.Step(context.Background(), in, hm)
				if err != nil {
					t.Fatal(err)
				}
				st := New("video", "IN", cfg)
				if minute != nil {
					if st, err = Decode("video", "IN", cfg, minute); err != nil {
						t.Fatal(err)
					}
				}
				if st.NeedsRings(now.UnixMilli()) {
					loads++
					if err := st.LoadRings(rings); err != nil {
						t.Fatalf("minute %d: %v", i+1, err)
					}
				}
				ls, err := st.Step(context.Background(), in, hs)
				if err != nil {
					t.Fatal(err)
				}
				m, r, err := st.MarshalSplit()
				if err != nil {
					t.Fatal(err)
				}
				st.Release()
				minute = m
				maxMinute = max(maxMinute, len(m))
				if r != nil {
					rings = r
					writes++
					maxRings = max(maxRings, len(r))
				}
				jm, _ := schemas.MarshalTrending(lm)
				js, _ := schemas.MarshalTrending(ls)
				if string(jm) != string(js) {
					t.Fatalf("minute %d: split state diverged\n%s\n%s", i+1, jm, js)
				}
				listed += len(ls.Items)
			}
			if listed == 0 {
				t.Fatal("nothing listed in four hours")
			}
			// 4 hour starts after the first score (which writes the
			// rings of a new scorer): 4 loads, 5 writes.
			if loads != 4 || writes != 5 {
				t.Fatalf("rings loaded %d and written %d times in %d minutes; want 4 and 5", loads, writes, minutes)
			}
			st, err := Decode("video", "IN", cfg, minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.LoadRings(rings); err != nil {
				t.Fatal(err)
			}
			got, err := st.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			want, _ := mem.MarshalBinary()
			if string(got) != string(want) {
				t.Fatalf("whole state after the split rounds differs: %d vs %d bytes", len(got), len(want))
			}
			t.Logf("%d items; largest minute state %d B, rings %d B; %d listed entries", mem.Len(), maxMinute, maxRings, listed)
		})
	}
}

// TestSplitStateLazy: a scorer decoded from a minute state refuses an
// input of the next hour until its rings are loaded, cannot give its
// whole state, and with its rings value missing or of another hour goes
// on with the cut's past for its items and says so.
func TestSplitStateLazy(t *testing.T) {
	cfg := DefaultConfig()
	cfg.WarmUp = 0
	sc := New("video", "IN", cfg)
	at := t0.Add(10 * time.Minute)
	in := func(at time.Time) Input {
		return Input{AsOf: at, Total: 1000, Items: []Count{{"a", 300}, {"b", 100}, {"c", 20}}}
	}
	if _, err := sc.Step(context.Background(), in(at), nil); err != nil {
		t.Fatal(err)
	}
	minute, rings, err := sc.MarshalSplit()
	if err != nil || rings == nil {
		t.Fatalf("a new scorer's split gave rings %d B, %v", len(rings), err)
	}
	lazy, err := Decode("video", "IN", cfg, minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lazy.MarshalBinary(); !errors.Is(err, ErrRings) {
		t.Fatalf("whole state of a scorer without rings: %v", err)
	}
	next := at.Add(time.Hour)
	if !lazy.NeedsRings(next.UnixMilli()) || lazy.NeedsRings(at.Add(time.Minute).UnixMilli()) {
		t.Fatal("NeedsRings wrong")
	}
	if _, err := lazy.Step(context.Background(), in(next), nil); !errors.Is(err, ErrRings) {
		t.Fatalf("next hour's input without rings: %v", err)
	}
	if lazy.Len() != 3 {
		t.Fatalf("refused input changed the state: %d items", lazy.Len())
	}
	// Same hour: no rings needed, and none written.
	if _, err := lazy.Step(context.Background(), in(at.Add(time.Minute)), nil); err != nil {
		t.Fatal(err)
	}
	if _, r, err := lazy.MarshalSplit(); err != nil || r != nil {
		t.Fatalf("a scorer without rings wrote rings (%d B): %v", len(r), err)
	}
	// Rings of another hour, and none at all.
	other := New("video", "IN", cfg)
	other.Step(context.Background(), in(at.Add(-time.Hour)), nil)
	_, otherRings, _ := other.MarshalSplit()
	for _, bad := range [][]byte{nil, otherRings, []byte("junk")} {
		l, _ := Decode("video", "IN", cfg, minute)
		if err := l.LoadRings(bad); !errors.Is(err, ErrBadState) {
			t.Fatalf("rings %q: %v", bad, err)
		}
		if _, err := l.Step(context.Background(), in(next), nil); err != nil {
			t.Fatalf("after rings that could not be read: %v", err)
		}
		if _, err := l.MarshalBinary(); err != nil {
			t.Fatal(err)
		}
	}
}
