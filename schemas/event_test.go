package schemas

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// testNow is the reference time of every validation test: time is a
// parameter, never the clock.
var testNow = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

func validEvent() Event {
	return Event{
		EventID: "e-123",
		Type:    "video",
		Item:    "v_42",
		User:    "u_7",
		TS:      testNow.Add(-time.Second),
		Country: "IN",
		Region:  "IN-MH",
	}
}

// TestValidate checks, field by field, exactly what Validator.Validate rejects
// and that the error says why (a substring of the message) and wraps
// ErrInvalidEvent; every case not marked with an error must be accepted.
func TestValidate(t *testing.T) {
	live := DefaultValidator() // 7 days past, 5 minutes future
	typed := Validator{Types: map[string]bool{"video": true, "hashtag": true}}
	emptyTypes := Validator{Types: map[string]bool{}}
	zero := Validator{}

	tests := []struct {
		name    string
		v       Validator
		mut     func(*Event)
		wantErr string // "" means valid
	}{
		{"valid full event", live, func(*Event) {}, ""},
		{"valid minimal event (no user, country, region)", live, func(e *Event) { e.User, e.Country, e.Region = "", "", "" }, ""},
		{"valid country without region", live, func(e *Event) { e.Region = "" }, ""},

		// event_id
		{"event_id missing", live, func(e *Event) { e.EventID = "" }, "event_id is missing"},
		{"event_id at limit", live, func(e *Event) { e.EventID = strings.Repeat("a", MaxEventIDLen) }, ""},
		{"event_id over limit", live, func(e *Event) { e.EventID = strings.Repeat("a", MaxEventIDLen+1) }, "event_id is 129 bytes, more than 128"},
		{"event_id with space", live, func(e *Event) { e.EventID = "e 1" }, "event_id has byte 0x20 at 1"},
		{"event_id with quote", live, func(e *Event) { e.EventID = `e"1` }, "event_id has byte 0x22 at 1"},
		{"event_id with backslash", live, func(e *Event) { e.EventID = `e\1` }, "event_id has byte 0x5c at 1"},
		{"event_id with control byte", live, func(e *Event) { e.EventID = "e\x00" }, "event_id has byte 0x00 at 1"},
		{"event_id with DEL", live, func(e *Event) { e.EventID = "e\x7f" }, "event_id has byte 0x7f at 1"},
		{"event_id with UTF-8", live, func(e *Event) { e.EventID = "é" }, "event_id has byte 0xc3 at 0"},
		{"event_id with all other printable ASCII", live, func(e *Event) { e.EventID = "!#$%&'()*+,-./09:;<=>?@AZ[]^_`az{|}~" }, ""},

		// type
		{"type missing", live, func(e *Event) { e.Type = "" }, "type is missing"},
		{"type at limit", live, func(e *Event) { e.Type = strings.Repeat("a", MaxTypeLen) }, ""},
		{"type over limit", live, func(e *Event) { e.Type = strings.Repeat("a", MaxTypeLen+1) }, "type is 33 bytes, more than 32"},
		{"type with digits and underscore", live, func(e *Event) { e.Type = "a1_b2" }, ""},
		{"type starting with digit", live, func(e *Event) { e.Type = "1a" }, "must match [a-z][a-z0-9_]*"},
		{"type starting with underscore", live, func(e *Event) { e.Type = "_a" }, "must match [a-z][a-z0-9_]*"},
		{"type upper case", live, func(e *Event) { e.Type = "Video" }, "must match [a-z][a-z0-9_]*"},
		{"type with dash", live, func(e *Event) { e.Type = "a-b" }, "must match [a-z][a-z0-9_]*"},
		{"type with space", live, func(e *Event) { e.Type = "a b" }, "must match [a-z][a-z0-9_]*"},

		// configured types
		{"configured type accepted", typed, func(*Event) {}, ""},
		{"unknown type when Types configured", typed, func(e *Event) { e.Type = "search" }, `type "search" is not a configured item type`},
		{"malformed type reported before unknown type", typed, func(e *Event) { e.Type = "Search" }, "must match"},
		{"empty Types accepts any type", emptyTypes, func(e *Event) { e.Type = "search" }, ""},

		// item
		{"item missing", live, func(e *Event) { e.Item = "" }, "item is missing"},
		{"item at limit", live, func(e *Event) { e.Item = strings.Repeat("x", MaxItemLen) }, ""},
		{"item over limit", live, func(e *Event) { e.Item = strings.Repeat("x", MaxItemLen+1) }, "item is 257 bytes, more than 256"},
		{"item with tab", live, func(e *Event) { e.Item = "v\t1" }, "item has byte 0x09 at 1"},
		{"item with newline", live, func(e *Event) { e.Item = "v1\n" }, "item has byte 0x0a at 2"},

		// user (optional)
		{"user at limit", live, func(e *Event) { e.User = strings.Repeat("u", MaxUserLen) }, ""},
		{"user over limit", live, func(e *Event) { e.User = strings.Repeat("u", MaxUserLen+1) }, "user is 129 bytes, more than 128"},
		{"user with space", live, func(e *Event) { e.User = "u 7" }, "user has byte 0x20 at 1"},

		// ts
		{"ts missing", live, func(e *Event) { e.TS = time.Time{} }, "ts is missing"},
		{"ts missing, zero validator", zero, func(e *Event) { e.TS = time.Time{} }, "ts is missing"},
		{"ts exactly MaxPast ago", live, func(e *Event) { e.TS = testNow.Add(-7 * 24 * time.Hour) }, ""},
		{"ts 1ms beyond MaxPast", live, func(e *Event) { e.TS = testNow.Add(-7*24*time.Hour - time.Millisecond) }, "more than 168h0m0s in the past"},
		{"ts exactly MaxFuture ahead", live, func(e *Event) { e.TS = testNow.Add(5 * time.Minute) }, ""},
		{"ts 1ms beyond MaxFuture", live, func(e *Event) { e.TS = testNow.Add(5*time.Minute + time.Millisecond) }, "more than 5m0s in the future"},
		{"ts in another zone compared as an instant", live, func(e *Event) {
			e.TS = testNow.Add(4 * time.Minute).In(time.FixedZone("IST", 5*3600+1800))
		}, ""},
		{"zero validator accepts ancient ts", zero, func(e *Event) { e.TS = time.Date(1995, 7, 1, 0, 0, 0, 0, time.UTC) }, ""},
		{"zero validator accepts far-future ts", zero, func(e *Event) { e.TS = testNow.AddDate(10, 0, 0) }, ""},

		// country and region
		{"country lower case", live, func(e *Event) { e.Country, e.Region = "in", "" }, `country "in" is not two upper-case letters`},
		{"country three letters", live, func(e *Event) { e.Country, e.Region = "IND", "" }, `country "IND" is not two upper-case letters`},
		{"country one letter", live, func(e *Event) { e.Country, e.Region = "I", "" }, `country "I" is not two upper-case letters`},
		{"country digits", live, func(e *Event) { e.Country, e.Region = "12", "" }, `country "12" is not two upper-case letters`},
		{"region without country", live, func(e *Event) { e.Country = "" }, `region "IN-MH" given without a country`},
		{"region of another country", live, func(e *Event) { e.Region = "US-CA" }, `region "US-CA" is not IN-XXX`},
		{"region without dash", live, func(e *Event) { e.Region = "INMH" }, `region "INMH" is not IN-XXX`},
		{"region with nothing after dash", live, func(e *Event) { e.Region = "IN-" }, `region "IN-" is not IN-XXX`},
		{"region lower case", live, func(e *Event) { e.Region = "IN-mh" }, `region "IN-mh" is not IN-XXX`},
		{"region with digits", live, func(e *Event) { e.Region = "IN-01" }, ""},
		{"region at limit", live, func(e *Event) { e.Region = "IN-" + strings.Repeat("A", MaxRegionLen-3) }, ""},
		{"region over limit", live, func(e *Event) { e.Region = "IN-" + strings.Repeat("A", MaxRegionLen-2) }, "1-13 characters after the dash"},
		{"region equal to country", live, func(e *Event) { e.Region = "IN" }, `region "IN" is not IN-XXX`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := validEvent()
			tc.mut(&e)
			err := tc.v.Validate(&e, testNow)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate(%+v) = %v, want nil", e, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate(%+v) = nil, want error containing %q", e, tc.wantErr)
			}
			if !errors.Is(err, ErrInvalidEvent) {
				t.Errorf("error %v does not wrap ErrInvalidEvent", err)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %q does not contain %q", err, tc.wantErr)
			}
		})
	}
}

// TestScopePredicates checks IsType, IsCountry, IsRegion and IsScope against
// the grammar in their doc comments.
func TestScopePredicates(t *testing.T) {
	tests := []struct {
		s                                string
		isType, isCountry, isRegion, isS bool
	}{
		{"global", true, false, false, true},
		{"video", true, false, false, false},
		{"IN", false, true, false, true},
		{"IN-MH", false, false, true, true},
		{"US-CA9", false, false, true, true},
		{"IN-", false, false, false, false},
		{"in-mh", false, false, false, false},
		{"Global", false, false, false, false},
		{"", false, false, false, false},
		{"I", false, false, false, false},
		{"IN-ABCDEFGHIJKLM", false, false, true, true},    // 16 bytes
		{"IN-ABCDEFGHIJKLMN", false, false, false, false}, // 17 bytes
	}
	for _, tc := range tests {
		if got := IsType(tc.s); got != tc.isType {
			t.Errorf("IsType(%q) = %v, want %v", tc.s, got, tc.isType)
		}
		if got := IsCountry(tc.s); got != tc.isCountry {
			t.Errorf("IsCountry(%q) = %v, want %v", tc.s, got, tc.isCountry)
		}
		if got := IsRegion(tc.s); got != tc.isRegion {
			t.Errorf("IsRegion(%q) = %v, want %v", tc.s, got, tc.isRegion)
		}
		if got := IsScope(tc.s); got != tc.isS {
			t.Errorf("IsScope(%q) = %v, want %v", tc.s, got, tc.isS)
		}
	}
}

// TestEventScopes checks that an event counts in "global", then its country,
// then its region, and that the destination slice is reused.
func TestEventScopes(t *testing.T) {
	e := validEvent()
	buf := make([]string, 0, 4)
	got := e.Scopes(buf)
	if want := []string{"global", "IN", "IN-MH"}; !equalStrings(got, want) {
		t.Errorf("Scopes = %v, want %v", got, want)
	}
	if &got[0] != &buf[:1][0] {
		t.Error("Scopes did not reuse dst")
	}
	e.Region = ""
	if got, want := e.Scopes(got), []string{"global", "IN"}; !equalStrings(got, want) {
		t.Errorf("Scopes = %v, want %v", got, want)
	}
	e.Country = ""
	if got, want := e.Scopes(got), []string{"global"}; !equalStrings(got, want) {
		t.Errorf("Scopes = %v, want %v", got, want)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestParseEventJSON checks the NDJSON line decoder: the design's example line
// decodes field by field; unknown fields, trailing data of any kind, non-object
// values and malformed JSON are rejected with ErrInvalidEvent.
func TestParseEventJSON(t *testing.T) {
	line := `{"event_id":"e-123","type":"video","item":"v_42","user":"u_7",` +
		`"ts":"2026-11-30T10:00:01.234Z","country":"IN","region":"IN-MH"}`
	var e Event
	if err := ParseEventJSON([]byte(line), &e); err != nil {
		t.Fatal(err)
	}
	want := Event{EventID: "e-123", Type: "video", Item: "v_42", User: "u_7",
		TS: time.Date(2026, 11, 30, 10, 0, 1, 234e6, time.UTC), Country: "IN", Region: "IN-MH"}
	if !eventsEqual(e, want) {
		t.Errorf("got %+v, want %+v", e, want)
	}
	// The common shape is decoded without encoding/json (parseEventFast),
	// to the same event.
	var fast Event
	if !parseEventFast([]byte(line), &fast) || !eventsEqual(fast, want) {
		t.Errorf("fast decoder: %+v, want %+v", fast, want)
	}
	// Reuse: a second parse must not keep fields of the first.
	if err := ParseEventJSON([]byte(`{"event_id":"x","type":"t","item":"i","ts":"2026-11-30T10:00:00Z"}`+"\r\n"), &e); err != nil {
		t.Fatal(err)
	}
	if e.User != "" || e.Country != "" || e.Region != "" {
		t.Errorf("fields of the previous event kept: %+v", e)
	}

	bad := []struct{ name, in, why string }{
		{"empty", ``, "empty input"},
		{"only space", " \n", "empty input"},
		{"null", `null`, "not a JSON object"},
		{"array", `[{"event_id":"x"}]`, "not a JSON object"},
		{"string", `"x"`, "not a JSON object"},
		{"unknown field", `{"event_id":"x","timestamp":"2026-11-30T10:00:00Z"}`, `unknown field "timestamp"`},
		{"trailing object", `{"event_id":"x"}{"event_id":"y"}`, "data after the object"},
		{"trailing garbage", `{"event_id":"x"} x`, "data after the object"},
		{"trailing bracket", `{"event_id":"x"}]`, "data after the object"},
		{"trailing brace", `{"event_id":"x"}}`, "data after the object"},
		{"trailing comma", `{"event_id":"x"},`, "data after the object"},
		{"trailing NUL", "{\"event_id\":\"x\"}\x00", "data after the object"},
		{"truncated", `{"event_id":"x"`, "unexpected EOF"},
		{"bad ts", `{"ts":"yesterday"}`, "cannot parse"},
		{"ts as number", `{"ts":1764496800}`, "not a JSON string"},
		{"wrong type", `{"event_id":5}`, "event_id"},
	}
	for _, tc := range bad {
		err := ParseEventJSON([]byte(tc.in), &e)
		if err == nil {
			t.Errorf("%s: ParseEventJSON(%q) = nil, want error", tc.name, tc.in)
			continue
		}
		if !errors.Is(err, ErrInvalidEvent) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%s: error %q: want ErrInvalidEvent mentioning %q", tc.name, err, tc.why)
		}
	}
}

// eventsEqual compares events with time.Time.Equal (an instant, whatever the
// location).
func eventsEqual(a, b Event) bool {
	return a.EventID == b.EventID && a.Type == b.Type && a.Item == b.Item && a.User == b.User &&
		a.TS.Equal(b.TS) && a.Country == b.Country && a.Region == b.Region
}

// benchLine is one NDJSON line of the design's shape, the file replay's
// decode per event.
var benchLine = []byte(`{"event_id":"e-1234567","type":"video","item":"v_42137","user":"u_7731",` +
	`"ts":"2026-11-30T10:00:01.234Z","country":"IN","region":"IN-MH"}`)

// BenchmarkParseEventJSON decodes benchLine (go test -bench ParseEventJSON
// ./schemas/).
func BenchmarkParseEventJSON(b *testing.B) {
	benchDecode(b, ParseEventJSON)
}

// BenchmarkParseEventJSONSlow is the same line through encoding/json alone
// (what ParseEventJSON did before its fast path).
func BenchmarkParseEventJSONSlow(b *testing.B) {
	benchDecode(b, func(line []byte, e *Event) error {
		*e = Event{}
		return decodeJSONObject(line, e)
	})
}

func benchDecode(b *testing.B, decode func([]byte, *Event) error) {
	var e Event
	b.ReportAllocs()
	b.SetBytes(int64(len(benchLine)))
	for b.Loop() {
		if err := decode(benchLine, &e); err != nil {
			b.Fatal(err)
		}
	}
}
