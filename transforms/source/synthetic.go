package source

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"
	"unsafe"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/sdf"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/topk-dev/topk/internal/retry"
	"github.com/topk-dev/topk/internal/zipf"
	"github.com/topk-dev/topk/schemas"
)

func init() {
	register.DoFn5x2[context.Context, *sdf.WallTimeWatermarkEstimator, *streamTracker, []byte,
		func(beam.EventTime, []byte), sdf.ProcessContinuation, error](&syntheticFn{})
}

var syntheticEvents = beam.NewCounter("topk.source", "synthetic_events")

// countryCodes are the countries the generator draws from, largest first;
// countries=N uses the first N with P(i) proportional to 1/i.
var countryCodes = []string{
	"IN", "US", "BR", "ID", "MX", "JP", "PH", "DE", "GB", "FR",
	"TR", "VN", "EG", "NG", "IT", "ES", "KR", "CA", "PK", "AR",
}

// regionsPerCountry is the number of regions per country.
const regionsPerCountry = 4

// regionCodes are real ISO 3166-2 subdivision codes, four per country of
// countryCodes (its most populous or best known), so that synthetic region
// lists look like the ones production serves (IN-MH, US-CA).
var regionCodes = map[string][regionsPerCountry]string{
	"IN": {"IN-MH", "IN-KA", "IN-DL", "IN-TN"},
	"US": {"US-CA", "US-TX", "US-NY", "US-FL"},
	"BR": {"BR-SP", "BR-RJ", "BR-MG", "BR-BA"},
	"ID": {"ID-JK", "ID-JB", "ID-JT", "ID-JI"},
	"MX": {"MX-CMX", "MX-JAL", "MX-NLE", "MX-MEX"},
	"JP": {"JP-13", "JP-27", "JP-14", "JP-23"},
	"PH": {"PH-00", "PH-CEB", "PH-DAV", "PH-CAV"},
	"DE": {"DE-BY", "DE-NW", "DE-BE", "DE-HH"},
	"GB": {"GB-ENG", "GB-SCT", "GB-WLS", "GB-NIR"},
	"FR": {"FR-IDF", "FR-ARA", "FR-PAC", "FR-OCC"},
	"TR": {"TR-34", "TR-06", "TR-35", "TR-16"},
	"VN": {"VN-SG", "VN-HN", "VN-DN", "VN-HP"},
	"EG": {"EG-C", "EG-ALX", "EG-GZ", "EG-DK"},
	"NG": {"NG-LA", "NG-KN", "NG-FC", "NG-RI"},
	"IT": {"IT-25", "IT-62", "IT-72", "IT-82"},
	"ES": {"ES-MD", "ES-CT", "ES-AN", "ES-VC"},
	"KR": {"KR-11", "KR-26", "KR-41", "KR-28"},
	"CA": {"CA-ON", "CA-QC", "CA-BC", "CA-AB"},
	"PK": {"PK-PB", "PK-SD", "PK-KP", "PK-IS"},
	"AR": {"AR-C", "AR-B", "AR-X", "AR-S"},
}

// words name the synthetic hashtags and search queries.
var words = [64]string{
	"music", "news", "cats", "football", "cricket", "recipes", "travel", "gaming",
	"weather", "movies", "dance", "comedy", "fitness", "cars", "fashion", "tech",
	"art", "books", "science", "space", "history", "health", "yoga", "coffee",
	"pizza", "dogs", "memes", "anime", "kpop", "diy", "garden", "photo",
	"sunset", "beach", "hiking", "camping", "tennis", "chess", "guitar", "piano",
	"election", "budget", "stocks", "crypto", "jobs", "school", "exam", "wedding",
	"festival", "holiday", "rain", "snow", "summer", "winter", "love", "life",
	"city", "street", "food", "tea", "phone", "laptop", "ai", "robots",
}

// ItemName is the name the synthetic source gives the item of rank r (1:
// the most frequent) of type typ (appendItem): what a catalogue of the
// synthetic items must be keyed by.
func ItemName(typ string, r uint64) string { return string(appendItem(nil, typ, r)) }

// appendItem appends the name of the item of rank r for type typ: videos
// are v_<rank>, hashtags #<word><n>, searches word+word queries, so lists of
// different types do not look alike. Each name maps to one rank.
func appendItem(a []byte, typ string, r uint64) []byte {
	switch typ {
	case "hashtag":
		a = append(a, '#')
		a = append(a, words[r%64]...)
		if r >= 64 {
			a = strconv.AppendUint(a, r/64, 10)
		}
		return a
	case "search":
		a = append(a, words[r%64]...)
		for r /= 64; r > 0; r /= 64 {
			a = append(a, '+')
			a = append(a, words[r%64]...)
		}
		return a
	}
	a = append(a, 'v', '_')
	return strconv.AppendUint(a, r, 10)
}

// syntheticFn generates the synthetic stream: an unbounded splittable DoFn
// over an Impulse whose restriction counts beacons. Pacing, end and seeding
// are described on Generator; the output watermark is the wall clock.
type syntheticFn struct {
	Spec       SyntheticSpec
	BundleTime time.Duration
	// Bucket is the pre-aggregation's bucket: a call ends at the next
	// multiple of it (see callEnd); 0: after BundleTime.
	Bucket time.Duration

	gen *Generator
}

func (fn *syntheticFn) Setup() error {
	g, err := NewGenerator(fn.Spec)
	if err != nil {
		return err
	}
	fn.gen = g
	return nil
}

func (fn *syntheticFn) CreateInitialRestriction(_ []byte) streamRestriction {
	end := int64(unbounded)
	if n := fn.Spec.total(); n >= 0 {
		end = (n + int64(fn.Spec.Beacon) - 1) / int64(fn.Spec.Beacon)
	}
	return streamRestriction{End: end}
}

func (fn *syntheticFn) SplitRestriction(_ []byte, r streamRestriction) []streamRestriction {
	return []streamRestriction{r}
}

func (fn *syntheticFn) RestrictionSize(_ []byte, r streamRestriction) float64 {
	if r.End == unbounded {
		return 1
	}
	return float64(r.End - r.Next)
}

func (fn *syntheticFn) CreateTracker(r streamRestriction) *streamTracker { return newStreamTracker(r) }

// TruncateRestriction (drain) ends the stream where it is.
func (fn *syntheticFn) TruncateRestriction(rt *streamTracker, _ []byte) streamRestriction {
	r := rt.GetRestriction().(streamRestriction)
	r.End = r.Next
	return r
}

func (fn *syntheticFn) CreateWatermarkEstimator() *sdf.WallTimeWatermarkEstimator {
	return &sdf.WallTimeWatermarkEstimator{}
}

// ProcessElement emits the beacons that are due, sleeping between them, and
// checkpoints at the call's end (callEnd: the next bucket boundary, or
// after BundleTime without a bucket) or when full (maxCallBytes after
// BundleTime), so that output and the watermark move on. A beacon due at
// or after the call's end is left to the next call; when the next beacon
// is due after it, the call sleeps until its end (not its beacon's time),
// so that the checkpoint's watermark, the wall clock, passes the boundary.
func (fn *syntheticFn) ProcessElement(ctx context.Context, _ *sdf.WallTimeWatermarkEstimator, rt *streamTracker, _ []byte, emit func(beam.EventTime, []byte)) (sdf.ProcessContinuation, error) {
	start := time.Now()
	end, _ := callEnd(start, start.UnixMilli(), fn.Bucket, 0, fn.BundleTime)
	r := rt.GetRestriction().(streamRestriction)
	t0 := r.Mark
	if t0 == 0 {
		t0 = start.UnixNano()
		rt.setMark(t0)
	}
	g := fn.gen
	bytes := 0
	for k := r.Next; ; k++ {
		now := time.Now()
		if g.wallLimited() && now.Sub(time.Unix(0, t0)) >= fn.Spec.Duration {
			return sdf.StopProcessing(), nil
		}
		if due := time.Unix(0, t0).Add(g.Due(k)); now.Before(due) {
			wait := due
			if !due.Before(end) {
				wait = end
			}
			if err := retry.Sleep(ctx, time.Until(wait)); err != nil {
				return nil, fmt.Errorf("synthetic source: %w", err)
			}
			if !due.Before(end) {
				return sdf.ResumeProcessingIn(max(time.Until(due), 0)), nil
			}
			now = time.Now()
		}
		if !now.Before(end) {
			return sdf.ResumeProcessingIn(0), nil
		}
		if !rt.TryClaim(k) {
			return sdf.StopProcessing(), nil
		}
		data, n, err := g.Beacon(k, now)
		if err != nil {
			return nil, fmt.Errorf("synthetic source: %w", err)
		}
		// The buffer is reused: downstream may keep zero-copy views of the
		// element (BeaconReader), so it gets its own exact-size copy.
		out := make([]byte, len(data))
		copy(out, data)
		emit(mtime.FromTime(now), out)
		syntheticEvents.Inc(ctx, int64(n))
		if bytes += len(out); full(start, now, bytes, fn.BundleTime) {
			return sdf.ResumeProcessingIn(0), nil
		}
	}
}

// Generator builds the synthetic stream's beacons; the part of the synthetic
// source with no Beam in it.
//
// The stream is a sequence of beacons k = 0, 1, ... of Beacon events each
// (the last one possibly shorter): event i (global index k*Beacon + j) has
// event_id "e<seed>-<i>", type Types[i mod len(Types)], an item of rank
// drawn from Zipf(s) over [1, items] named for its type ("v_<rank>" for
// videos and unknown types, "#<word><n>" for hashtags, "word+word" queries
// for searches), user "u_<n>" uniform over [0, users), and with countries > 0
// a country drawn from the first `countries` of a fixed list with P
// proportional to 1/rank and one of its four ISO 3166-2 regions drawn
// uniformly. Every draw of beacon k comes from
// generators seeded by (seed, k), so a beacon's content does not depend on
// how the stream was split into bundles or workers.
//
// Pacing: with rate R > 0, beacon k is due at start + (its last event's
// index + 1)/R, a fixed schedule from the stream's start. With a duration D
// the stream holds round(R*D) events exactly, however fast the machine is (if
// it falls behind it catches up, and the stream ends late); `events` caps it
// too. With R = 0 it runs as fast as it can, until `events` or, failing that,
// until D of wall-clock time has passed (then the count is not
// deterministic).
//
// Event time is the wall clock when the beacon is built (the only clock
// read in this package's logic); Beacon takes it as a parameter.
type Generator struct {
	spec   SyntheticSpec
	total  int64 // events in the stream; -1: unbounded or wall-clock bounded
	prefix []byte
	pcg    rand.PCG
	rng    *rand.Rand
	cdf    []float64 // cumulative country weights
	region [][]string

	// Scratch, reused by every Beacon call.
	arena  []byte
	beacon schemas.Beacon
	buf    []byte
}

// NewGenerator validates spec (after defaults) and returns its generator.
func NewGenerator(spec SyntheticSpec) (*Generator, error) {
	sp := Spec{Kind: KindSynthetic, Synthetic: spec}.withDefaults()
	if err := sp.Validate(); err != nil {
		return nil, err
	}
	spec = sp.Synthetic
	g := &Generator{spec: spec, total: spec.total()}
	g.rng = rand.New(&g.pcg)
	g.prefix = strconv.AppendUint([]byte("e"), spec.Seed, 10)
	g.prefix = append(g.prefix, '-')
	if spec.Countries > 0 {
		sum := 0.0
		for i := range spec.Countries {
			sum += 1 / float64(i+1)
			g.cdf = append(g.cdf, sum)
			rs := regionCodes[countryCodes[i]]
			g.region = append(g.region, rs[:])
		}
		for i := range g.cdf {
			g.cdf[i] /= sum
		}
	}
	g.beacon.Events = make([]schemas.Event, 0, spec.Beacon)
	return g, nil
}

// Total is the number of events in the stream, or -1 when it is unbounded or
// bounded only by wall-clock time.
func (g *Generator) Total() int64 { return g.total }

// Beacons is the number of beacons in the stream, or -1 (as Total).
func (g *Generator) Beacons() int64 {
	if g.total < 0 {
		return -1
	}
	b := int64(g.spec.Beacon)
	return (g.total + b - 1) / b
}

func (g *Generator) wallLimited() bool { return g.total < 0 && g.spec.Duration > 0 }

// Due is when beacon k is due, from the stream's start; 0 when unpaced.
func (g *Generator) Due(k int64) time.Duration {
	if g.spec.Rate <= 0 {
		return 0
	}
	last := (k + 1) * int64(g.spec.Beacon)
	if g.total >= 0 && last > g.total {
		last = g.total
	}
	return time.Duration(math.Round(float64(last) / g.spec.Rate * 1e9))
}

// mix derives a per-beacon seed (splitmix64 finalizer).
func mix(seed uint64, k int64, salt uint64) uint64 {
	z := seed ^ (uint64(k)+salt)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// BeaconID is beacon k's beacon_id, "s<seed>-<k>": unique per seed, so a
// publisher that sets it as the message's beacon_id attribute (as ingest
// does) never reuses an earlier run's ids, which the recovery log and
// Dataflow's read would take for that run's beacons.
func (g *Generator) BeaconID(k int64) string {
	return string(appendBeaconID(nil, g.spec.Seed, k))
}

func appendBeaconID(dst []byte, seed uint64, k int64) []byte {
	dst = append(dst, 's')
	dst = strconv.AppendUint(dst, seed, 10)
	dst = append(dst, '-')
	return strconv.AppendInt(dst, k, 10)
}

// Beacon returns beacon k in the binary format with event time now, and its
// number of events. The bytes are valid until the next call.
//
// hot path: once per event in the loop.
func (g *Generator) Beacon(k int64, now time.Time) ([]byte, int, error) {
	sp := &g.spec
	first := k * int64(sp.Beacon)
	n := int64(sp.Beacon)
	if g.total >= 0 && first+n > g.total {
		n = g.total - first
	}
	if n <= 0 {
		return nil, 0, fmt.Errorf("beacon %d is past the end of the stream (%d events)", k, g.total)
	}
	z := zipf.New(mix(sp.Seed, k, 1), sp.Zipf, sp.Items)
	g.pcg.Seed(mix(sp.Seed, k, 2), mix(sp.Seed, k, 3))
	ts := time.UnixMilli(now.UnixMilli()).UTC()

	// Strings live in one arena and are viewed without copying: AppendBeacon
	// copies them out before the arena is reused. Sized first so it never
	// moves while views exist.
	need := int(n)*(len(g.prefix)+20+2+64+2+20) + 64
	if cap(g.arena) < need {
		g.arena = make([]byte, 0, need)
	}
	a := g.arena[:0]

	b := &g.beacon
	b.Events = b.Events[:n]
	idStart := len(a)
	a = appendBeaconID(a, sp.Seed, k)
	b.BeaconID = view(a, idStart)
	types := sp.Types
	for j := range b.Events {
		e := &b.Events[j]
		i := first + int64(j)
		p := len(a)
		a = append(a, g.prefix...)
		a = strconv.AppendInt(a, i, 10)
		e.EventID = view(a, p)
		p = len(a)
		e.Type = types[i%int64(len(types))]
		a = appendItem(a, e.Type, z.Next())
		e.Item = view(a, p)
		p = len(a)
		a = append(a, 'u', '_')
		a = strconv.AppendUint(a, g.rng.Uint64N(sp.Users), 10)
		e.User = view(a, p)
		e.TS = ts
		e.Country, e.Region = "", ""
		if g.cdf != nil {
			c := g.country(g.rng.Float64())
			e.Country = countryCodes[c]
			e.Region = g.region[c][g.rng.IntN(regionsPerCountry)]
		}
	}
	var err error
	g.buf, err = schemas.AppendBeacon(g.buf[:0], b)
	if err != nil {
		return nil, 0, fmt.Errorf("beacon %d: %w", k, err)
	}
	return g.buf, int(n), nil
}

// view is a[from:] as a string without a copy.
func view(a []byte, from int) string { return unsafe.String(&a[from], len(a)-from) }

func (g *Generator) country(u float64) int {
	for i, c := range g.cdf {
		if u < c {
			return i
		}
	}
	return len(g.cdf) - 1
}
