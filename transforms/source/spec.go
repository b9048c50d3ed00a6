package source

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/topk-dev/topk/internal/pubsubx"
	"github.com/topk-dev/topk/schemas"
)

// Kind names a source.
type Kind string

// The sources.
const (
	KindPubsub    Kind = "pubsub"
	KindFile      Kind = "file"
	KindSynthetic Kind = "synthetic"
)

// ErrBadSpec is wrapped by every ParseSpec and Validate error.
var ErrBadSpec = errors.New("bad source spec")

// Spec is a parsed --source flag. Exactly one of Pubsub, File and Synthetic is
// used, as Kind says. The zero values of their fields mean the defaults below;
// Validate checks a Spec built by hand, ParseSpec returns a validated one with
// the defaults filled in.
//
// Syntax (options are comma-separated key=value pairs; every option may be
// left out):
//
//	pubsub:projects/P/subscriptions/S[?idle_stop=D,slack=D,readers=N]
//	file:PATH[?beacon=B,slack=D]
//	synthetic:rate=R,duration=D,items=N,zipf=S,seed=X,beacon=B[,types=video|hashtag][,countries=N][,users=U][,events=E]
//
// Durations are Go durations ("10s", "1m30s"). A file path may not contain
// '?'.
type Spec struct {
	Kind      Kind
	Pubsub    PubsubSpec
	File      FileSpec
	Synthetic SyntheticSpec
}

// PubsubSpec configures the Pub/Sub source.
type PubsubSpec struct {
	// Subscription is "projects/P/subscriptions/S".
	Subscription string
	// IdleStop ends the source (sdf.StopProcessing: windows and timers
	// flush, the job finishes) after this long without a message. Zero: never
	// (the job runs until cancelled or drained). For tests and finite runs on
	// Prism, which cannot drain. Not supported on Dataflow.
	IdleStop time.Duration
	// Slack is subtracted from the watermark estimate: how far out of order
	// (in event time) messages may be pulled and still be on time. Zero
	// means DefaultSlack.
	Slack time.Duration
	// Readers is the number of parallel pull loops (independent restrictions
	// on the same subscription). Zero means 1.
	Readers int
}

// FileSpec configures the file source.
type FileSpec struct {
	// Path of an NDJSON file of events; ".gz" means gzip.
	Path string
	// Beacon is the number of events per beacon. Zero means DefaultBeacon.
	Beacon int
	// Slack is how far the watermark stays behind the data clock (the
	// largest event time read so far): a bucket closes once the clock is
	// Slack past its end. Zero means DefaultFileSlack; the fast path sets
	// it to its allowed lateness plus a bucket, so that every event it
	// still counts is read before its bucket closes.
	Slack time.Duration
}

// SyntheticSpec configures the synthetic generator.
type SyntheticSpec struct {
	// Rate in events per second. 0 means as fast as possible.
	Rate float64
	// Duration of the stream. 0 means no time limit.
	Duration time.Duration
	// Events caps the stream at this many events. 0 means no cap.
	Events int64
	// Items is the number of distinct items ("v_1" ... "v_N", "v_1" the
	// most frequent). Zero means 100,000.
	Items uint64
	// Zipf is the exponent s > 0 of the item distribution. Zero means 1.1.
	Zipf float64
	// Seed fixes every draw. Zero means 1 (a seed of 0 cannot be asked for).
	Seed uint64
	// Beacon is the number of events per beacon. Zero means DefaultBeacon.
	Beacon int
	// Types are the item types, cycled through event by event. Empty means
	// video, hashtag and search (defaultTypes).
	Types []string
	// Countries is how many countries of a fixed list (largest first) events
	// come from, chosen with a skewed distribution, each with four of its
	// real ISO 3166-2 regions (IN-MH, US-CA, ...). Zero: events carry no
	// country.
	Countries int
	// Users is the number of distinct users ("u_0" ... ). Zero means
	// 1,000,000.
	Users uint64
}

// Defaults.
const (
	DefaultBeacon = 500
	DefaultSlack  = 2 * time.Second
	// DefaultFileSlack is the file source's default Slack: the fast path's
	// default allowed lateness (2 minutes) plus a bucket (10 s).
	DefaultFileSlack = 2*time.Minute + 10*time.Second
	defaultItems     = 100_000
	defaultZipf      = 1.1
	defaultSeed      = 1
	defaultUsers     = 1_000_000
	defaultType      = "video" // the file source's type when an event has none
	defaultReaders   = 1
	maxReaders       = 64
)

// defaultTypes are the synthetic source's types when none are given.
var defaultTypes = []string{"video", "hashtag", "search"}

// ParseSpec parses a --source value and fills in the defaults.
func ParseSpec(s string) (Spec, error) {
	kind, rest, ok := strings.Cut(s, ":")
	if !ok {
		return Spec{}, fmt.Errorf("%w: %q: want pubsub:..., file:... or synthetic:...", ErrBadSpec, s)
	}
	var sp Spec
	sp.Kind = Kind(kind)
	switch sp.Kind {
	case KindPubsub:
		sub, opts, _ := strings.Cut(rest, "?")
		sp.Pubsub.Subscription = sub
		err := parseOptions(opts, func(k, v string) error {
			var err error
			switch k {
			case "idle_stop":
				sp.Pubsub.IdleStop, err = parseDuration(v)
			case "slack":
				sp.Pubsub.Slack, err = parseDuration(v)
			case "readers":
				sp.Pubsub.Readers, err = parseInt(v)
			default:
				return errUnknown(k, "idle_stop, slack, readers")
			}
			return err
		})
		if err != nil {
			return Spec{}, fmt.Errorf("%w: %q: %w", ErrBadSpec, s, err)
		}
	case KindFile:
		path, opts, _ := strings.Cut(rest, "?")
		sp.File.Path = path
		err := parseOptions(opts, func(k, v string) error {
			var err error
			switch k {
			case "beacon":
				sp.File.Beacon, err = parseInt(v)
			case "slack":
				sp.File.Slack, err = parseDuration(v)
			default:
				return errUnknown(k, "beacon, slack")
			}
			return err
		})
		if err != nil {
			return Spec{}, fmt.Errorf("%w: %q: %w", ErrBadSpec, s, err)
		}
	case KindSynthetic:
		g := &sp.Synthetic
		err := parseOptions(rest, func(k, v string) error {
			var err error
			switch k {
			case "rate":
				g.Rate, err = strconv.ParseFloat(v, 64)
			case "duration":
				g.Duration, err = parseDuration(v)
			case "events":
				g.Events, err = strconv.ParseInt(v, 10, 64)
			case "items":
				g.Items, err = strconv.ParseUint(v, 10, 64)
			case "zipf":
				g.Zipf, err = strconv.ParseFloat(v, 64)
			case "seed":
				g.Seed, err = strconv.ParseUint(v, 10, 64)
			case "beacon":
				g.Beacon, err = parseInt(v)
			case "types":
				g.Types = strings.Split(v, "|")
			case "countries":
				g.Countries, err = parseInt(v)
			case "users":
				g.Users, err = strconv.ParseUint(v, 10, 64)
			default:
				return errUnknown(k, "rate, duration, events, items, zipf, seed, beacon, types, countries, users")
			}
			return err
		})
		if err != nil {
			return Spec{}, fmt.Errorf("%w: %q: %w", ErrBadSpec, s, err)
		}
	default:
		return Spec{}, fmt.Errorf("%w: %q: unknown kind %q (want pubsub, file or synthetic)", ErrBadSpec, s, kind)
	}
	sp = sp.withDefaults()
	if err := sp.Validate(); err != nil {
		return Spec{}, err
	}
	return sp, nil
}

func errUnknown(k, known string) error {
	return fmt.Errorf("unknown option %q (known: %s)", k, known)
}

// parseOptions calls set for each "k=v" of a comma-separated list, rejecting
// empty and repeated keys.
func parseOptions(s string, set func(k, v string) error) error {
	if s == "" {
		return nil
	}
	seen := map[string]bool{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("option %q is not key=value", kv)
		}
		if seen[k] {
			return fmt.Errorf("option %q given twice", k)
		}
		seen[k] = true
		if err := set(k, v); err != nil {
			return fmt.Errorf("%s=%s: %w", k, v, err)
		}
	}
	return nil
}

func parseDuration(v string) (time.Duration, error) {
	return time.ParseDuration(v)
}

func parseInt(v string) (int, error) {
	n, err := strconv.ParseInt(v, 10, 32)
	return int(n), err
}

// withDefaults returns sp with every zero that means a default replaced by
// that default.
func (sp Spec) withDefaults() Spec {
	if sp.Pubsub.Slack == 0 {
		sp.Pubsub.Slack = DefaultSlack
	}
	if sp.Pubsub.Readers == 0 {
		sp.Pubsub.Readers = defaultReaders
	}
	if sp.File.Beacon == 0 {
		sp.File.Beacon = DefaultBeacon
	}
	if sp.File.Slack == 0 {
		sp.File.Slack = DefaultFileSlack
	}
	g := &sp.Synthetic
	if g.Items == 0 {
		g.Items = defaultItems
	}
	if g.Zipf == 0 {
		g.Zipf = defaultZipf
	}
	if g.Seed == 0 {
		g.Seed = defaultSeed
	}
	if g.Beacon == 0 {
		g.Beacon = DefaultBeacon
	}
	if len(g.Types) == 0 {
		g.Types = slices.Clone(defaultTypes)
	}
	if g.Users == 0 {
		g.Users = defaultUsers
	}
	return sp
}

// Validate reports what is wrong with the part of sp that Kind selects, after
// defaults (a zero that means a default is accepted).
func (sp Spec) Validate() error {
	sp = sp.withDefaults()
	var err error
	switch sp.Kind {
	case KindPubsub:
		err = sp.Pubsub.validate()
	case KindFile:
		err = sp.File.validate()
	case KindSynthetic:
		err = sp.Synthetic.validate()
	default:
		err = fmt.Errorf("unknown kind %q (want pubsub, file or synthetic)", sp.Kind)
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrBadSpec, sp.Kind, err)
	}
	return nil
}

func (p PubsubSpec) validate() error {
	if _, _, err := pubsubx.ParseSubscription(p.Subscription); err != nil {
		return err
	}
	if p.IdleStop < 0 {
		return fmt.Errorf("idle_stop %s is negative", p.IdleStop)
	}
	if p.Slack < 0 {
		return fmt.Errorf("slack %s is negative", p.Slack)
	}
	if p.Readers < 1 || p.Readers > maxReaders {
		return fmt.Errorf("readers %d is not in [1, %d]", p.Readers, maxReaders)
	}
	return nil
}

func (f FileSpec) validate() error {
	if f.Path == "" {
		return errors.New("missing path (file:PATH)")
	}
	if f.Slack < 0 {
		return fmt.Errorf("slack %s is negative", f.Slack)
	}
	return checkBeacon(f.Beacon)
}

func checkBeacon(b int) error {
	if b < 1 || b > schemas.MaxBeaconEvents {
		return fmt.Errorf("beacon %d is not in [1, %d]", b, schemas.MaxBeaconEvents)
	}
	return nil
}

func (g SyntheticSpec) validate() error {
	if g.Rate < 0 || math.IsNaN(g.Rate) || math.IsInf(g.Rate, 0) {
		return fmt.Errorf("rate %v is not a finite number >= 0", g.Rate)
	}
	if g.Duration < 0 {
		return fmt.Errorf("duration %s is negative", g.Duration)
	}
	if g.Events < 0 {
		return fmt.Errorf("events %d is negative", g.Events)
	}
	if g.Rate > 0 && g.Duration > 0 && g.Rate*g.Duration.Seconds() < 1 {
		return fmt.Errorf("rate %v for %s is less than one event", g.Rate, g.Duration)
	}
	if !(g.Zipf > 0) || math.IsInf(g.Zipf, 0) {
		return fmt.Errorf("zipf %v is not a finite number > 0", g.Zipf)
	}
	if err := checkBeacon(g.Beacon); err != nil {
		return err
	}
	for _, t := range g.Types {
		if !schemas.IsType(t) {
			return fmt.Errorf("type %q must match [a-z][a-z0-9_]* (at most %d bytes)", t, schemas.MaxTypeLen)
		}
	}
	if len(g.Types) != len(slices.Compact(slices.Sorted(slices.Values(g.Types)))) {
		return fmt.Errorf("types %q has a duplicate", g.Types)
	}
	if g.Countries < 0 || g.Countries > len(countryCodes) {
		return fmt.Errorf("countries %d is not in [0, %d]", g.Countries, len(countryCodes))
	}
	return nil
}

// total is the number of events the generator produces, or -1 when only the
// wall clock (rate=0 with a duration) or nothing bounds it.
func (g SyntheticSpec) total() int64 {
	n := int64(-1)
	if g.Rate > 0 && g.Duration > 0 {
		n = int64(math.Round(g.Rate * g.Duration.Seconds()))
	}
	if g.Events > 0 && (n < 0 || g.Events < n) {
		n = g.Events
	}
	return n
}

// String formats sp so that ParseSpec(sp.String()) == sp (after defaults).
func (sp Spec) String() string {
	sp = sp.withDefaults()
	switch sp.Kind {
	case KindPubsub:
		p := sp.Pubsub
		var o []string
		if p.IdleStop > 0 {
			o = append(o, "idle_stop="+p.IdleStop.String())
		}
		o = append(o, "slack="+p.Slack.String(), "readers="+strconv.Itoa(p.Readers))
		return "pubsub:" + p.Subscription + "?" + strings.Join(o, ",")
	case KindFile:
		return "file:" + sp.File.Path + "?beacon=" + strconv.Itoa(sp.File.Beacon) + ",slack=" + sp.File.Slack.String()
	case KindSynthetic:
		g := sp.Synthetic
		o := []string{
			"rate=" + strconv.FormatFloat(g.Rate, 'g', -1, 64),
			"duration=" + g.Duration.String(),
			"items=" + strconv.FormatUint(g.Items, 10),
			"zipf=" + strconv.FormatFloat(g.Zipf, 'g', -1, 64),
			"seed=" + strconv.FormatUint(g.Seed, 10),
			"beacon=" + strconv.Itoa(g.Beacon),
			"types=" + strings.Join(g.Types, "|"),
			"users=" + strconv.FormatUint(g.Users, 10),
		}
		if g.Countries > 0 {
			o = append(o, "countries="+strconv.Itoa(g.Countries))
		}
		if g.Events > 0 {
			o = append(o, "events="+strconv.FormatInt(g.Events, 10))
		}
		return "synthetic:" + strings.Join(o, ",")
	}
	return string(sp.Kind) + ":"
}
