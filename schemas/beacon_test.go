package schemas

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// wire builds binary beacons by hand, so that tests pin the byte layout
// independently of the encoder.
type wire []byte

func (w wire) uv(v uint64) wire    { return binary.AppendUvarint(w, v) }
func (w wire) str(s string) wire   { return append(w.uv(uint64(len(s))), s...) }
func (w wire) lit(s string) wire   { return w.uv(0).str(s) } // a dictionary literal
func (w wire) ts(ms int64) wire    { return binary.AppendVarint(w, ms) }
func (w wire) raw(s string) wire   { return append(w, s...) }
func header(id string, n int) wire { return wire("TKB\x01").str(id).uv(uint64(n)) }

// sampleBeacon has repeated types, countries and regions (dictionary
// references), empty optional fields and a sub-millisecond ts.
func sampleBeacon() *Beacon {
	t0 := time.Date(2026, 11, 30, 10, 0, 1, 234_000_000, time.UTC)
	return &Beacon{
		BeaconID: "b-1",
		Events: []Event{
			{EventID: "e1", Type: "video", Item: "v_42", User: "u_7", TS: t0, Country: "IN", Region: "IN-MH"},
			{EventID: "e2", Type: "video", Item: "v_43", User: "u_7", TS: t0.Add(time.Millisecond), Country: "IN", Region: "IN-MH"},
			{EventID: "e3", Type: "hashtag", Item: "#go", TS: t0.Add(2 * time.Second), Country: "IN", Region: "IN-KA"},
			{EventID: "e4", Type: "video", Item: "v_42", TS: t0.Add(-time.Hour)},
			{EventID: "e5", Type: "search", Item: "q", TS: t0.Add(1500 * time.Microsecond).In(time.FixedZone("X", 3600)), Country: "US"},
		},
	}
}

// msUTC is what the binary format keeps of a ts: milliseconds, in UTC; the
// zero time and the Unix epoch (the missing-ts marker) decode as zero.
func msUTC(t time.Time) time.Time {
	if t.IsZero() || t.UnixMilli() == 0 {
		return time.Time{}
	}
	return time.UnixMilli(t.UnixMilli()).UTC()
}

func wantDecoded(b *Beacon) []Event {
	out := make([]Event, len(b.Events))
	for i, e := range b.Events {
		e.TS = msUTC(e.TS)
		out[i] = e
	}
	return out
}

// sameEvents compares field by field, ts by ==, so a location or monotonic
// reading difference fails too (decoded times are always plain UTC).
func sameEvents(t *testing.T, got, want []Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("event %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

// TestBeaconRoundTrip checks that MarshalBeacon then UnmarshalBeacon, and
// MarshalBeacon then BeaconReader, give back every event exactly, with ts cut
// to the millisecond and in UTC.
func TestBeaconRoundTrip(t *testing.T) {
	b := sampleBeacon()
	data, err := MarshalBeacon(b)
	if err != nil {
		t.Fatal(err)
	}
	var got Beacon
	if err := UnmarshalBeacon(data, &got); err != nil {
		t.Fatal(err)
	}
	if got.BeaconID != b.BeaconID {
		t.Errorf("beacon_id %q, want %q", got.BeaconID, b.BeaconID)
	}
	sameEvents(t, got.Events, wantDecoded(b))

	var r BeaconReader
	if err := r.Reset(data); err != nil {
		t.Fatal(err)
	}
	if r.BeaconID() != "b-1" || r.Len() != len(b.Events) {
		t.Errorf("header: id %q len %d", r.BeaconID(), r.Len())
	}
	var evs []Event
	var e Event
	for r.Next(&e) {
		evs = append(evs, e)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	sameEvents(t, evs, wantDecoded(b))

	// An empty beacon round-trips too.
	data, err = MarshalBeacon(&Beacon{})
	if err != nil {
		t.Fatal(err)
	}
	if err := UnmarshalBeacon(data, &got); err != nil || got.BeaconID != "" || len(got.Events) != 0 {
		t.Errorf("empty beacon: %+v, %v", got, err)
	}
}

// TestBeaconGolden pins version 1 of the byte layout: strings are uvarint
// length + bytes, type/country/region share one dictionary (0 = literal, r =
// entry r-1), ts is a zig-zag varint of Unix milliseconds.
func TestBeaconGolden(t *testing.T) {
	t0 := time.UnixMilli(1_764_496_800_000).UTC()
	b := &Beacon{BeaconID: "b", Events: []Event{
		{EventID: "e1", Type: "video", Item: "x", TS: t0, Country: "IN", Region: "IN-MH"},
		{EventID: "e2", Type: "video", Item: "y", User: "u", TS: t0, Country: "IN"},
		{EventID: "e3", Type: "tag", Item: "IN"}, // item is not a ref; missing ts is 0
	}}
	want := header("b", 3).
		str("e1").str("x").str("").lit("video").lit("IN").lit("IN-MH").ts(1_764_496_800_000).
		str("e2").str("y").str("u").uv(1).uv(2).lit("").ts(1_764_496_800_000).
		str("e3").str("IN").str("").lit("tag").uv(4).uv(4).ts(0)
	got, err := MarshalBeacon(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoding\n got % x\nwant % x", got, []byte(want))
	}
	var back Beacon
	if err := UnmarshalBeacon(want, &back); err != nil {
		t.Fatal(err)
	}
	sameEvents(t, back.Events, wantDecoded(b))
}

// TestBeaconReaderZeroCopy checks that the strings BeaconReader yields point
// into the input (no copy) and that UnmarshalBeacon's strings do not (a copy
// survives the input being overwritten).
func TestBeaconReaderZeroCopy(t *testing.T) {
	data, err := MarshalBeacon(sampleBeacon())
	if err != nil {
		t.Fatal(err)
	}
	inData := func(s string) bool {
		if s == "" {
			return true
		}
		p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
		lo := uintptr(unsafe.Pointer(&data[0]))
		return p >= lo && p+uintptr(len(s)) <= lo+uintptr(len(data))
	}
	var r BeaconReader
	if err := r.Reset(data); err != nil {
		t.Fatal(err)
	}
	if !inData(r.BeaconID()) {
		t.Error("BeaconID copied")
	}
	var e Event
	for r.Next(&e) {
		for _, s := range []string{e.EventID, e.Item, e.User, e.Type, e.Country, e.Region} {
			if !inData(s) {
				t.Errorf("%q does not point into the input", s)
			}
		}
	}
	if r.Err() != nil {
		t.Fatal(r.Err())
	}

	var b Beacon
	if err := UnmarshalBeacon(data, &b); err != nil {
		t.Fatal(err)
	}
	clear(data)
	sameEvents(t, b.Events, wantDecoded(sampleBeacon()))
	if b.BeaconID != "b-1" {
		t.Errorf("beacon_id %q changed with the input", b.BeaconID)
	}
}

// TestBeaconReaderReuse checks that Reset forgets the previous beacon: its
// error and its dictionary (a reference into the old dictionary fails).
func TestBeaconReaderReuse(t *testing.T) {
	var r BeaconReader
	if err := r.Reset([]byte("nope")); err == nil {
		t.Fatal("bad magic accepted")
	}
	good, _ := MarshalBeacon(sampleBeacon())
	if err := r.Reset(good); err != nil {
		t.Fatalf("Reset after an error: %v", err)
	}
	var e Event
	n := 0
	for r.Next(&e) {
		n++
	}
	if r.Err() != nil || n != 5 {
		t.Fatalf("read %d events, err %v", n, r.Err())
	}
	// Ref 1 was "video" in the previous beacon; here the dictionary is empty.
	stale := header("", 1).str("e").str("i").str("").uv(1).uv(1).uv(1).ts(1)
	if err := r.Reset(stale); err != nil {
		t.Fatal(err)
	}
	if r.Next(&e) || !errors.Is(r.Err(), ErrBadBeacon) || !strings.Contains(r.Err().Error(), "dictionary reference 1 beyond 0 entries") {
		t.Errorf("stale dictionary reference: err %v", r.Err())
	}
}

// TestBeaconTimestamps documents what the format keeps of a ts: Unix
// milliseconds (sub-millisecond digits dropped, instants before 1970 floored),
// always UTC on decode, 0 meaning missing, so the Unix epoch itself decodes
// as a missing ts.
func TestBeaconTimestamps(t *testing.T) {
	tests := []struct {
		in, want time.Time
	}{
		{time.Time{}, time.Time{}},
		{time.Date(2026, 11, 30, 10, 0, 0, 999_999_999, time.UTC), time.Date(2026, 11, 30, 10, 0, 0, 999_000_000, time.UTC)},
		{time.Date(1969, 12, 31, 23, 59, 59, 999_500_000, time.UTC), time.Date(1969, 12, 31, 23, 59, 59, 999_000_000, time.UTC)},
		{time.Date(1, 1, 1, 0, 0, 0, 1_000_000, time.UTC), time.Date(1, 1, 1, 0, 0, 0, 1_000_000, time.UTC)},
		{time.Date(2026, 1, 1, 12, 0, 0, 0, time.FixedZone("IST", 19800)), time.Date(2026, 1, 1, 6, 30, 0, 0, time.UTC)},
		{time.Unix(0, 0), time.Time{}}, // the epoch is the missing-ts marker
		{time.Unix(0, 1e6), time.UnixMilli(1).UTC()},
	}
	for _, tc := range tests {
		data, err := MarshalBeacon(&Beacon{Events: []Event{{EventID: "e", Type: "t", Item: "i", TS: tc.in}}})
		if err != nil {
			t.Fatal(err)
		}
		var b Beacon
		if err := UnmarshalBeacon(data, &b); err != nil {
			t.Fatal(err)
		}
		if got := b.Events[0].TS; got != tc.want {
			t.Errorf("ts %v decodes as %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestMarshalBeaconLimits checks that the encoder refuses exactly what the
// decoder would refuse (so whatever it writes can be read) and that
// AppendBeacon leaves dst as it was on error.
func TestMarshalBeaconLimits(t *testing.T) {
	ok := func() Event { return Event{EventID: "e", Type: "t", Item: "i", TS: testNow} }
	long := func(n int) string { return strings.Repeat("a", n) }
	tests := []struct {
		name string
		b    Beacon
		want string // "" = accepted
	}{
		{"at every limit", Beacon{BeaconID: long(MaxBeaconIDLen), Events: []Event{{
			EventID: long(MaxEventIDLen), Item: long(MaxItemLen), User: long(MaxUserLen),
			Type: long(MaxTypeLen), Country: "AB", Region: long(MaxRegionLen)}}}, ""},
		{"too many events", Beacon{Events: make([]Event, MaxBeaconEvents+1)}, "10001 events, more than 10000"},
		{"beacon_id", Beacon{BeaconID: long(MaxBeaconIDLen + 1)}, "beacon_id is 129 bytes"},
		{"event_id", Beacon{Events: []Event{ok(), {EventID: long(MaxEventIDLen + 1)}}}, "event 1: event_id is 129 bytes"},
		{"item", Beacon{Events: []Event{{Item: long(MaxItemLen + 1)}}}, "event 0: item is 257 bytes"},
		{"user", Beacon{Events: []Event{{User: long(MaxUserLen + 1)}}}, "event 0: user is 129 bytes"},
		{"type", Beacon{Events: []Event{{Type: long(MaxTypeLen + 1)}}}, "event 0: type is 33 bytes"},
		{"country", Beacon{Events: []Event{{Country: "IND"}}}, "event 0: country is 3 bytes, more than 2"},
		{"region", Beacon{Events: []Event{{Region: long(MaxRegionLen + 1)}}}, "event 0: region is 17 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prefix := []byte("keep")
			got, err := AppendBeacon(prefix, &tc.b)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.HasPrefix(got, prefix) {
					t.Error("dst prefix lost")
				}
				var back Beacon
				if err := UnmarshalBeacon(got[len(prefix):], &back); err != nil {
					t.Fatalf("encoder wrote what the decoder refuses: %v", err)
				}
				sameEvents(t, back.Events, wantDecoded(&tc.b))
				return
			}
			if !errors.Is(err, ErrBadBeacon) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want ErrBadBeacon mentioning %q", err, tc.want)
			}
			if string(got) != "keep" {
				t.Errorf("dst on error = %q, want it unchanged", got)
			}
		})
	}
}

// TestBeaconDecodeErrors checks that structurally bad input is rejected with
// ErrBadBeacon and a reason, at Reset (header) or at Next (events), and that
// the reader then stops.
func TestBeaconDecodeErrors(t *testing.T) {
	ev := func(w wire) wire { return w.str("e").str("i").str("").lit("t").lit("").uv(2).ts(5) }
	long := func(n int) string { return strings.Repeat("a", n) }
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "missing TKB magic"},
		{"short", []byte("TK"), "missing TKB magic"},
		{"bad magic", []byte("TKX\x01\x00\x00"), "missing TKB magic"},
		{"json instead", []byte(`{"beacon_id":""}`), "missing TKB magic"},
		{"version 0", []byte("TKB\x00\x00\x00"), "unknown version 0"},
		{"version 2", []byte("TKB\x02\x00\x00"), "unknown version 2"},
		{"header only", []byte("TKB\x01"), "truncated or overlong varint"},
		{"no event count", wire("TKB\x01").str("b"), "truncated or overlong varint"},
		{"beacon_id too long", wire("TKB\x01").str(long(MaxBeaconIDLen + 1)).uv(0), "string of 129 bytes, more than 128"},
		{"beacon_id truncated", wire("TKB\x01").uv(5).raw("ab"), "truncated string"},
		{"too many events", header("", MaxBeaconEvents+1), "10001 events, more than 10000"},
		{"overlong varint", wire("TKB\x01").raw("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"), "truncated or overlong varint"},
		{"huge string length", wire("TKB\x01").uv(1 << 63), "more than 128"},
		{"over MaxBeaconBytes", append(header("", 0), make([]byte, MaxBeaconBytes)...), "more than 8388608"},
		{"trailing bytes", append(ev(header("", 1)), 0), "1 trailing bytes"},
		{"trailing bytes, no events", append(header("", 0), 1, 2), "2 trailing bytes"},
		{"fewer events than announced", ev(header("", 2)), "truncated or overlong varint"},
		{"event_id too long", header("", 1).str(long(MaxEventIDLen + 1)), "string of 129 bytes, more than 128"},
		{"item too long", header("", 1).str("e").str(long(MaxItemLen + 1)), "string of 257 bytes, more than 256"},
		{"user too long", header("", 1).str("e").str("i").str(long(MaxUserLen + 1)), "string of 129 bytes, more than 128"},
		{"type too long", header("", 1).str("e").str("i").str("").lit(long(MaxTypeLen + 1)), "string of 33 bytes, more than 32"},
		{"country too long", header("", 1).str("e").str("i").str("").lit("t").lit("IND"), "string of 3 bytes, more than 2"},
		{"region too long", header("", 1).str("e").str("i").str("").lit("t").lit("").lit(long(MaxRegionLen + 1)), "string of 17 bytes, more than 16"},
		{"ref beyond dictionary", header("", 1).str("e").str("i").str("").uv(1), "dictionary reference 1 beyond 0 entries"},
		{"type used as country", header("", 1).str("e").str("i").str("").lit("video").uv(1), "dictionary entry of 5 bytes used where at most 2 allowed"},
		{"truncated ts", header("", 1).str("e").str("i").str("").lit("t").lit("").uv(2), "truncated ts"},
		{"overlong ts", header("", 1).str("e").str("i").str("").lit("t").lit("").uv(2).raw("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"), "truncated ts"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b Beacon
			err := UnmarshalBeacon(tc.data, &b)
			if !errors.Is(err, ErrBadBeacon) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("UnmarshalBeacon: err %v, want ErrBadBeacon mentioning %q", err, tc.want)
			}
			var r BeaconReader
			if r.Reset(tc.data) == nil {
				var e Event
				for r.Next(&e) {
				}
			}
			if r.Err() == nil || r.Err().Error() != err.Error() {
				t.Errorf("reader err %v, UnmarshalBeacon err %v", r.Err(), err)
			}
			var e Event
			if r.Next(&e) {
				t.Error("Next after an error returned an event")
			}
		})
	}
}

// TestBeaconTruncated checks that every proper prefix of a valid beacon is
// rejected (never read as a shorter valid beacon, never a panic).
func TestBeaconTruncated(t *testing.T) {
	data, err := MarshalBeacon(sampleBeacon())
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(data); n++ {
		var b Beacon
		if err := UnmarshalBeacon(data[:n:n], &b); !errors.Is(err, ErrBadBeacon) {
			t.Errorf("prefix of %d/%d bytes: err %v, want ErrBadBeacon", n, len(data), err)
		}
	}
}

// TestBeaconMaxEvents checks the largest beacon by count: MaxBeaconEvents
// events encode and decode.
func TestBeaconMaxEvents(t *testing.T) {
	b := &Beacon{Events: make([]Event, MaxBeaconEvents)}
	for i := range b.Events {
		b.Events[i] = Event{EventID: fmt.Sprint(i), Type: "video", Item: fmt.Sprint("v", i%97), TS: testNow}
	}
	data, err := MarshalBeacon(b)
	if err != nil {
		t.Fatal(err)
	}
	var back Beacon
	if err := UnmarshalBeacon(data, &back); err != nil {
		t.Fatal(err)
	}
	sameEvents(t, back.Events, wantDecoded(b))
}

// TestBeaconReaderAllocs checks the hot-path promise: a reused BeaconReader
// allocates nothing per event (nor per beacon) once warmed up.
func TestBeaconReaderAllocs(t *testing.T) {
	b := &Beacon{BeaconID: "b", Events: make([]Event, 1000)}
	for i := range b.Events {
		b.Events[i] = Event{EventID: fmt.Sprint("e", i), Type: [...]string{"video", "hashtag", "search"}[i%3],
			Item: fmt.Sprint("v", i%50), User: "u", TS: testNow.Add(time.Duration(i) * time.Millisecond),
			Country: [...]string{"", "IN", "US"}[i%3], Region: [...]string{"", "IN-MH", "US-CA"}[i%3]}
	}
	data, err := MarshalBeacon(b)
	if err != nil {
		t.Fatal(err)
	}
	var r BeaconReader
	var e Event
	n := 0
	allocs := testing.AllocsPerRun(100, func() {
		if err := r.Reset(data); err != nil {
			t.Fatal(err)
		}
		for r.Next(&e) {
			n++
		}
		if r.Err() != nil {
			t.Fatal(r.Err())
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per beacon of %d events, want 0", allocs, len(b.Events))
	}
	if n != 101*len(b.Events) {
		t.Errorf("read %d events, want %d", n, 101*len(b.Events))
	}
}

// TestParseBeaconJSON checks the ingest body decoder: a valid body decodes;
// unknown fields (at either level), trailing data of any kind, non-objects,
// an over-long beacon_id and too many events are rejected with ErrBadBeacon.
func TestParseBeaconJSON(t *testing.T) {
	body := `{"beacon_id":"b-1","events":[` +
		`{"event_id":"e1","type":"video","item":"v_42","ts":"2026-11-30T10:00:01.234Z","country":"IN","region":"IN-MH"},` +
		`{"event_id":"e2","type":"video","item":"v_43","user":"u","ts":"2026-11-30T15:30:01+05:30"}]}` + "\n"
	b, err := ParseBeaconJSON([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := []Event{
		{EventID: "e1", Type: "video", Item: "v_42", TS: time.Date(2026, 11, 30, 10, 0, 1, 234e6, time.UTC), Country: "IN", Region: "IN-MH"},
		{EventID: "e2", Type: "video", Item: "v_43", User: "u", TS: time.Date(2026, 11, 30, 10, 0, 1, 0, time.UTC)},
	}
	if b.BeaconID != "b-1" || len(b.Events) != 2 || !eventsEqual(b.Events[0], want[0]) || !eventsEqual(b.Events[1], want[1]) {
		t.Errorf("got %+v", b)
	}

	many := `{"events":[` + strings.Repeat(`{},`, MaxBeaconEvents) + `{}]}`
	bad := []struct{ name, in, why string }{
		{"empty", ``, "empty input"},
		{"null", `null`, "not a JSON object"},
		{"array", `[]`, "not a JSON object"},
		{"unknown top-level field", `{"beacon_id":"b","extra":1}`, `unknown field "extra"`},
		{"unknown event field", `{"events":[{"timestamp":"2026-11-30T10:00:00Z"}]}`, `unknown field "timestamp"`},
		{"trailing bracket", `{"beacon_id":"b","events":[]}]`, "data after the object"},
		{"trailing brace", `{"beacon_id":"b"}}`, "data after the object"},
		{"second object", `{"beacon_id":"b"} {"beacon_id":"c"}`, "data after the object"},
		{"trailing garbage", `{"beacon_id":"b"}x`, "data after the object"},
		{"truncated", `{"beacon_id":"b","events":[`, "unexpected EOF"},
		{"events not an array", `{"events":{}}`, "cannot unmarshal"},
		{"beacon_id too long", `{"beacon_id":"` + strings.Repeat("a", MaxBeaconIDLen+1) + `"}`, "beacon_id is 129 bytes, more than 128"},
		{"too many events", many, "10001 events, more than 10000"},
	}
	for _, tc := range bad {
		_, err := ParseBeaconJSON([]byte(tc.in))
		if !errors.Is(err, ErrBadBeacon) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%s: err %v, want ErrBadBeacon mentioning %q", tc.name, err, tc.why)
		}
	}
}

// TestUnmarshalBeaconSmallInputSmallAlloc checks that a few bytes announcing
// MaxBeaconEvents events do not make UnmarshalBeacon allocate room for them
// (about 1.4 MB): memory follows the input's size, not its claims.
func TestUnmarshalBeaconSmallInputSmallAlloc(t *testing.T) {
	data := header("", MaxBeaconEvents)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 10 {
		var b Beacon
		if err := UnmarshalBeacon(data, &b); !errors.Is(err, ErrBadBeacon) {
			t.Fatalf("err %v", err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / 10; per > 64<<10 {
		t.Errorf("%d bytes allocated per 6-byte beacon, want < 64 KiB", per)
	}
}
