package source

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/passert"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"
	"github.com/topk-dev/topk/schemas"
)

func init() {
	register.Function2x1(beaconLenFn)
}

func beaconLenFn(data []byte, emit func(int)) error {
	var r schemas.BeaconReader
	if err := r.Reset(data); err != nil {
		return err
	}
	var e schemas.Event
	n := 0
	for r.Next(&e) {
		n++
	}
	if err := r.Err(); err != nil {
		return err
	}
	emit(n)
	return nil
}

func init() { register.Emitter1[int]() }

func mustGenerator(t testing.TB, spec string) *Generator {
	t.Helper()
	sp, err := ParseSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGenerator(sp.Synthetic)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// events decodes beacon k of g, copying.
func events(t testing.TB, g *Generator, k int64, now time.Time) schemas.Beacon {
	t.Helper()
	data, n, err := g.Beacon(k, now)
	if err != nil {
		t.Fatal(err)
	}
	var b schemas.Beacon
	if err := schemas.UnmarshalBeacon(data, &b); err != nil {
		t.Fatal(err)
	}
	if len(b.Events) != n {
		t.Fatalf("beacon %d: %d events, Beacon said %d", k, len(b.Events), n)
	}
	return b
}

// TestGeneratorDeterministic: a beacon's content is a function of (seed, k)
// and the time given, whatever was generated before; another seed gives
// another item sequence.
func TestGeneratorDeterministic(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	spec := "synthetic:rate=0,events=5000,items=1000,zipf=1.1,seed=7,beacon=100,countries=5,types=video|hashtag"
	a, b := mustGenerator(t, spec), mustGenerator(t, spec)
	fwd, back := map[int64]string{}, map[int64]string{}
	for k := range int64(50) {
		fwd[k] = fmt.Sprint(events(t, a, k, now))
		back[49-k] = fmt.Sprint(events(t, b, 49-k, now)) // b goes backwards
	}
	for k := range int64(50) {
		if fwd[k] != back[k] {
			t.Fatalf("beacon %d differs between two generators with one seed", k)
		}
	}
	other := mustGenerator(t, strings.Replace(spec, "seed=7", "seed=8", 1))
	x, y := events(t, a, 3, now), events(t, other, 3, now)
	same := 0
	for i := range x.Events {
		if x.Events[i].Item == y.Events[i].Item {
			same++
		}
	}
	if same == len(x.Events) {
		t.Errorf("seeds 7 and 8 gave the same items")
	}
	// Event ids are unique and encode seed and index; types cycle.
	seen := map[string]bool{}
	for k := range int64(50) {
		bc := events(t, a, k, now)
		if want := fmt.Sprintf("s7-%d", k); bc.BeaconID != want {
			t.Errorf("beacon id %q, want %q", bc.BeaconID, want)
		}
		for j, e := range bc.Events {
			i := k*100 + int64(j)
			if want := fmt.Sprintf("e7-%d", i); e.EventID != want {
				t.Fatalf("event id %q, want %q", e.EventID, want)
			}
			if seen[e.EventID] {
				t.Fatalf("duplicate event id %q", e.EventID)
			}
			seen[e.EventID] = true
			if want := []string{"video", "hashtag"}[i%2]; e.Type != want {
				t.Fatalf("event %d type %q, want %q", i, e.Type, want)
			}
			if !e.TS.Equal(now) {
				t.Fatalf("event ts %v, want %v", e.TS, now)
			}
			if err := (schemas.Validator{}).Validate(&e, now); err != nil {
				t.Fatalf("generated event is invalid: %v", err)
			}
		}
	}
}

// TestGeneratorSkew: item ranks follow the Zipf law (rank 1 most frequent,
// frequencies falling with rank), and countries are skewed the same way with
// regions of their own country.
func TestGeneratorSkew(t *testing.T) {
	g := mustGenerator(t, "synthetic:rate=0,events=100000,items=10000,zipf=1.0,seed=3,beacon=1000,countries=4,types=video")
	items := map[string]int{}
	countries := map[string]int{}
	now := time.Unix(1_800_000_000, 0)
	for k := range g.Beacons() {
		for _, e := range events(t, g, k, now).Events {
			items[e.Item]++
			countries[e.Country]++
			if !strings.HasPrefix(e.Region, e.Country+"-") || !schemas.IsRegion(e.Region) || !slices.Contains(regionSlice(e.Country), e.Region) {
				t.Fatalf("region %q of country %q is not one of its ISO 3166-2 codes", e.Region, e.Country)
			}
		}
	}
	top := ""
	for it, c := range items {
		if top == "" || c > items[top] {
			top = it
		}
	}
	if top != "v_1" {
		t.Errorf("most frequent item %q (%d), want v_1 (%d)", top, items[top], items["v_1"])
	}
	// Zipf(1): P(1)/P(2) = 2, P(1)/P(10) = 10. Loose bounds, 100k draws.
	if r := float64(items["v_1"]) / float64(items["v_2"]); r < 1.7 || r > 2.3 {
		t.Errorf("count(v_1)/count(v_2) = %.2f, want about 2", r)
	}
	if r := float64(items["v_1"]) / float64(items["v_10"]); r < 7 || r > 13 {
		t.Errorf("count(v_1)/count(v_10) = %.2f, want about 10", r)
	}
	if !(countries["IN"] > countries["US"] && countries["US"] > countries["BR"] && countries["BR"] > countries["ID"]) || len(countries) != 4 {
		t.Errorf("countries %v, want IN > US > BR > ID and no other", countries)
	}
}

// TestGeneratorSchedule: beacon k is due when its last event is, on the
// fixed schedule start + index/rate, and the last beacon holds the rest.
func TestGeneratorSchedule(t *testing.T) {
	g := mustGenerator(t, "synthetic:rate=1000,duration=1500ms,beacon=400")
	if g.Total() != 1500 || g.Beacons() != 4 {
		t.Fatalf("total %d beacons %d, want 1500 and 4", g.Total(), g.Beacons())
	}
	for k, want := range []time.Duration{400 * time.Millisecond, 800 * time.Millisecond, 1200 * time.Millisecond, 1500 * time.Millisecond} {
		if got := g.Due(int64(k)); got != want {
			t.Errorf("Due(%d) = %s, want %s", k, got, want)
		}
	}
	if _, n, _ := g.Beacon(3, time.Now()); n != 300 {
		t.Errorf("last beacon has %d events, want 300", n)
	}
	if _, _, err := g.Beacon(4, time.Now()); err == nil {
		t.Error("Beacon(4) past the end: nil error")
	}
}

// TestSyntheticSource: on Prism, the paced stream holds exactly
// rate*duration events (the schedule is fixed, so the total does not depend
// on timing), and the unpaced one exactly `events`; then it stops by itself.
func TestSyntheticSource(t *testing.T) {
	for _, tt := range []struct {
		spec            string
		events, beacons int
	}{
		{"synthetic:rate=20000,duration=600ms,beacon=300,items=1000", 12000, 40},
		{"synthetic:rate=0,events=25001,beacon=500,countries=3", 25001, 51},
	} {
		t.Run(tt.spec, func(t *testing.T) {
			spec, err := ParseSpec(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			p, s := beam.NewPipelineWithRoot()
			beacons, dead := Read(s, spec, Options{BundleTime: 200 * time.Millisecond})
			passert.Count(s, beacons, "beacons", tt.beacons)
			passert.Equals(s, stats.Sum(s, beam.ParDo(s, beaconLenFn, beacons)), tt.events)
			passert.Empty(s, dead)
			if err := ptest.Run(p); err != nil {
				t.Fatalf("pipeline: %v", err)
			}
		})
	}
}

// BenchmarkGenerator measures the generator alone on one core: events/s of
// 500-event beacons, Zipf(1.1) over 1M items, with countries.
func BenchmarkGenerator(b *testing.B) {
	g := mustGenerator(b, "synthetic:rate=0,items=1000000,zipf=1.1,seed=1,beacon=500,countries=10")
	now := time.Unix(1_800_000_000, 0)
	b.ReportAllocs()
	b.ResetTimer()
	var bytes int
	for k := 0; k < b.N; k++ {
		data, _, err := g.Beacon(int64(k), now)
		if err != nil {
			b.Fatal(err)
		}
		bytes += len(data)
	}
	b.ReportMetric(float64(b.N)*500/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(bytes)/float64(b.N), "bytes/beacon")
}

// TestGeneratorTypes: by default the stream holds videos, hashtags and
// searches in equal thirds, each named in its own way, and one name never
// stands for two ranks.
func TestGeneratorTypes(t *testing.T) {
	g := mustGenerator(t, "synthetic:rate=0,events=30000,items=100000,seed=5")
	now := time.Unix(1_800_000_000, 0)
	byType := map[string]int{}
	for k := range g.Beacons() {
		for _, e := range events(t, g, k, now).Events {
			byType[e.Type]++
			var ok bool
			switch e.Type {
			case "video":
				ok = strings.HasPrefix(e.Item, "v_")
			case "hashtag":
				ok = strings.HasPrefix(e.Item, "#") && len(e.Item) > 2
			case "search":
				ok = !strings.HasPrefix(e.Item, "#") && !strings.HasPrefix(e.Item, "v_")
			}
			if !ok {
				t.Fatalf("%s item %q", e.Type, e.Item)
			}
		}
	}
	if byType["video"] != 10000 || byType["hashtag"] != 10000 || byType["search"] != 10000 {
		t.Errorf("events by type %v, want 10000 each", byType)
	}
	seen := map[string]uint64{}
	for _, typ := range []string{"hashtag", "search", "video"} {
		for r := uint64(1); r < 20000; r++ {
			name := typ + "/" + string(appendItem(nil, typ, r))
			if prev, dup := seen[name]; dup {
				t.Fatalf("%s names ranks %d and %d", name, prev, r)
			}
			seen[name] = r
		}
	}
}

func regionSlice(country string) []string {
	rs := regionCodes[country]
	return rs[:]
}
