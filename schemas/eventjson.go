package schemas

import "unicode/utf8"

// parseEventFast decodes the common shape of an NDJSON event line without
// encoding/json: one flat object whose keys are Event's JSON names exactly
// and whose values are strings without escapes or control characters,
// whitespace only around them. It returns false, having possibly written
// to e, for anything else (an escape, a null, a number, a key in another
// case, an unknown key, a ts time.Time refuses, bad syntax), and the
// caller decodes the line again with encoding/json, which gives the
// result or the error: so the lines accepted and the errors given are
// encoding/json's, and this only skips its cost where the outcome is
// plain. Where it decodes, e is what encoding/json makes of the line
// (FuzzParseEventFast compares the two on every input).
//
// Why hand-written: encoding/json's Decoder (its setup, reflection over the
// struct and the field-name matching per key) was a quarter of a file
// replay's CPU (ParseEventJSON 37.9 of 145 CPU-s of a 20M-event replay,
// BENCHMARKS.md "Events decoded without reflection"); a faster general
// decoder would still have to be trusted to match encoding/json's rules
// (unknown fields, case-insensitive names, invalid UTF-8, null), where
// this one declines every case it does not handle plainly.
func parseEventFast(line []byte, e *Event) bool {
	i := skipJSONSpace(line, 0)
	if i == len(line) || line[i] != '{' {
		return false
	}
	i = skipJSONSpace(line, i+1)
	if i < len(line) && line[i] == '}' {
		return skipJSONSpace(line, i+1) == len(line)
	}
	for {
		key, next, ok := plainString(line, i)
		if !ok {
			return false
		}
		i = skipJSONSpace(line, next)
		if i == len(line) || line[i] != ':' {
			return false
		}
		i = skipJSONSpace(line, i+1)
		start := i
		val, next, ok := plainString(line, i)
		if !ok {
			return false
		}
		switch string(key) { // no allocation: the compiler compares in place
		case "event_id":
			e.EventID = string(val)
		case "type":
			e.Type = string(val)
		case "item":
			e.Item = string(val)
		case "user":
			e.User = string(val)
		case "country":
			e.Country = string(val)
		case "region":
			e.Region = string(val)
		case "ts":
			if e.TS.UnmarshalJSON(line[start:next]) != nil {
				return false
			}
		default:
			return false
		}
		i = skipJSONSpace(line, next)
		if i == len(line) {
			return false
		}
		switch line[i] {
		case ',':
			i = skipJSONSpace(line, i+1)
		case '}':
			return skipJSONSpace(line, i+1) == len(line)
		default:
			return false
		}
	}
}

// plainString reads the JSON string at line[i] when it has no escape and
// no control character and is valid UTF-8 (so its bytes are its value):
// the bytes between the quotes and the index after the closing quote.
func plainString(line []byte, i int) (val []byte, next int, ok bool) {
	if i >= len(line) || line[i] != '"' {
		return nil, 0, false
	}
	ascii := true
	for j := i + 1; j < len(line); j++ {
		c := line[j]
		switch {
		case c == '"':
			val = line[i+1 : j]
			if !ascii && !utf8.Valid(val) {
				return nil, 0, false
			}
			return val, j + 1, true
		case c == '\\' || c < 0x20:
			return nil, 0, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, 0, false
}
