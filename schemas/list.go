package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Window names a list's time range. Every window but All slides: "1h" at
// 10:42 covers [09:42, 10:42).
type Window string

// The windows every list type is published for.
const (
	Window1m  Window = "1m"
	Window5m  Window = "5m"
	Window1h  Window = "1h"
	Window24h Window = "24h"
	WindowAll Window = "all"
)

// WindowTrending names the trending list of a (type, scope) (schemas.Trending).
// It is a list key's window but not a counting window: it is not in Windows,
// and Valid reports false for it.
const WindowTrending Window = "trending"

// Windows lists every window, shortest first.
var Windows = []Window{Window1m, Window5m, Window1h, Window24h, WindowAll}

// Length is the span of event time the window covers; 0 for All.
func (w Window) Length() time.Duration {
	switch w {
	case Window1m:
		return time.Minute
	case Window5m:
		return 5 * time.Minute
	case Window1h:
		return time.Hour
	case Window24h:
		return 24 * time.Hour
	}
	return 0
}

// Period is how often a new version of the list is published.
func (w Window) Period() time.Duration {
	switch w {
	case Window1m, Window5m:
		return 10 * time.Second
	}
	return time.Minute
}

// Valid reports whether w is one of Windows.
func (w Window) Valid() bool {
	for _, x := range Windows {
		if w == x {
			return true
		}
	}
	return false
}

// ListKey identifies a list: (type, scope, window).
type ListKey struct {
	Type   string `json:"type"`
	Scope  string `json:"scope"`
	Window Window `json:"window"`
}

func (k ListKey) String() string { return k.Type + ":" + k.Scope + ":" + string(k.Window) }

// Validate checks each part of the key.
func (k ListKey) Validate() error {
	if !IsType(k.Type) {
		return fmt.Errorf("type %q must match [a-z][a-z0-9_]{0,31}", k.Type)
	}
	if !IsScope(k.Scope) {
		return fmt.Errorf("scope %q must be \"global\", a country (IN) or a region (IN-MH)", k.Scope)
	}
	if !k.Window.Valid() && k.Window != WindowTrending {
		return fmt.Errorf("window %q must be one of 1m, 5m, 1h, 24h, all, trending", k.Window)
	}
	return nil
}

// List is a published list: the Redis blob's JSON, the API's response and the
// file sink's content. Entries are in rank order. Every Count is an upper
// bound of the item's true count in [AsOf-Length, AsOf), every Lower a lower
// bound, and Count-Lower <= MaxOvercount. The first CertifiedK entries are
// proven to be the true top CertifiedK (as a set, up to ties); Complete means
// CertifiedK reaches the K the list was built for.
type List struct {
	Type   string `json:"type"`
	Scope  string `json:"scope"`
	Window Window `json:"window"`
	// AsOf is the event time the list describes (exclusive end of the window).
	AsOf time.Time `json:"as_of"`
	// ExactUntil is the hour up to which counts are exact (long windows); nil
	// when nothing in the list comes from a recount.
	ExactUntil   *time.Time `json:"exact_until"`
	MaxOvercount uint64     `json:"max_overcount"`
	Complete     bool       `json:"complete"`
	CertifiedK   int        `json:"certified_k"`
	Version      int64      `json:"version"`
	Stale        bool       `json:"stale"`
	// Rules is the version of the countable-event rules the counts were
	// made with (transforms/rules Rules.Version), so that a grade compares
	// like with like; "" when not recorded.
	Rules string `json:"rules,omitempty"`
	// MinCount is the minimum count the list was cut at (a country or
	// region list leaves out items below it); 0: none (omitted).
	MinCount uint64 `json:"min_count,omitempty"`
	// Total is the number of events the window counted over all items, listed
	// or not (the trend scorer's denominator); 0 when unknown (omitted).
	Total uint64  `json:"total,omitempty"`
	Items []Entry `json:"items"`
}

// Entry is one ranked item of a list.
type Entry struct {
	Rank  int    `json:"rank"`
	Item  string `json:"item"`
	Count uint64 `json:"count"`
	Lower uint64 `json:"lower"`
	// Users estimates the item's distinct users in the window
	// (transforms/users); 0 when not measured.
	Users uint64 `json:"users,omitempty"`
}

// Key returns the list's identity.
func (l *List) Key() ListKey { return ListKey{Type: l.Type, Scope: l.Scope, Window: l.Window} }

// ErrBadList is wrapped by every list decoding or consistency error.
var ErrBadList = errors.New("bad list")

// MarshalList encodes l as JSON (DESIGN.md section 6).
func MarshalList(l *List) ([]byte, error) { return json.Marshal(l) }

// UnmarshalList decodes and checks a list: a blob that decodes but breaks the
// list's own invariants (ranks out of order, lower above count, an entry
// beyond max_overcount, an item listed twice: see Check) is rejected, so a reader never serves it.
func UnmarshalList(data []byte) (*List, error) {
	var l List
	if err := json.Unmarshal(data, &l); err != nil {
		return nil, fmt.Errorf("%w: json: %w", ErrBadList, err)
	}
	if err := l.Check(); err != nil {
		return nil, err
	}
	return &l, nil
}

// Check verifies the list's invariants: a valid key, as_of set, 0 <=
// certified_k <= len(items), and for every entry: rank = position+1, a
// non-empty item listed once, lower <= count, count-lower <= max_overcount,
// and count not above the previous entry's.
func (l *List) Check() error {
	if err := l.Key().Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadList, err)
	}
	if !l.Window.Valid() {
		return fmt.Errorf("%w: window %q is not a top list's window", ErrBadList, l.Window)
	}
	if l.AsOf.IsZero() {
		return fmt.Errorf("%w: as_of is missing", ErrBadList)
	}
	if l.CertifiedK < 0 || l.CertifiedK > len(l.Items) {
		return fmt.Errorf("%w: certified_k %d outside [0, %d]", ErrBadList, l.CertifiedK, len(l.Items))
	}
	seen := make(map[string]struct{}, len(l.Items))
	for i := range l.Items {
		e := &l.Items[i]
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
		if e.Lower > e.Count {
			return fmt.Errorf("%w: entry %d: lower %d above count %d", ErrBadList, i, e.Lower, e.Count)
		}
		if e.Count-e.Lower > l.MaxOvercount {
			return fmt.Errorf("%w: entry %d: count-lower %d above max_overcount %d", ErrBadList, i, e.Count-e.Lower, l.MaxOvercount)
		}
		if i > 0 && e.Count > l.Items[i-1].Count {
			return fmt.Errorf("%w: entry %d: count %d above the previous rank's %d", ErrBadList, i, e.Count, l.Items[i-1].Count)
		}
	}
	return nil
}

// ListHeader reads a list's or trending list's key, version and as_of from
// its JSON without decoding its entries: the fields before "items" (where
// MarshalList and MarshalTrending put them), so a publisher that only
// routes blobs does not pay for a full decode. It checks the key and that
// the version is positive; a reader still decodes in full (UnmarshalList).
func ListHeader(data []byte) (k ListKey, version int64, asOf time.Time, err error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	bad := func(what string, e error) error { return fmt.Errorf("%w: header: %s: %w", ErrBadList, what, e) }
	if t, e := dec.Token(); e != nil || t != json.Delim('{') {
		return k, 0, asOf, bad("not an object", e)
	}
	var haveAsOf bool
fields:
	for dec.More() {
		t, e := dec.Token()
		if e != nil {
			return k, 0, asOf, bad("field", e)
		}
		name, _ := t.(string)
		var dst any = new(json.RawMessage)
		switch name {
		case "type":
			dst = &k.Type
		case "scope":
			dst = &k.Scope
		case "window":
			dst = &k.Window
		case "as_of":
			dst, haveAsOf = &asOf, true
		case "version":
			dst = &version
		case "items":
			if haveAsOf && version != 0 {
				break fields // every header field is in
			}
		}
		if e := dec.Decode(dst); e != nil {
			return k, 0, asOf, bad(name, e)
		}
	}
	if e := k.Validate(); e != nil {
		return k, 0, asOf, bad("key", e)
	}
	if version <= 0 || !haveAsOf {
		return k, 0, asOf, bad("version and as_of", fmt.Errorf("version %d, as_of set %v", version, haveAsOf))
	}
	return k, version, asOf, nil
}
