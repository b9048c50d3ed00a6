package schemas

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// Count units of a trending list: what its counts and shares count.
const (
	CountsEvents = "events"
	CountsUsers  = "users"
)

// Trending is a published trending list of one (type, scope): the items most
// unusually active for themselves right now (transforms/trend). It is
// published next to the top lists under the list key (type, scope,
// "trending"), with the same versioning, and read by GET /v1/trending. JSON:
//
//	{"type":"hashtag","scope":"IN-MH","window":"trending",
//	 "as_of":"2026-11-30T10:42:00Z","baseline_hours":168,"counts":"events",
//	 "version":1764499320,"stale":false,
//	 "items":[{"rank":1,"item":"#raininmumbai","score":0.0053,"count_5m":120,
//	           "baseline_5m":1.5,"peak_score":0.0061,"peak_at":"2026-11-30T10:39:00Z"}]}
//
// Items are in rank order of score, which is the larger of the live score
// and the decayed peak (transforms/trend's package doc defines both).
type Trending struct {
	Type   string `json:"type"`
	Scope  string `json:"scope"`
	Window Window `json:"window"` // always WindowTrending
	// AsOf is the end of the 5-minute window the live scores describe.
	AsOf time.Time `json:"as_of"`
	// BaselineHours is how many hours of history (the job's own and the
	// exact tables') the baselines could draw on, at most a week; a cold
	// start reports what the job has seen.
	BaselineHours int `json:"baseline_hours"`
	// Counts is CountsEvents or CountsUsers.
	Counts string `json:"counts"`
	// Rules is the version of the countable-event rules behind the counts
	// (the 5-minute list's List.Rules), so trending is compared like with
	// like.
	Rules   string       `json:"rules,omitempty"`
	Version int64        `json:"version"`
	Stale   bool         `json:"stale"`
	Items   []TrendEntry `json:"items"`
}

// TrendEntry is one ranked item of a trending list.
type TrendEntry struct {
	Rank int    `json:"rank"`
	Item string `json:"item"`
	// Score ranks the list: max(live score, decayed peak score).
	Score float64 `json:"score"`
	// Count5m is the item's count in the 5 minutes before as_of.
	Count5m uint64 `json:"count_5m"`
	// Baseline5m is the item's baseline share expressed as a 5-minute count
	// at the current total (p_hat * total).
	Baseline5m float64 `json:"baseline_5m"`
	// PeakScore is the best live score the item reached, undecayed, and
	// PeakAt when (omitted when it never scored: a listed item always has).
	PeakScore float64   `json:"peak_score"`
	PeakAt    time.Time `json:"peak_at,omitzero"`
}

// Key returns the list's identity.
func (t *Trending) Key() ListKey { return ListKey{Type: t.Type, Scope: t.Scope, Window: t.Window} }

// MarshalTrending encodes t as JSON.
func MarshalTrending(t *Trending) ([]byte, error) { return json.Marshal(t) }

// UnmarshalTrending decodes and checks a trending list (see Check): a reader
// never serves a blob that breaks its invariants.
func UnmarshalTrending(data []byte) (*Trending, error) {
	var t Trending
	if err := json.Unmarshal(data, &t); err != nil {
		return nil, fmt.Errorf("%w: json: %w", ErrBadList, err)
	}
	if err := t.Check(); err != nil {
		return nil, err
	}
	return &t, nil
}

func finiteNonNeg(f float64) bool { return f >= 0 && !math.IsInf(f, 0) && !math.IsNaN(f) }

// Check verifies a trending list: a valid key with window "trending", as_of
// set, baseline_hours >= 0, counts "events" or "users", and for every entry:
// rank = position+1, a non-empty item listed once, finite non-negative
// score, baseline and peak, and score not above the previous entry's.
func (t *Trending) Check() error {
	if err := t.Key().Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadList, err)
	}
	if t.Window != WindowTrending {
		return fmt.Errorf("%w: window %q, want %q", ErrBadList, t.Window, WindowTrending)
	}
	if t.AsOf.IsZero() {
		return fmt.Errorf("%w: as_of is missing", ErrBadList)
	}
	if t.BaselineHours < 0 {
		return fmt.Errorf("%w: baseline_hours %d is negative", ErrBadList, t.BaselineHours)
	}
	if t.Counts != CountsEvents && t.Counts != CountsUsers {
		return fmt.Errorf("%w: counts %q must be %q or %q", ErrBadList, t.Counts, CountsEvents, CountsUsers)
	}
	seen := make(map[string]struct{}, len(t.Items))
	for i := range t.Items {
		e := &t.Items[i]
		if e.Rank != i+1 {
			return fmt.Errorf("%w: entry %d has rank %d", ErrBadList, i, e.Rank)
		}
		if e.Item == "" {
			return fmt.Errorf("%w: entry %d has no item", ErrBadList, i)
		}
		if _, dup := seen[e.Item]; dup {
			return fmt.Errorf("%w: entry %d: item %q is listed twice", ErrBadList, i, e.Item)
		}
		seen[e.Item] = struct{}{}
		if !finiteNonNeg(e.Score) || !finiteNonNeg(e.Baseline5m) || !finiteNonNeg(e.PeakScore) {
			return fmt.Errorf("%w: entry %d: score %v, baseline %v, peak %v must be finite and >= 0", ErrBadList, i, e.Score, e.Baseline5m, e.PeakScore)
		}
		if i > 0 && e.Score > t.Items[i-1].Score {
			return fmt.Errorf("%w: entry %d: score %v above the previous rank's %v", ErrBadList, i, e.Score, t.Items[i-1].Score)
		}
	}
	return nil
}
