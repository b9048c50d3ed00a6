package rules

import (
	"errors"
	"flag"
	"fmt"
	"time"
)

// Config is the rule set's configuration: what the flags say. It is plain
// data (paths, numbers, durations), so a Beam DoFn can carry it to workers
// as an exported field and build its Rules in Setup.
//
// Zero values are not defaults: start from DefaultConfig (or RegisterFlags).
type Config struct {
	// Off (--rules=none) turns off every rule but the event_id dedupe, so
	// that a raw stream can be checked against a plain recount.
	Off bool

	// Bots is a file of known bots (format in the package doc); "" none.
	Bots string
	// Blocklist is a file of safety-blocklisted items; "" none.
	Blocklist string
	// Trust is a `user,weight` CSV, weights in [0,1]; "" none.
	Trust string
	// TrustUnknown is the weight of users not in the trust table and of
	// events without a user, in [0,1]. Default 1.
	TrustUnknown float64
	// Reload is how often the files are checked for changes (size or
	// modification time) by Rules.Watch; 0: never (Rules.Reload only).
	Reload time.Duration

	// RepeatGap: an event of a (user, type, item) less than this after the
	// one before it in the same rule window is a repeat. 0: off. Default 30 s.
	RepeatGap time.Duration
	// Cap is the most events one account counts for one item in one rule
	// window. 0: no cap. Default 10.
	Cap int
	// Window is the rule window: fixed event-time windows aligned to the
	// Unix epoch, dividing an hour, in which repeats and caps are judged
	// (state starts afresh in each), so that the exact recount can judge
	// each hour on its own. Default 1 h.
	Window time.Duration

	// Stream state (Filter); the exact recount holds no such state.

	// DedupeHorizon is how far back in event time a Filter remembers
	// event_ids: at least the fast path's allowed lateness plus the
	// clients' clock skew. Default 3 min (the fast path's 2 min lateness
	// and a minute).
	DedupeHorizon time.Duration
	// DedupeBucket is the event-time bucket of the event_id sets. Default 30 s.
	DedupeBucket time.Duration
	// MaxIDs bounds the event_ids remembered per dedupe bucket. Default
	// 1<<18: 8,700 events/s per Filter over 30 s buckets.
	MaxIDs int
	// MaxKeys bounds the (user, type, item) keys remembered per rule window
	// for repeats and caps. Default 1<<17.
	MaxKeys int
}

// DefaultConfig is the rule set the commands run by default.
func DefaultConfig() Config {
	return Config{
		TrustUnknown:  1,
		RepeatGap:     30 * time.Second,
		Cap:           10,
		Window:        time.Hour,
		DedupeHorizon: 3 * time.Minute,
		DedupeBucket:  30 * time.Second,
		MaxIDs:        1 << 18,
		MaxKeys:       1 << 17,
	}
}

// None is DefaultConfig with every rule but the event_id dedupe off
// (--rules=none).
func None() Config {
	c := DefaultConfig()
	c.Off = true
	return c
}

// Limits on the stream state's sizes, so that a typo cannot ask for
// terabytes.
const (
	MaxMaxIDs  = 1 << 26
	MaxMaxKeys = 1 << 26
	// maxRingBuckets bounds DedupeHorizon/DedupeBucket and the rule-window
	// generations.
	maxRingBuckets = 1 << 12
)

// ErrConfig is wrapped by every Validate error.
var ErrConfig = errors.New("rules: bad configuration")

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	var errs []error
	if c.TrustUnknown < 0 || c.TrustUnknown > 1 || c.TrustUnknown != c.TrustUnknown {
		errs = append(errs, fmt.Errorf("trust_unknown %v outside [0, 1]", c.TrustUnknown))
	}
	if c.Reload < 0 {
		errs = append(errs, fmt.Errorf("reload %v is negative", c.Reload))
	}
	if c.RepeatGap < 0 || c.RepeatGap%time.Millisecond != 0 {
		errs = append(errs, fmt.Errorf("repeat_gap %v is not a whole number of milliseconds >= 0", c.RepeatGap))
	}
	if c.Cap < 0 || c.Cap > 1<<30 {
		errs = append(errs, fmt.Errorf("cap %d outside [0, 2^30]", c.Cap))
	}
	if c.Window < time.Second || c.Window > time.Hour || time.Hour%c.Window != 0 || c.Window%time.Millisecond != 0 {
		errs = append(errs, fmt.Errorf("window %v must divide an hour (1m, 5m, 10m, 15m, 30m, 1h, ...)", c.Window))
	}
	if c.RepeatGap > c.Window && c.Window > 0 {
		errs = append(errs, fmt.Errorf("repeat_gap %v is longer than the rule window %v", c.RepeatGap, c.Window))
	}
	if c.DedupeBucket < time.Second || c.DedupeBucket%time.Millisecond != 0 {
		errs = append(errs, fmt.Errorf("dedupe_bucket %v is not a whole number of milliseconds >= 1s", c.DedupeBucket))
	} else if c.DedupeHorizon < c.DedupeBucket || c.DedupeHorizon/c.DedupeBucket > maxRingBuckets {
		errs = append(errs, fmt.Errorf("dedupe_horizon %v must be between one dedupe bucket (%v) and %d of them", c.DedupeHorizon, c.DedupeBucket, maxRingBuckets))
	}
	if c.Window >= time.Second && c.DedupeHorizon/c.Window > maxRingBuckets {
		errs = append(errs, fmt.Errorf("dedupe_horizon %v spans more than %d rule windows", c.DedupeHorizon, maxRingBuckets))
	}
	if c.MaxIDs < 1 || c.MaxIDs > MaxMaxIDs {
		errs = append(errs, fmt.Errorf("max_ids %d outside [1, %d]", c.MaxIDs, MaxMaxIDs))
	}
	if c.MaxKeys < 1 || c.MaxKeys > MaxMaxKeys {
		errs = append(errs, fmt.Errorf("max_keys %d outside [1, %d]", c.MaxKeys, MaxMaxKeys))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// FilterMaxBytes is the most memory a Filter built from c takes, whatever
// the events (Filter.MaxBytes without building one).
func (c Config) FilterMaxBytes() int {
	ids := ceilDiv(c.DedupeHorizon.Milliseconds(), c.DedupeBucket.Milliseconds()) + 1
	keys := 0
	if c.stateful() {
		keys = ceilDiv(c.DedupeHorizon.Milliseconds(), c.Window.Milliseconds()) + 1
	}
	return ids*tableBytes[seenID](c.MaxIDs, c.MaxIDs*idArenaBytes) +
		keys*keyWindowBytes(c.MaxKeys)
}

// stateful reports whether any rule needs memory across events (besides
// the dedupe).
func (c Config) stateful() bool { return !c.Off && (c.RepeatGap > 0 || c.Cap > 0) }

// RegisterFlags defines the rules' flags on fs, each name prefixed with
// prefix ("" for the plain names), with DefaultConfig's values, and returns
// the Config they fill in when fs is parsed. Call Validate after parsing.
//
//	--rules=all|none     none: only the event_id dedupe
//	--bots=PATH          known bots: user ids and user-agent patterns
//	--blocklist=PATH     safety blocklist: type,item rows
//	--trust=PATH         trust table: user,weight rows, weights in [0,1]
//	--trust_unknown=1    weight of users not in the trust table
//	--rules_reload=30s   how often the files are checked for changes (0: never)
//	--repeat_gap=30s     a (user, item) event this soon after the previous is a repeat
//	--cap=10             events one account counts per item per rule window (0: no cap)
//	--rules_window=1h    the rule window (divides an hour)
//	--dedupe_horizon=10m how far back the stream remembers event_ids
//	--dedupe_bucket=1m   event-time bucket of the stream's event_id sets
//	--dedupe_max_ids     event_ids remembered per bucket
//	--rules_max_keys     (user, item) keys remembered per rule window
func RegisterFlags(fs *flag.FlagSet, prefix string) *Config {
	c := DefaultConfig()
	c.Reload = 30 * time.Second
	return RegisterFlagsWith(fs, prefix, c)
}

// RegisterFlagsWith is RegisterFlags with the defaults d instead of
// DefaultConfig's: a command whose stream state must be smaller (the fast
// path's pre-aggregation, preagg.DefaultRules) shows and uses its own.
func RegisterFlagsWith(fs *flag.FlagSet, prefix string, d Config) *Config {
	c := d
	cfg := &c
	fs.Func(prefix+"rules", "countable-event rules: all, or none (only the event_id dedupe)", func(v string) error {
		switch v {
		case "all":
			cfg.Off = false
		case "none":
			cfg.Off = true
		default:
			return fmt.Errorf("want all or none, got %q", v)
		}
		return nil
	})
	fs.StringVar(&cfg.Bots, prefix+"bots", "", "file of known bots: one user id per line, or ua:REGEXP for user agents (reloaded on change)")
	fs.StringVar(&cfg.Blocklist, prefix+"blocklist", "", "file of safety-blocklisted items, one type,item per line (* for any type); dropped before counting (reloaded on change)")
	fs.StringVar(&cfg.Trust, prefix+"trust", "", "trust table: user,weight CSV with weights in [0,1] (reloaded on change)")
	fs.Float64Var(&cfg.TrustUnknown, prefix+"trust_unknown", cfg.TrustUnknown, "weight of users not in the trust table, in [0,1]")
	fs.DurationVar(&cfg.Reload, prefix+"rules_reload", cfg.Reload, "how often the bots, blocklist and trust files are checked for changes (0: never)")
	fs.DurationVar(&cfg.RepeatGap, prefix+"repeat_gap", cfg.RepeatGap, "an event of the same user and item less than this after the previous one is a repeat (0: off)")
	fs.IntVar(&cfg.Cap, prefix+"cap", cfg.Cap, "events one account counts for one item per rule window (0: no cap)")
	fs.DurationVar(&cfg.Window, prefix+"rules_window", cfg.Window, "rule window for repeats and caps: fixed event-time windows that divide an hour")
	fs.DurationVar(&cfg.DedupeHorizon, prefix+"dedupe_horizon", cfg.DedupeHorizon, "stream: how far back in event time event_ids are remembered (>= allowed lateness + clock skew)")
	fs.DurationVar(&cfg.DedupeBucket, prefix+"dedupe_bucket", cfg.DedupeBucket, "stream: event-time bucket of the event_id sets")
	fs.IntVar(&cfg.MaxIDs, prefix+"dedupe_max_ids", cfg.MaxIDs, "stream: event_ids remembered per dedupe bucket (beyond: counted as unchecked, a possible over-count)")
	fs.IntVar(&cfg.MaxKeys, prefix+"rules_max_keys", cfg.MaxKeys, "stream: (user, item) keys remembered per rule window, the most recently active (older ones are forgotten: a possible over-count, topk/rules_forgotten)")
	return cfg
}
