package schemas

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
	"unsafe"
)

// Beacon is one client's batch of events: one Pub/Sub message on the "views"
// topic, one POST /v1/events body. BeaconID lets the ingest API acknowledge a
// retried beacon without publishing it twice.
type Beacon struct {
	BeaconID string  `json:"beacon_id"`
	Events   []Event `json:"events"`
}

// Beacon limits: what one message may hold.
const (
	MaxBeaconIDLen    = 128
	MaxBeaconEvents   = 10_000
	MaxBeaconBytes    = 8 << 20 // binary form; Pub/Sub's own limit is 10 MB
	beaconMagic       = "TKB"
	beaconVersion     = 1
	beaconHeaderBytes = len(beaconMagic) + 1
	// minEventBytes is the smallest encoded event: three empty strings,
	// three refs and a ts, one byte each.
	minEventBytes = 7
)

// ErrBadBeacon is wrapped by every beacon decoding error.
var ErrBadBeacon = errors.New("bad beacon")

// MarshalBeacon encodes b in the binary beacon format, version 1:
//
//	"TKB" 0x01
//	uvarint len, beacon_id bytes
//	uvarint n (number of events, <= MaxBeaconEvents)
//	n times:
//	  str event_id, str item, str user           (uvarint len + bytes)
//	  ref type, ref country, ref region          (see below)
//	  varint ts (Unix milliseconds, zig-zag)
//
// A ref is a uvarint: 0 means a literal str follows and is appended to the
// beacon's dictionary; r > 0 means dictionary entry r-1. Types, countries and
// regions repeat within a beacon, so each is sent once. Integers are
// encoding/binary varints.
//
// The encoding does not validate content (Validator does) but enforces the
// same structural limits as the decoder, so whatever it produces decodes:
// beacon_id at most MaxBeaconIDLen bytes, at most MaxBeaconEvents events,
// each string at most its Max*Len (country 2 bytes), MaxBeaconBytes in all.
//
// ts is kept to the millisecond (sub-millisecond digits are dropped, in UTC)
// and 0 stands for a missing ts, so an event stamped exactly at the Unix
// epoch decodes with a zero TS, which Validate reports as missing.
func MarshalBeacon(b *Beacon) ([]byte, error) {
	return AppendBeacon(nil, b)
}

// AppendBeacon appends the binary form of b to dst. On error it returns dst
// unchanged (same length) and the error.
func AppendBeacon(dst []byte, b *Beacon) ([]byte, error) {
	start := len(dst)
	if err := checkBeaconLimits(b); err != nil {
		return dst, err
	}
	dst = append(dst, beaconMagic...)
	dst = append(dst, beaconVersion)
	dst = appendStr(dst, b.BeaconID)
	dst = binary.AppendUvarint(dst, uint64(len(b.Events)))
	dict := make(map[string]uint64, 8)
	ref := func(s string) {
		if r, ok := dict[s]; ok {
			dst = binary.AppendUvarint(dst, r)
			return
		}
		dict[s] = uint64(len(dict) + 1)
		dst = append(dst, 0)
		dst = appendStr(dst, s)
	}
	for i := range b.Events {
		e := &b.Events[i]
		dst = appendStr(dst, e.EventID)
		dst = appendStr(dst, e.Item)
		dst = appendStr(dst, e.User)
		ref(e.Type)
		ref(e.Country)
		ref(e.Region)
		var ms int64
		if !e.TS.IsZero() {
			ms = e.TS.UnixMilli()
		}
		dst = binary.AppendVarint(dst, ms)
	}
	if n := len(dst) - start; n > MaxBeaconBytes {
		return dst[:start], fmt.Errorf("%w: %d bytes, more than %d", ErrBadBeacon, n, MaxBeaconBytes)
	}
	return dst, nil
}

// checkBeaconLimits applies the decoder's structural limits before encoding.
func checkBeaconLimits(b *Beacon) error {
	if len(b.Events) > MaxBeaconEvents {
		return fmt.Errorf("%w: %d events, more than %d", ErrBadBeacon, len(b.Events), MaxBeaconEvents)
	}
	if len(b.BeaconID) > MaxBeaconIDLen {
		return fmt.Errorf("%w: beacon_id is %d bytes, more than %d", ErrBadBeacon, len(b.BeaconID), MaxBeaconIDLen)
	}
	for i := range b.Events {
		e := &b.Events[i]
		for _, f := range [...]struct {
			name string
			s    string
			max  int
		}{
			{"event_id", e.EventID, MaxEventIDLen},
			{"item", e.Item, MaxItemLen},
			{"user", e.User, MaxUserLen},
			{"type", e.Type, MaxTypeLen},
			{"country", e.Country, 2},
			{"region", e.Region, MaxRegionLen},
		} {
			if len(f.s) > f.max {
				return fmt.Errorf("%w: event %d: %s is %d bytes, more than %d", ErrBadBeacon, i, f.name, len(f.s), f.max)
			}
		}
	}
	return nil
}

func appendStr(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// UnmarshalBeacon decodes the binary form into b, copying every string.
func UnmarshalBeacon(data []byte, b *Beacon) error {
	var r BeaconReader
	if err := r.Reset(data); err != nil {
		return err
	}
	b.BeaconID = string([]byte(r.BeaconID()))
	// Size the slice by what the bytes can hold, not by the header alone: a
	// 7-byte message announcing MaxBeaconEvents must not allocate for them.
	b.Events = make([]Event, 0, min(r.Len(), (len(data)-r.off)/minEventBytes))
	var e Event
	for r.Next(&e) {
		e.EventID = clone(e.EventID)
		e.Item = clone(e.Item)
		e.User = clone(e.User)
		e.Type = clone(e.Type)
		e.Country = clone(e.Country)
		e.Region = clone(e.Region)
		b.Events = append(b.Events, e)
	}
	return r.Err()
}

func clone(s string) string {
	if s == "" {
		return ""
	}
	return string([]byte(s))
}

// BeaconReader decodes a binary beacon one event at a time without copying:
// the strings it yields point into the data passed to Reset, which must not be
// modified while they are in use (Pub/Sub payloads never are). Reuse one
// reader per worker: after warm-up it allocates nothing per event.
//
// hot path: once per event.
type BeaconReader struct {
	data     []byte
	off      int
	beaconID string
	n, read  int
	dict     []string
	err      error
}

// Reset starts reading data and decodes the header.
func (r *BeaconReader) Reset(data []byte) error {
	*r = BeaconReader{data: data, dict: r.dict[:0]}
	if len(data) > MaxBeaconBytes {
		return r.fail(fmt.Errorf("%d bytes, more than %d", len(data), MaxBeaconBytes))
	}
	if len(data) < beaconHeaderBytes || string(data[:len(beaconMagic)]) != beaconMagic {
		return r.fail(errors.New("missing TKB magic"))
	}
	if v := data[len(beaconMagic)]; v != beaconVersion {
		return r.fail(fmt.Errorf("unknown version %d", v))
	}
	r.off = beaconHeaderBytes
	id, ok := r.str(MaxBeaconIDLen)
	if !ok {
		return r.err
	}
	r.beaconID = id
	n, ok := r.uvarint()
	if !ok {
		return r.err
	}
	if n > MaxBeaconEvents {
		return r.fail(fmt.Errorf("%d events, more than %d", n, MaxBeaconEvents))
	}
	r.n = int(n)
	return nil
}

// BeaconID is the beacon's id (zero-copy).
func (r *BeaconReader) BeaconID() string { return r.beaconID }

// Len is the number of events the header announces.
func (r *BeaconReader) Len() int { return r.n }

// Err is the first structural error met, or nil. An error mid-beacon stops the
// reader: the events before it were well-formed, the rest are lost with the
// beacon, which goes to the dead letter output whole.
func (r *BeaconReader) Err() error { return r.err }

// Next decodes the next event into e and reports whether there was one. At
// the end it also checks that no bytes trail the last event.
func (r *BeaconReader) Next(e *Event) bool {
	if r.err != nil {
		return false
	}
	if r.read == r.n {
		if r.off != len(r.data) {
			r.fail(fmt.Errorf("%d trailing bytes", len(r.data)-r.off))
		}
		return false
	}
	var ok bool
	if e.EventID, ok = r.str(MaxEventIDLen); !ok {
		return false
	}
	if e.Item, ok = r.str(MaxItemLen); !ok {
		return false
	}
	if e.User, ok = r.str(MaxUserLen); !ok {
		return false
	}
	if e.Type, ok = r.ref(MaxTypeLen); !ok {
		return false
	}
	if e.Country, ok = r.ref(2); !ok {
		return false
	}
	if e.Region, ok = r.ref(MaxRegionLen); !ok {
		return false
	}
	ms, n := binary.Varint(r.data[r.off:])
	if n <= 0 {
		r.fail(errors.New("truncated ts"))
		return false
	}
	r.off += n
	if ms == 0 {
		e.TS = time.Time{}
	} else {
		e.TS = time.UnixMilli(ms).UTC()
	}
	r.read++
	return true
}

func (r *BeaconReader) fail(err error) error {
	if r.err == nil {
		r.err = fmt.Errorf("%w: at byte %d: %w", ErrBadBeacon, r.off, err)
	}
	return r.err
}

func (r *BeaconReader) uvarint() (uint64, bool) {
	v, n := binary.Uvarint(r.data[r.off:])
	if n <= 0 {
		r.fail(errors.New("truncated or overlong varint"))
		return 0, false
	}
	r.off += n
	return v, true
}

// str reads a length-prefixed string of at most maxLen bytes, zero-copy.
func (r *BeaconReader) str(maxLen int) (string, bool) {
	l, ok := r.uvarint()
	if !ok {
		return "", false
	}
	if l > uint64(maxLen) {
		r.fail(fmt.Errorf("string of %d bytes, more than %d", l, maxLen))
		return "", false
	}
	if l > uint64(len(r.data)-r.off) {
		r.fail(errors.New("truncated string"))
		return "", false
	}
	if l == 0 {
		return "", true
	}
	s := unsafe.String(&r.data[r.off], int(l))
	r.off += int(l)
	return s, true
}

func (r *BeaconReader) ref(maxLen int) (string, bool) {
	v, ok := r.uvarint()
	if !ok {
		return "", false
	}
	if v == 0 {
		s, ok := r.str(maxLen)
		if !ok {
			return "", false
		}
		if len(r.dict) >= 3*MaxBeaconEvents {
			r.fail(errors.New("dictionary overflow"))
			return "", false
		}
		r.dict = append(r.dict, s)
		return s, true
	}
	if v > uint64(len(r.dict)) {
		r.fail(fmt.Errorf("dictionary reference %d beyond %d entries", v, len(r.dict)))
		return "", false
	}
	s := r.dict[v-1]
	if len(s) > maxLen {
		r.fail(fmt.Errorf("dictionary entry of %d bytes used where at most %d allowed", len(s), maxLen))
		return "", false
	}
	return s, true
}

// ParseBeaconJSON decodes the JSON form of a beacon (the ingest API's body):
// exactly one JSON object, nothing after it but whitespace. Unknown fields are
// rejected so that a typo ("timestamp" for "ts") is an error and not a
// silently missing field. (encoding/json matches field names without regard
// to case, so "TS" is read as "ts".)
func ParseBeaconJSON(data []byte) (*Beacon, error) {
	var b Beacon
	if err := decodeJSONObject(data, &b); err != nil {
		return nil, fmt.Errorf("%w: json: %w", ErrBadBeacon, err)
	}
	if len(b.BeaconID) > MaxBeaconIDLen {
		return nil, fmt.Errorf("%w: beacon_id is %d bytes, more than %d", ErrBadBeacon, len(b.BeaconID), MaxBeaconIDLen)
	}
	if len(b.Events) > MaxBeaconEvents {
		return nil, fmt.Errorf("%w: %d events, more than %d", ErrBadBeacon, len(b.Events), MaxBeaconEvents)
	}
	return &b, nil
}

// ParseEventJSON decodes one NDJSON line into e: exactly one JSON object,
// unknown fields rejected. Content is not checked (see Validator).
func ParseEventJSON(line []byte, e *Event) error {
	*e = Event{}
	if parseEventFast(line, e) {
		return nil
	}
	*e = Event{}
	if err := decodeJSONObject(line, e); err != nil {
		return fmt.Errorf("%w: json: %w", ErrInvalidEvent, err)
	}
	return nil
}
