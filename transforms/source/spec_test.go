package source

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseSpec(t *testing.T) {
	synthDefaults := SyntheticSpec{Items: 100_000, Zipf: 1.1, Seed: 1, Beacon: 500, Types: []string{"video", "hashtag", "search"}, Users: 1_000_000}
	synth := func(f func(*SyntheticSpec)) Spec {
		g := synthDefaults
		g.Types = append([]string(nil), g.Types...)
		f(&g)
		return Spec{Kind: KindSynthetic, Synthetic: g}.withDefaults()
	}
	withDefaults := func(sp Spec) Spec { return sp.withDefaults() }
	tests := []struct {
		in   string
		want Spec
	}{
		{"pubsub:projects/p/subscriptions/s", withDefaults(Spec{Kind: KindPubsub, Pubsub: PubsubSpec{Subscription: "projects/p/subscriptions/s"}})},
		{"pubsub:projects/p/subscriptions/s?idle_stop=10s,slack=500ms,readers=3", withDefaults(Spec{Kind: KindPubsub, Pubsub: PubsubSpec{
			Subscription: "projects/p/subscriptions/s", IdleStop: 10 * time.Second, Slack: 500 * time.Millisecond, Readers: 3}})},
		{"file:/tmp/x.ndjson", withDefaults(Spec{Kind: KindFile, File: FileSpec{Path: "/tmp/x.ndjson"}})},
		{"file:data/x.ndjson.gz?beacon=7", withDefaults(Spec{Kind: KindFile, File: FileSpec{Path: "data/x.ndjson.gz", Beacon: 7}})},
		{"file:x?slack=5m", withDefaults(Spec{Kind: KindFile, File: FileSpec{Path: "x", Slack: 5 * time.Minute}})},
		{"file:rel, with comma.ndjson", withDefaults(Spec{Kind: KindFile, File: FileSpec{Path: "rel, with comma.ndjson"}})},
		{"synthetic:", synth(func(*SyntheticSpec) {})},
		{"synthetic:rate=1000000,duration=2m,items=1000000,zipf=0.9,seed=42,beacon=1000", synth(func(g *SyntheticSpec) {
			g.Rate, g.Duration, g.Items, g.Zipf, g.Seed, g.Beacon = 1e6, 2*time.Minute, 1e6, 0.9, 42, 1000
		})},
		{"synthetic:rate=0,events=5000,types=video|hashtag,countries=5,users=10", synth(func(g *SyntheticSpec) {
			g.Events, g.Types, g.Countries, g.Users = 5000, []string{"video", "hashtag"}, 5, 10
		})},
		{"synthetic:rate=2.5,duration=4s", synth(func(g *SyntheticSpec) { g.Rate, g.Duration = 2.5, 4*time.Second })},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSpec(tt.in)
			if err != nil {
				t.Fatalf("ParseSpec(%q): %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseSpec(%q)\n got %#v\nwant %#v", tt.in, got, tt.want)
			}
			// String round-trips.
			again, err := ParseSpec(got.String())
			if err != nil {
				t.Fatalf("ParseSpec(%q) (from String): %v", got.String(), err)
			}
			if !reflect.DeepEqual(again, got) {
				t.Errorf("ParseSpec(String()) = %#v, want %#v", again, got)
			}
		})
	}
}

func TestParseSpecErrors(t *testing.T) {
	tests := []struct {
		in, want string // want: a substring of the error
	}{
		{"", "want pubsub:..., file:... or synthetic:..."},
		{"kafka:topic", `unknown kind "kafka"`},
		{"pubsub:", "is not projects/P/subscriptions/S"},
		{"pubsub:projects/p/topics/t", "is not projects/P/subscriptions/S"},
		{"pubsub:projects/p/subscriptions/s?idle=3s", `unknown option "idle"`},
		{"pubsub:projects/p/subscriptions/s?idle_stop=soon", "idle_stop=soon"},
		{"pubsub:projects/p/subscriptions/s?idle_stop=-1s", "idle_stop -1s is negative"},
		{"pubsub:projects/p/subscriptions/s?readers=100", "readers 100 is not in [1, 64]"},
		{"pubsub:projects/p/subscriptions/s?readers=2,readers=3", `option "readers" given twice`},
		{"pubsub:projects/p/subscriptions/s?readers", `option "readers" is not key=value`},
		{"file:", "missing path"},
		{"file:?beacon=3", "missing path"},
		{"file:x?beacon=0x", "beacon=0x"},
		{"file:x?beacon=10001", "beacon 10001 is not in [1, 10000]"},
		{"file:x?beacon=-1", "beacon -1 is not in [1, 10000]"},
		{"file:x?slack=-1s", "slack -1s is negative"},
		{"file:x?slack=soon", "slack=soon"},
		{"synthetic:rate=-1", "rate -1 is not a finite number >= 0"},
		{"synthetic:rate=NaN", "rate NaN"},
		{"synthetic:rate=fast", "rate=fast"},
		{"synthetic:zipf=-1", "zipf -1 is not a finite number > 0"},
		{"synthetic:items=-3", "items=-3"},
		{"synthetic:beacon=20000", "beacon 20000 is not in [1, 10000]"},
		{"synthetic:types=Video", `type "Video" must match`},
		{"synthetic:types=video|video", "has a duplicate"},
		{"synthetic:types=", `type "" must match`},
		{"synthetic:countries=21", "countries 21 is not in [0, 20]"},
		{"synthetic:rate=1,duration=10ms", "less than one event"},
		{"synthetic:duration=-1s", "duration -1s is negative"},
		{"synthetic:rate=1,rate=2", `option "rate" given twice`},
		{"synthetic:speed=3", `unknown option "speed"`},
		{"synthetic:events=-2", "events -2 is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			_, err := ParseSpec(tt.in)
			if err == nil {
				t.Fatalf("ParseSpec(%q) = nil error, want one containing %q", tt.in, tt.want)
			}
			if !errors.Is(err, ErrBadSpec) {
				t.Errorf("ParseSpec(%q) error %v does not wrap ErrBadSpec", tt.in, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseSpec(%q) error %q, want it to contain %q", tt.in, err, tt.want)
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	if err := (Options{}).Validate(); err != nil {
		t.Errorf("zero Options: %v", err)
	}
	for _, o := range []Options{{MaxMessages: -1}, {MaxMessages: 10_001}, {BundleTime: -time.Second}, {BundleTime: time.Hour}, {BundleBeacons: -1}} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v: Validate() = nil, want an error", o)
		}
	}
}

func TestSyntheticTotal(t *testing.T) {
	tests := []struct {
		g    SyntheticSpec
		want int64
	}{
		{SyntheticSpec{Rate: 1000, Duration: 1500 * time.Millisecond}, 1500},
		{SyntheticSpec{Rate: 2.5, Duration: 4 * time.Second}, 10},
		{SyntheticSpec{Rate: 1000, Duration: time.Second, Events: 10}, 10},
		{SyntheticSpec{Rate: 0, Events: 77}, 77},
		{SyntheticSpec{Rate: 0, Duration: time.Second}, -1},
		{SyntheticSpec{Rate: 10}, -1},
	}
	for _, tt := range tests {
		if got := tt.g.total(); got != tt.want {
			t.Errorf("%+v.total() = %d, want %d", tt.g, got, tt.want)
		}
	}
}
