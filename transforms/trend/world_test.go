package trend

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// world generates events: a steady Zipf background plus special items whose
// rate follows a function of time, sampled (Poisson) per 10-second bucket,
// and turns the last 30 buckets into the exact 5-minute window every 10 s,
// as the fast path's 5m list would describe it.
type world struct {
	rng     *rand.Rand
	bg      []string
	bgRate  []float64 // events per second
	special map[string]func(t time.Time) float64
	ring    [30]map[string]uint64
	n       int
	win     map[string]uint64
}

func newWorld(seed uint64, items int, eventsPerSec float64) *world {
	w := &world{rng: rand.New(rand.NewPCG(seed, 7)), special: map[string]func(time.Time) float64{}, win: map[string]uint64{}}
	var h float64
	for i := 0; i < items; i++ {
		h += 1 / float64(i+1)
	}
	for i := 0; i < items; i++ {
		w.bg = append(w.bg, fmt.Sprintf("bg%04d", i))
		w.bgRate = append(w.bgRate, eventsPerSec/float64(i+1)/h)
	}
	return w
}

func (w *world) poisson(lambda float64) uint64 {
	if lambda <= 0 {
		return 0
	}
	if lambda < 30 {
		l, k, p := math.Exp(-lambda), 0, 1.0
		for {
			p *= w.rng.Float64()
			if p <= l {
				return uint64(k)
			}
			k++
		}
	}
	return uint64(max(0, math.Round(lambda+math.Sqrt(lambda)*w.rng.NormFloat64())))
}

// step adds the bucket [t-10s, t) and drops the one that left the window.
func (w *world) step(t time.Time) {
	b := map[string]uint64{}
	for i, it := range w.bg {
		if n := w.poisson(w.bgRate[i] * 10); n > 0 {
			b[it] = n
		}
	}
	names := make([]string, 0, len(w.special))
	for it := range w.special {
		names = append(names, it)
	}
	slices.Sort(names) // deterministic draws
	for _, it := range names {
		// The rate at the bucket's middle.
		if n := w.poisson(w.special[it](t.Add(-5*time.Second)) * 10); n > 0 {
			b[it] += n
		}
	}
	slot := w.n % len(w.ring)
	for it, n := range w.ring[slot] {
		if w.win[it] -= n; w.win[it] == 0 {
			delete(w.win, it)
		}
	}
	for it, n := range b {
		w.win[it] += n
	}
	w.ring[slot] = b
	w.n++
}

// input is the 5-minute list ending at t: its top listLen entries (0: every
// item) and the window's total.
func (w *world) input(t time.Time, listLen int) Input {
	in := Input{AsOf: t}
	for it, n := range w.win {
		in.Total += n
		in.Items = append(in.Items, Count{Item: it, Count: n})
	}
	slices.SortFunc(in.Items, func(a, b Count) int {
		if a.Count != b.Count {
			if a.Count > b.Count {
				return -1
			}
			return 1
		}
		if a.Item < b.Item {
			return -1
		}
		return 1
	})
	if listLen > 0 && len(in.Items) > listLen {
		in.Items = in.Items[:listLen]
	}
	return in
}

// reference is the trending list computed the long way, independently of
// the scorer's rings: every input is kept, and an item's baseline at tick t
// is the largest share it had at an earlier tick t' in an earlier 5-minute
// slot and within the last cfg.Hours hours (hour(t') > hour(t) - Hours),
// counting, before the item was first listed, the list's cut (the last
// entry's share when the list does not hold every event). Shares are
// float32, the scorer's documented state precision.
type reference struct {
	cfg    Config
	ticks  []int64
	shares []map[string]float32
	cut    []float32
	first  map[string]int // tick index an item was first listed
	peak   map[string]float64
	peakAt map[string]int64
	listed map[string]bool
	start  int64
}

type refEntry struct {
	item              string
	score, live, base float64
	count             uint64
}

func newReference(cfg Config) *reference {
	return &reference{cfg: cfg, first: map[string]int{}, peak: map[string]float64{}, peakAt: map[string]int64{}, listed: map[string]bool{}}
}

const fiveMin, oneHour = int64(5 * 60 * 1000), int64(3600 * 1000)

func (r *reference) add(in Input) []refEntry {
	t := in.AsOf.UnixMilli()
	if r.start == 0 {
		r.start = t
	}
	var sum uint64
	for _, c := range in.Items {
		sum += c.Count
	}
	total := max(in.Total, sum)
	sh := map[string]float32{}
	counts := map[string]uint64{}
	minCount := uint64(math.MaxUint64)
	for _, c := range in.Items {
		sh[c.Item] = float32(float64(c.Count) / float64(total))
		counts[c.Item] = c.Count
		minCount = min(minCount, c.Count)
		if _, ok := r.first[c.Item]; !ok {
			r.first[c.Item] = len(r.ticks)
		}
	}
	var cut float32
	if len(in.Items) > 0 && sum < total {
		cut = float32(float64(minCount) / float64(total))
	}
	r.ticks = append(r.ticks, t)
	r.shares = append(r.shares, sh)
	r.cut = append(r.cut, cut)
	now := len(r.ticks) - 1

	warm := time.Duration(t-r.start)*time.Millisecond >= r.cfg.WarmUp
	var out []refEntry
	for it, first := range r.first {
		var b float32
		for j := 0; j < now; j++ {
			tj := r.ticks[j]
			if tj/fiveMin >= t/fiveMin || tj/oneHour <= t/oneHour-int64(r.cfg.Hours) {
				continue
			}
			if j < first {
				b = max(b, r.cut[j])
			} else {
				b = max(b, r.shares[j][it])
			}
		}
		c := counts[it]
		floor := 0.25 * r.cfg.FloorPerHour / 3 // FloorPerHour events an hour, in 5 minutes
		base := max(float64(b)*float64(total), floor)
		var live float64
		if c >= r.cfg.MinCount && c > 0 {
			lo := float64(c) - r.cfg.NoiseZ*math.Sqrt(float64(c))
			if lo > base {
				live = float64(c) / float64(total) * math.Log(lo/base)
			}
		}
		score := 0.0
		if warm {
			dec := 0.0
			if r.peak[it] > 0 {
				dec = r.peak[it] * math.Pow(2, -float64(t-r.peakAt[it])/float64(r.cfg.HalfLife.Milliseconds()))
			}
			if live > 0 && live >= dec {
				r.peak[it], r.peakAt[it] = live, t
				dec = live
			}
			score = max(live, dec)
		}
		if score >= r.cfg.Enter || (r.listed[it] && score >= r.cfg.Leave) {
			out = append(out, refEntry{item: it, score: score, live: live, base: base, count: c})
		}
	}
	slices.SortFunc(out, func(a, b refEntry) int {
		if a.score != b.score {
			if a.score > b.score {
				return -1
			}
			return 1
		}
		if a.item < b.item {
			return -1
		}
		return 1
	})
	if len(out) > r.cfg.Size {
		out = out[:r.cfg.Size]
	}
	clear(r.listed)
	for _, e := range out {
		r.listed[e.item] = true
	}
	return out
}
