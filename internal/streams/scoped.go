package streams

import (
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/topk-dev/topk/internal/zipf"
	"github.com/topk-dev/topk/schemas"
)

// ScopedSpec describes a synthetic stream with three types, countries and
// regions, and optionally a spam wave: the workload of the fast path's
// scale tests and of scripts/genreplay.
type ScopedSpec struct {
	Seed   uint64
	Events int // background events
	Start  time.Time
	Span   time.Duration // background events are spread evenly over it
	// Items and Zipf shape the video and search background (Zipf over
	// [1, Items]); hashtags draw from Zipf over [1, HashtagItems].
	Items        uint64
	Zipf         float64
	HashtagItems uint64
	// HashtagShare and SearchShare of the background; the rest are videos.
	HashtagShare, SearchShare float64
	// Countries (at most len(scopedCountries)) events come from, P
	// proportional to 1/rank, each with three regions drawn uniformly; 0:
	// no country.
	Countries int
	// Spam adds a wave of distinct junk hashtags: SpamItems tags in
	// [SpamFrom, SpamFrom+SpamFor), a quarter of them used twice, spread
	// evenly, from the same countries.
	SpamItems         int
	SpamFrom, SpamFor time.Duration
}

// scopedCountries and their ISO 3166-2 regions.
var scopedCountries = []struct {
	code    string
	regions [3]string
}{
	{"IN", [3]string{"IN-MH", "IN-KA", "IN-DL"}},
	{"US", [3]string{"US-CA", "US-TX", "US-NY"}},
	{"BR", [3]string{"BR-SP", "BR-RJ", "BR-MG"}},
	{"DE", [3]string{"DE-BY", "DE-NW", "DE-BE"}},
	{"JP", [3]string{"JP-13", "JP-27", "JP-14"}},
	{"FR", [3]string{"FR-IDF", "FR-ARA", "FR-PAC"}},
	{"GB", [3]string{"GB-ENG", "GB-SCT", "GB-WLS"}},
	{"MX", [3]string{"MX-CMX", "MX-JAL", "MX-NLE"}},
	// Twelve more, so that a replay can have the scale issue's 20
	// countries; appended, so the streams of 8 or fewer are unchanged.
	{"ID", [3]string{"ID-JK", "ID-JB", "ID-JT"}},
	{"PH", [3]string{"PH-00", "PH-CEB", "PH-DAV"}},
	{"TR", [3]string{"TR-34", "TR-06", "TR-35"}},
	{"VN", [3]string{"VN-SG", "VN-HN", "VN-DN"}},
	{"EG", [3]string{"EG-C", "EG-ALX", "EG-GZ"}},
	{"NG", [3]string{"NG-LA", "NG-KN", "NG-FC"}},
	{"IT", [3]string{"IT-25", "IT-62", "IT-72"}},
	{"ES", [3]string{"ES-MD", "ES-CT", "ES-AN"}},
	{"KR", [3]string{"KR-11", "KR-26", "KR-41"}},
	{"CA", [3]string{"CA-ON", "CA-QC", "CA-BC"}},
	{"PK", [3]string{"PK-PB", "PK-SD", "PK-KP"}},
	{"AR", [3]string{"AR-C", "AR-B", "AR-X"}},
}

// MaxScopedCountries is the largest ScopedSpec.Countries.
var MaxScopedCountries = len(scopedCountries)

// GenScoped calls emit with every event of the stream in time order (the
// event is reused: copy what you keep). Event ids are unique; the stream is
// a function of the spec.
func GenScoped(spec ScopedSpec, emit func(*schemas.Event)) {
	rng := rand.New(rand.NewPCG(spec.Seed, 0x5c0fed))
	items := zipf.New(spec.Seed+1, spec.Zipf, spec.Items)
	tags := zipf.New(spec.Seed+2, spec.Zipf, max(spec.HashtagItems, 1))
	var cdf []float64
	sum := 0.0
	for i := range min(spec.Countries, len(scopedCountries)) {
		sum += 1 / float64(i+1)
		cdf = append(cdf, sum)
	}
	geo := func(e *schemas.Event) {
		e.Country, e.Region = "", ""
		if len(cdf) == 0 {
			return
		}
		u := rng.Float64() * sum
		c := len(cdf) - 1
		for i, x := range cdf {
			if u < x {
				c = i
				break
			}
		}
		e.Country = scopedCountries[c].code
		e.Region = scopedCountries[c].regions[rng.IntN(3)]
	}
	// The spam wave's events: tag j is used once, or twice when j%4 == 0.
	spamEvents := spec.SpamItems + (spec.SpamItems+3)/4
	spamAt := func(k int) time.Time {
		return spec.Start.Add(spec.SpamFrom + time.Duration(float64(spec.SpamFor)*float64(k)/float64(max(spamEvents, 1))))
	}
	spamTag := func(k int) int { // the k-th spam event's tag
		if k < spec.SpamItems {
			return k
		}
		return 4 * (k - spec.SpamItems)
	}
	var e schemas.Event
	k := 0
	seq := 0
	for i := 0; i < spec.Events; i++ {
		ts := spec.Start.Add(time.Duration(float64(spec.Span) * float64(i) / float64(spec.Events)))
		for k < spamEvents && !spamAt(k).After(ts) {
			seq++
			e = schemas.Event{EventID: "s" + strconv.Itoa(seq), Type: "hashtag", Item: "#junk" + strconv.Itoa(spamTag(k)),
				User: "spam" + strconv.Itoa(rng.IntN(1_000_000)), TS: spamAt(k).Truncate(time.Millisecond)}
			geo(&e)
			emit(&e)
			k++
		}
		seq++
		e = schemas.Event{EventID: "e" + strconv.Itoa(seq), User: "u" + strconv.Itoa(rng.IntN(1_000_000)), TS: ts.Truncate(time.Millisecond)}
		switch u := rng.Float64(); {
		case u < spec.HashtagShare:
			e.Type, e.Item = "hashtag", "#t"+strconv.FormatUint(tags.Next(), 10)
		case u < spec.HashtagShare+spec.SearchShare:
			e.Type, e.Item = "search", "q"+strconv.FormatUint(items.Next(), 10)
		default:
			e.Type, e.Item = "video", "v_"+strconv.FormatUint(items.Next(), 10)
		}
		geo(&e)
		emit(&e)
	}
	for ; k < spamEvents; k++ {
		seq++
		e = schemas.Event{EventID: "s" + strconv.Itoa(seq), Type: "hashtag", Item: "#junk" + strconv.Itoa(spamTag(k)),
			User: "spam", TS: spamAt(k).Truncate(time.Millisecond)}
		geo(&e)
		emit(&e)
	}
}
