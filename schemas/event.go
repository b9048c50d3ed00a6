package schemas

import (
	"errors"
	"fmt"
	"time"
)

// Event is one counted occurrence of an item: a view of a video, a use of a
// hashtag, a search. Items are keys (Type, Item); Country and Region give the
// scopes the event counts in besides "global".
type Event struct {
	EventID string    `json:"event_id"`
	Type    string    `json:"type"`
	Item    string    `json:"item"`
	User    string    `json:"user,omitempty"`
	TS      time.Time `json:"ts"`
	Country string    `json:"country,omitempty"`
	Region  string    `json:"region,omitempty"`
}

// Field limits. They bound the bytes any one event can make the pipeline keep.
const (
	MaxEventIDLen = 128
	MaxTypeLen    = 32
	MaxItemLen    = 256
	MaxUserLen    = 128
	MaxRegionLen  = 16
)

// ErrInvalidEvent is wrapped by every validation error, so callers can tell bad
// input from failures of their own.
var ErrInvalidEvent = errors.New("invalid event")

// Validator holds the rules an event must meet. The zero value checks field
// presence, lengths and character sets and accepts any timestamp and type.
type Validator struct {
	// MaxPast rejects events older than now-MaxPast. Zero: no limit (file
	// replays of historical data).
	MaxPast time.Duration
	// MaxFuture rejects events newer than now+MaxFuture (clock skew allowance).
	// Zero: no limit.
	MaxFuture time.Duration
	// Types, when non-empty, is the set of item types accepted.
	Types map[string]bool
}

// DefaultValidator is what the ingest API and the streaming job use for live
// traffic: events up to 7 days old (the archive's recount horizon is shorter,
// but a week-old beacon is still a fact) and at most 5 minutes in the future.
func DefaultValidator() Validator {
	return Validator{MaxPast: 7 * 24 * time.Hour, MaxFuture: 5 * time.Minute}
}

// Validate reports why e is rejected, or nil. now is the reference time for
// the timestamp window (never read from the clock here).
func (v Validator) Validate(e *Event, now time.Time) error {
	if err := checkToken("event_id", e.EventID, MaxEventIDLen, true); err != nil {
		return err
	}
	if err := checkType(e.Type); err != nil {
		return err
	}
	if v.Types != nil && len(v.Types) > 0 && !v.Types[e.Type] {
		return fmt.Errorf("%w: type %q is not a configured item type", ErrInvalidEvent, e.Type)
	}
	if err := checkToken("item", e.Item, MaxItemLen, true); err != nil {
		return err
	}
	if err := checkToken("user", e.User, MaxUserLen, false); err != nil {
		return err
	}
	if e.TS.IsZero() {
		return fmt.Errorf("%w: ts is missing", ErrInvalidEvent)
	}
	if v.MaxPast > 0 && e.TS.Before(now.Add(-v.MaxPast)) {
		return fmt.Errorf("%w: ts %s is more than %s in the past", ErrInvalidEvent, e.TS.UTC().Format(time.RFC3339), v.MaxPast)
	}
	if v.MaxFuture > 0 && e.TS.After(now.Add(v.MaxFuture)) {
		return fmt.Errorf("%w: ts %s is more than %s in the future", ErrInvalidEvent, e.TS.UTC().Format(time.RFC3339), v.MaxFuture)
	}
	if e.Country != "" && !IsCountry(e.Country) {
		return fmt.Errorf("%w: country %q is not two upper-case letters (ISO 3166-1 alpha-2)", ErrInvalidEvent, e.Country)
	}
	if e.Region != "" {
		if e.Country == "" {
			return fmt.Errorf("%w: region %q given without a country", ErrInvalidEvent, e.Region)
		}
		if !IsRegion(e.Region) || e.Region[:2] != e.Country {
			return fmt.Errorf("%w: region %q is not %s-XXX (ISO 3166-2, 1-%d characters after the dash)", ErrInvalidEvent, e.Region, e.Country, MaxRegionLen-3)
		}
	}
	return nil
}

// checkToken accepts printable ASCII without spaces, quotes or backslashes:
// ids are opaque but end up in Redis keys, JSON and Parquet.
func checkToken(field, s string, maxLen int, required bool) error {
	if s == "" {
		if required {
			return fmt.Errorf("%w: %s is missing", ErrInvalidEvent, field)
		}
		return nil
	}
	if len(s) > maxLen {
		return fmt.Errorf("%w: %s is %d bytes, more than %d", ErrInvalidEvent, field, len(s), maxLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return fmt.Errorf("%w: %s has byte 0x%02x at %d (printable ASCII without space, quote or backslash only)", ErrInvalidEvent, field, c, i)
		}
	}
	return nil
}

// IsType reports whether s is a well-formed item type: 1-32 characters of
// [a-z0-9_], starting with a letter.
func IsType(s string) bool { return checkType(s) == nil }

func checkType(s string) error {
	if s == "" {
		return fmt.Errorf("%w: type is missing", ErrInvalidEvent)
	}
	if len(s) > MaxTypeLen {
		return fmt.Errorf("%w: type is %d bytes, more than %d", ErrInvalidEvent, len(s), MaxTypeLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := (c >= 'a' && c <= 'z') || (i > 0 && ((c >= '0' && c <= '9') || c == '_'))
		if !ok {
			return fmt.Errorf("%w: type %q must match [a-z][a-z0-9_]*", ErrInvalidEvent, s)
		}
	}
	return nil
}

// Partitions is how the fast path spreads a list's items over its
// partitions (preagg.Config): P for the global lists; Region for a
// region's lists and Country for a country's when in [1, P), else P.
type Partitions struct{ P, Region, Country int }

// Of is how many partitions scope's lists use (0 when P is 0).
func (p Partitions) Of(scope string) int {
	n := 0
	switch {
	case IsRegion(scope):
		n = p.Region
	case IsCountry(scope):
		n = p.Country
	}
	if n < 1 || n > p.P {
		return p.P
	}
	return n
}

// IsCountry reports whether s is two upper-case ASCII letters.
func IsCountry(s string) bool {
	return len(s) == 2 && isUpper(s[0]) && isUpper(s[1])
}

// IsRegion reports whether s looks like an ISO 3166-2 code: CC-XXX with 1 to
// 13 upper-case letters or digits after the dash.
func IsRegion(s string) bool {
	if len(s) < 4 || len(s) > MaxRegionLen || !IsCountry(s[:2]) || s[2] != '-' {
		return false
	}
	for i := 3; i < len(s); i++ {
		if c := s[i]; !isUpper(c) && !(c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// IsScope reports whether s is a valid list scope: "global", a country or a
// region.
func IsScope(s string) bool { return s == ScopeGlobal || IsCountry(s) || IsRegion(s) }

// ScopeGlobal is the scope every event counts in.
const ScopeGlobal = "global"

// Scopes returns the scopes e counts in, most general first: "global", then
// its country and region when present.
func (e *Event) Scopes(dst []string) []string {
	dst = append(dst[:0], ScopeGlobal)
	if e.Country != "" {
		dst = append(dst, e.Country)
		if e.Region != "" {
			dst = append(dst, e.Region)
		}
	}
	return dst
}

func isUpper(c byte) bool { return c >= 'A' && c <= 'Z' }
