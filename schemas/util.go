package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
)

// decodeJSONObject decodes data, which must hold exactly one JSON object and
// nothing else but JSON whitespace, into v, rejecting unknown fields.
//
// json.Decoder.More alone does not catch trailing data: it reports false when
// the next byte is ']' or '}', so `{...}]` would pass. Checking the bytes after
// InputOffset does.
func decodeJSONObject(data []byte, v any) error {
	i := skipJSONSpace(data, 0)
	if i == len(data) {
		return errors.New("empty input")
	}
	if data[i] != '{' {
		return errors.New("not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if j := skipJSONSpace(data, int(dec.InputOffset())); j != len(data) {
		return errors.New("data after the object")
	}
	return nil
}

// skipJSONSpace returns the index of the first byte at or after i that is not
// JSON whitespace (RFC 8259: space, tab, line feed, carriage return).
func skipJSONSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}
