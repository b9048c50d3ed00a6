package merge

import (
	"encoding/json"
	"strconv"

	"github.com/topk-dev/topk/schemas"
)

// AppendListJSON appends l encoded exactly as schemas.MarshalList
// (encoding/json) encodes it, byte for byte, without reflection: a list of
// 1,100 entries is most of what a slide publishes, and encoding/json spent
// its time walking the struct per entry. TestAppendListJSONEqualsMarshal
// holds it to MarshalList over every field of schemas.List and Entry (it
// fails when a field is added there and not here) and over strings that
// need escaping.
func AppendListJSON(b []byte, l *schemas.List) ([]byte, error) {
	b = append(b, `{"type":`...)
	b = appendString(b, l.Type)
	b = append(b, `,"scope":`...)
	b = appendString(b, l.Scope)
	b = append(b, `,"window":`...)
	b = appendString(b, string(l.Window))
	b = append(b, `,"as_of":`...)
	t, err := l.AsOf.MarshalJSON()
	if err != nil {
		return nil, err
	}
	b = append(b, t...)
	b = append(b, `,"exact_until":`...)
	if l.ExactUntil == nil {
		b = append(b, "null"...)
	} else {
		t, err := l.ExactUntil.MarshalJSON()
		if err != nil {
			return nil, err
		}
		b = append(b, t...)
	}
	b = append(b, `,"max_overcount":`...)
	b = strconv.AppendUint(b, l.MaxOvercount, 10)
	b = append(b, `,"complete":`...)
	b = strconv.AppendBool(b, l.Complete)
	b = append(b, `,"certified_k":`...)
	b = strconv.AppendInt(b, int64(l.CertifiedK), 10)
	b = append(b, `,"version":`...)
	b = strconv.AppendInt(b, l.Version, 10)
	b = append(b, `,"stale":`...)
	b = strconv.AppendBool(b, l.Stale)
	if l.Rules != "" {
		b = append(b, `,"rules":`...)
		b = appendString(b, l.Rules)
	}
	if l.MinCount != 0 {
		b = append(b, `,"min_count":`...)
		b = strconv.AppendUint(b, l.MinCount, 10)
	}
	if l.Total != 0 {
		b = append(b, `,"total":`...)
		b = strconv.AppendUint(b, l.Total, 10)
	}
	b = append(b, `,"items":`...)
	if l.Items == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range l.Items {
			e := &l.Items[i]
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"rank":`...)
			b = strconv.AppendInt(b, int64(e.Rank), 10)
			b = append(b, `,"item":`...)
			b = appendString(b, e.Item)
			b = append(b, `,"count":`...)
			b = strconv.AppendUint(b, e.Count, 10)
			b = append(b, `,"lower":`...)
			b = strconv.AppendUint(b, e.Lower, 10)
			if e.Users != 0 {
				b = append(b, `,"users":`...)
				b = strconv.AppendUint(b, e.Users, 10)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}'), nil
}

// appendString appends s as encoding/json quotes it: as is when every byte
// is printable ASCII that needs no escape (encoding/json escapes '"', '\\'
// and, for HTML, '<', '>' and '&'), else through encoding/json itself.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
