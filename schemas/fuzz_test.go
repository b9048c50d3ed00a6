package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// Fuzz tests for every decoder in this package (STYLE.md point 10). Each
// checks that arbitrary input never panics and is either rejected with the
// package's sentinel error or decodes to a value that survives a round trip
// through the matching encoder unchanged. Seed inputs are added here and
// committed under testdata/fuzz/<FuzzName>/, with every crasher found kept
// there as a regression case.

// beaconSeeds are binary beacons the fuzzers mutate: valid ones of several
// shapes and a few near misses.
func beaconSeeds(f *testing.F) [][]byte {
	f.Helper()
	var seeds [][]byte
	for _, b := range []*Beacon{
		{},
		sampleBeacon(),
		{BeaconID: "b", Events: []Event{{EventID: "e", Type: "t", Item: "i"}}},
		{BeaconID: strings.Repeat("b", MaxBeaconIDLen), Events: []Event{{
			EventID: strings.Repeat("e", MaxEventIDLen), Item: strings.Repeat("i", MaxItemLen),
			User: strings.Repeat("u", MaxUserLen), Type: strings.Repeat("t", MaxTypeLen),
			Country: "ZZ", Region: "ZZ-" + strings.Repeat("9", MaxRegionLen-3),
			TS: time.UnixMilli(-1 << 62)}}},
	} {
		data, err := MarshalBeacon(b)
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, data)
	}
	seeds = append(seeds,
		nil,
		[]byte("TKB\x01"),
		[]byte("TKB\x02\x00\x00"),
		header("", 1).str("e").str("i").str("").lit("video").uv(1).uv(1).ts(1),
		append(header("", 0), 0),
	)
	return seeds
}

// copyEvent detaches e from the reader's input.
func copyEvent(e Event) Event {
	e.EventID = strings.Clone(e.EventID)
	e.Item = strings.Clone(e.Item)
	e.User = strings.Clone(e.User)
	e.Type = strings.Clone(e.Type)
	e.Country = strings.Clone(e.Country)
	e.Region = strings.Clone(e.Region)
	return e
}

// checkBeaconRoundTrip re-encodes a decoded beacon and checks that it decodes
// to the same beacon, and that the encoding is canonical: encoding the
// second decode gives the same bytes.
func checkBeaconRoundTrip(t *testing.T, id string, events []Event) {
	t.Helper()
	enc, err := MarshalBeacon(&Beacon{BeaconID: id, Events: events})
	if err != nil {
		t.Fatalf("decoded beacon does not re-encode: %v", err)
	}
	var back Beacon
	if err := UnmarshalBeacon(enc, &back); err != nil {
		t.Fatalf("re-encoded beacon does not decode: %v", err)
	}
	if back.BeaconID != id {
		t.Fatalf("beacon_id %q after round trip, was %q", back.BeaconID, id)
	}
	sameEvents(t, back.Events, events)
	enc2, err := MarshalBeacon(&back)
	if err != nil || !bytes.Equal(enc, enc2) {
		t.Fatalf("encoding not canonical: %v\n% x\n% x", err, enc, enc2)
	}
}

// FuzzBeaconReader checks the zero-copy reader on arbitrary bytes: no panic;
// errors wrap ErrBadBeacon; it agrees with UnmarshalBeacon (same events, same
// error); a reader reused after another beacon behaves like a fresh one; and a
// beacon it reads fully re-encodes and decodes to the same events.
func FuzzBeaconReader(f *testing.F) {
	for _, s := range beaconSeeds(f) {
		f.Add(s)
	}
	warm, err := MarshalBeacon(sampleBeacon())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r BeaconReader
		// Warm the reader with another beacon so reuse is exercised.
		if err := r.Reset(warm); err != nil {
			t.Fatal(err)
		}
		var e Event
		for r.Next(&e) {
		}
		if r.Err() != nil {
			t.Fatal(r.Err())
		}

		var events []Event
		var id string
		err := r.Reset(data)
		if err == nil {
			id = strings.Clone(r.BeaconID())
			for r.Next(&e) {
				events = append(events, copyEvent(e))
			}
			err = r.Err()
			if err == nil && len(events) != r.Len() {
				t.Fatalf("read %d events, header announced %d", len(events), r.Len())
			}
		}
		if err != nil && !errors.Is(err, ErrBadBeacon) {
			t.Fatalf("error %v does not wrap ErrBadBeacon", err)
		}

		var b Beacon
		uerr := UnmarshalBeacon(data, &b)
		if (err == nil) != (uerr == nil) || (err != nil && err.Error() != uerr.Error()) {
			t.Fatalf("reader err %v, UnmarshalBeacon err %v", err, uerr)
		}
		// Before an error, both yield the same well-formed prefix of events.
		sameEvents(t, b.Events, events)
		if err != nil {
			return
		}
		checkBeaconRoundTrip(t, id, events)
	})
}

// FuzzUnmarshalBeacon checks UnmarshalBeacon on arbitrary bytes: no panic;
// errors wrap ErrBadBeacon; a decoded beacon is within the format's limits,
// re-encodes, and decodes again to the same events (lossless, canonical).
func FuzzUnmarshalBeacon(f *testing.F) {
	for _, s := range beaconSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var b Beacon
		if err := UnmarshalBeacon(data, &b); err != nil {
			if !errors.Is(err, ErrBadBeacon) {
				t.Fatalf("error %v does not wrap ErrBadBeacon", err)
			}
			return
		}
		if len(b.BeaconID) > MaxBeaconIDLen || len(b.Events) > MaxBeaconEvents {
			t.Fatalf("decoded beacon beyond limits: id %d bytes, %d events", len(b.BeaconID), len(b.Events))
		}
		for _, e := range b.Events {
			if len(e.EventID) > MaxEventIDLen || len(e.Item) > MaxItemLen || len(e.User) > MaxUserLen ||
				len(e.Type) > MaxTypeLen || len(e.Country) > 2 || len(e.Region) > MaxRegionLen {
				t.Fatalf("decoded event beyond limits: %+v", e)
			}
			if !e.TS.IsZero() && e.TS.Location() != time.UTC {
				t.Fatalf("decoded ts %v not in UTC", e.TS)
			}
		}
		checkBeaconRoundTrip(t, b.BeaconID, b.Events)
	})
}

// FuzzMarshalBeacon checks the encoder on arbitrary field values: it either
// refuses with ErrBadBeacon (a field beyond the decoder's limits) or writes a
// beacon that decodes to the same events, ts cut to UTC milliseconds.
func FuzzMarshalBeacon(f *testing.F) {
	f.Add("b-1", "e1", "video", "v_42", "u_7", "IN", "IN-MH", int64(1_764_496_801_234), uint8(3))
	f.Add("", "", "", "", "", "", "", int64(0), uint8(1))
	f.Add("b", "e", "t", "i", "", "", "", int64(-1), uint8(200))
	f.Fuzz(func(t *testing.T, id, eventID, typ, item, user, country, region string, ms int64, n uint8) {
		b := &Beacon{BeaconID: id}
		for i := range int(n) {
			// Vary fields by position so references and literals mix.
			e := Event{EventID: eventID, Type: typ, Item: item, User: user, Country: country, Region: region}
			if ms != 0 {
				e.TS = time.UnixMilli(ms + int64(i))
			}
			switch i % 3 {
			case 1:
				e.Type, e.Country = country, typ
			case 2:
				e.Region, e.Type = typ, region
			}
			b.Events = append(b.Events, e)
		}
		data, err := MarshalBeacon(b)
		if err != nil {
			if !errors.Is(err, ErrBadBeacon) {
				t.Fatalf("error %v does not wrap ErrBadBeacon", err)
			}
			return
		}
		var back Beacon
		if err := UnmarshalBeacon(data, &back); err != nil {
			t.Fatalf("encoder wrote what the decoder refuses: %v", err)
		}
		if back.BeaconID != id {
			t.Fatalf("beacon_id %q, want %q", back.BeaconID, id)
		}
		sameEvents(t, back.Events, wantDecoded(b))
	})
}

// FuzzParseBeaconJSON checks the ingest body decoder: no panic; errors wrap
// ErrBadBeacon; a decoded beacon is within the count and id limits, survives
// a JSON round trip unchanged, and, if the binary encoder takes it, decodes
// from binary to the same events up to the binary format's ts precision.
func FuzzParseBeaconJSON(f *testing.F) {
	f.Add([]byte(`{"beacon_id":"b-1","events":[{"event_id":"e1","type":"video","item":"v_42","user":"u_7","ts":"2026-11-30T10:00:01.234Z","country":"IN","region":"IN-MH"},{"event_id":"e2","type":"video","item":"v_43","ts":"2026-11-30T15:30:01.5+05:30"}]}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"beacon_id":"b","events":null}`))
	f.Add([]byte(`{"beacon_id":"b","events":[]}]`))
	f.Add([]byte(`{"events":[{"timestamp":"2026-11-30T10:00:00Z"}]}`))
	f.Add([]byte(`{"events":[{"ts":"1970-01-01T00:00:00Z"}]} `))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := ParseBeaconJSON(data)
		if err != nil {
			if !errors.Is(err, ErrBadBeacon) {
				t.Fatalf("error %v does not wrap ErrBadBeacon", err)
			}
			return
		}
		if len(b.BeaconID) > MaxBeaconIDLen || len(b.Events) > MaxBeaconEvents {
			t.Fatalf("beacon beyond limits accepted")
		}
		enc, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("decoded beacon does not re-encode: %v", err)
		}
		back, err := ParseBeaconJSON(enc)
		if err != nil {
			t.Fatalf("re-encoded beacon %s does not decode: %v", enc, err)
		}
		if back.BeaconID != b.BeaconID || len(back.Events) != len(b.Events) {
			t.Fatalf("JSON round trip changed the beacon: %+v vs %+v", back, b)
		}
		for i := range b.Events {
			if !eventsEqual(back.Events[i], b.Events[i]) {
				t.Fatalf("event %d: %+v after JSON round trip, was %+v", i, back.Events[i], b.Events[i])
			}
		}

		bin, err := MarshalBeacon(b)
		if err != nil {
			if !errors.Is(err, ErrBadBeacon) {
				t.Fatalf("error %v does not wrap ErrBadBeacon", err)
			}
			return
		}
		var fromBin Beacon
		if err := UnmarshalBeacon(bin, &fromBin); err != nil {
			t.Fatalf("binary form of a JSON beacon does not decode: %v", err)
		}
		sameEvents(t, fromBin.Events, wantDecoded(b))
	})
}

// FuzzParseEventJSON checks the NDJSON line decoder: no panic; errors wrap
// ErrInvalidEvent; a decoded event survives a JSON round trip unchanged, and
// the validators run on it without panicking, giving ErrInvalidEvent or nil.
func FuzzParseEventJSON(f *testing.F) {
	f.Add([]byte(`{"event_id":"e-123","type":"video","item":"v_42","user":"u_7","ts":"2026-11-30T10:00:01.234Z","country":"IN","region":"IN-MH"}`))
	f.Add([]byte(`{"event_id":"e","type":"t","item":"i","ts":"2026-11-30T10:00:00+05:30"}` + "\r\n"))
	f.Add([]byte(`{"event_id":"x"}]`))
	f.Add([]byte(`{"region":"IN-MH"}`))
	f.Add([]byte(`{"item":"\u00e9\ud800","ts":"0001-01-01T00:00:00Z"}`))
	f.Add([]byte(`null`))
	live := DefaultValidator()
	typed := Validator{Types: map[string]bool{"video": true}}
	f.Fuzz(func(t *testing.T, data []byte) {
		var e Event
		if err := ParseEventJSON(data, &e); err != nil {
			if !errors.Is(err, ErrInvalidEvent) {
				t.Fatalf("error %v does not wrap ErrInvalidEvent", err)
			}
			return
		}
		enc, err := json.Marshal(&e)
		if err != nil {
			t.Fatalf("decoded event does not re-encode: %v", err)
		}
		var back Event
		if err := ParseEventJSON(enc, &back); err != nil {
			t.Fatalf("re-encoded event %s does not decode: %v", enc, err)
		}
		if !eventsEqual(back, e) {
			t.Fatalf("JSON round trip: %+v, was %+v", back, e)
		}
		for _, v := range []Validator{{}, live, typed} {
			if err := v.Validate(&e, testNow); err != nil && !errors.Is(err, ErrInvalidEvent) {
				t.Fatalf("Validate error %v does not wrap ErrInvalidEvent", err)
			}
		}
	})
}

// FuzzUnmarshalList checks the list decoder: no panic; errors wrap
// ErrBadList; a list it accepts meets every invariant (checked here
// independently of Check) and re-encodes to JSON that decodes to the same
// list.
func FuzzUnmarshalList(f *testing.F) {
	good, err := MarshalList(validList())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"type":"video","scope":"IN-MH","window":"all","as_of":"2026-11-30T10:42:00Z","exact_until":null,"max_overcount":0,"complete":false,"certified_k":0,"version":1,"stale":true,"items":[]}`))
	f.Add([]byte(`{"type":"video","scope":"global","window":"1m","as_of":"2026-11-30T10:42:00Z","max_overcount":18446744073709551615,"certified_k":1,"items":[{"rank":1,"item":"a","count":18446744073709551615,"lower":0}]}`))
	f.Add([]byte(`{"type":"video","scope":"global","window":"1h","as_of":"2026-11-30T10:42:00Z","items":[{"rank":1,"item":"a","count":2},{"rank":2,"item":"a","count":1}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := UnmarshalList(data)
		if err != nil {
			if !errors.Is(err, ErrBadList) {
				t.Fatalf("error %v does not wrap ErrBadList", err)
			}
			return
		}
		if l.Key().Validate() != nil || l.AsOf.IsZero() || l.CertifiedK < 0 || l.CertifiedK > len(l.Items) {
			t.Fatalf("accepted a list with a bad header: %+v", l)
		}
		seen := map[string]bool{}
		for i, e := range l.Items {
			if e.Rank != i+1 || e.Item == "" || seen[e.Item] || e.Lower > e.Count || e.Count-e.Lower > l.MaxOvercount ||
				(i > 0 && e.Count > l.Items[i-1].Count) {
				t.Fatalf("accepted a list breaking an invariant at entry %d: %+v", i, l)
			}
			seen[e.Item] = true
		}
		enc, err := MarshalList(l)
		if err != nil {
			t.Fatalf("accepted list does not re-encode: %v", err)
		}
		back, err := UnmarshalList(enc)
		if err != nil {
			t.Fatalf("re-encoded list %s does not decode: %v", enc, err)
		}
		enc2, err := MarshalList(back)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("list JSON round trip not stable (%v):\n%s\n%s", err, enc, enc2)
		}
	})
}

// FuzzListHeader: arbitrary bytes give an error or a valid key with a
// positive version, never a panic; on a list that decodes in full, the
// header agrees with it.
func FuzzListHeader(f *testing.F) {
	f.Add([]byte(`{"type":"video","scope":"global","window":"1h","as_of":"2026-11-30T10:00:00Z","version":1,"items":[]}`))
	f.Add([]byte(`{"items":[],"version":3,"as_of":"2026-11-30T10:00:00Z","window":"5m","scope":"IN","type":"video"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		k, v, _, err := ListHeader(data)
		if err != nil {
			return
		}
		if k.Validate() != nil || v <= 0 {
			t.Fatalf("header %v v%d accepted", k, v)
		}
		if l, err := UnmarshalList(data); err == nil && (l.Key() != k || l.Version != v) {
			t.Fatalf("header %v v%d, list %v v%d", k, v, l.Key(), l.Version)
		}
	})
}

// FuzzParseEventFast: wherever the fast decoder of event lines accepts an
// input, encoding/json (the decoder it stands in for) accepts it too and
// gives the same event, to the time zone; every seed below is one the
// fast decoder declines or decodes.
func FuzzParseEventFast(f *testing.F) {
	for _, s := range []string{
		`{"event_id":"e-123","type":"video","item":"v_42","user":"u_7","ts":"2026-11-30T10:00:01.234Z","country":"IN","region":"IN-MH"}`,
		` { "event_id" : "e" , "type":"t","item":"i","ts":"2026-11-30T10:00:00+05:30" } ` + "\r\n",
		`{}`, `{ }`, `{"item":"caf\u00e9"}`, `{"item":"café"}`, "{\"item\":\"\xff\"}", "{\"item\":\"\xed\xa0\x80\"}",
		`{"ITEM":"x"}`, `{"Item":"x"}`, `{"item":null}`, `{"item":5}`, `{"ts":null}`, `{"ts":"yesterday"}`,
		`{"item":"a","item":"b"}`, `{"ts":"2026-11-30T10:00:00Z","ts":"2026-11-30T11:00:00Z"}`,
		`{"item":"a",}`, `{"item":"a"}x`, `{"item":"a"`, `{"item" "a"}`, `{"color":"red"}`, "{\"item\":\"a\tb\"}",
		`{"ts":"2026-11-30T10:00:00.123456789+01:00"}`, `{"ts":"0000-01-01T00:00:00Z"}`, `{"ts":"2026-11-30T10:00:00"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast Event
		if !parseEventFast(data, &fast) {
			return
		}
		var slow Event
		if err := decodeJSONObject(data, &slow); err != nil {
			t.Fatalf("%q: the fast decoder accepts it, encoding/json says %v", data, err)
		}
		if !eventsEqual(fast, slow) || fast.TS.Location().String() != slow.TS.Location().String() {
			t.Fatalf("%q: fast %+v, encoding/json %+v", data, fast, slow)
		}
		_, offFast := fast.TS.Zone()
		_, offSlow := slow.TS.Zone()
		if offFast != offSlow {
			t.Fatalf("%q: zone offset %d, encoding/json %d", data, offFast, offSlow)
		}
	})
}
