package publish

import (
	"bytes"
	"strconv"
	"time"

	"github.com/topk-dev/topk/schemas"
)

// listHeader is schemas.ListHeader with a fast path for the layout a top
// list of the fast path has (merge.AppendListJSON, schemas.MarshalList):
//
//	{"type":"T","scope":"S","window":"W","as_of":"RFC 3339","exact_until":null,
//	 "max_overcount":N,"complete":B,"certified_k":N,"version":N,...
//
// read by position instead of through encoding/json's tokenizer (which was
// a sixth of the publish step's CPU). Anything else (a trending list, a
// long list with exact_until, an escaped string, a number that is not
// plain digits) goes to schemas.ListHeader, so for what the encoders write
// the answer is ListHeader's (TestListHeaderFastEqualsSlow). The fast path
// reads the header fields' first occurrence and stops at version: a blob
// repeating a field before "items", which no encoder writes, could read
// differently.
func listHeader(data []byte) (schemas.ListKey, int64, time.Time, error) {
	if k, v, t, ok := fastHeader(data); ok {
		return k, v, t, nil
	}
	return schemas.ListHeader(data)
}

func fastHeader(data []byte) (k schemas.ListKey, version int64, asOf time.Time, ok bool) {
	p := headerParser{data: data, ok: true}
	k.Type = p.str(`{"type":`)
	k.Scope = p.str(`,"scope":`)
	k.Window = schemas.Window(p.str(`,"window":`))
	p.lit(`,"as_of":`)
	ts := p.off
	p.str("")
	asEnd := p.off
	p.lit(`,"exact_until":null,"max_overcount":`)
	p.digits()
	p.lit(`,"complete":`)
	if !p.lit1("true") {
		p.lit("false")
	}
	p.lit(`,"certified_k":`)
	p.digits()
	p.lit(`,"version":`)
	vs := p.digits()
	if !p.ok || p.off >= len(data) || data[p.off] != ',' {
		return k, 0, asOf, false
	}
	v, err := strconv.ParseInt(vs, 10, 64)
	if err != nil || v <= 0 || k.Validate() != nil {
		return k, 0, asOf, false
	}
	// encoding/json decodes a time through its UnmarshalJSON: the same.
	if err := asOf.UnmarshalJSON(data[ts:asEnd]); err != nil {
		return k, 0, asOf, false
	}
	return k, v, asOf, true
}

type headerParser struct {
	data []byte
	off  int
	ok   bool
}

// lit consumes s, or fails the parse.
func (p *headerParser) lit(s string) {
	if !p.ok || !bytes.HasPrefix(p.data[p.off:], []byte(s)) {
		p.ok = false
		return
	}
	p.off += len(s)
}

// lit1 consumes s if it is next, without failing the parse when it is not.
func (p *headerParser) lit1(s string) bool {
	if p.ok && bytes.HasPrefix(p.data[p.off:], []byte(s)) {
		p.off += len(s)
		return true
	}
	return false
}

// str consumes the field prefix and a string without escapes.
func (p *headerParser) str(prefix string) string {
	p.lit(prefix + `"`)
	if !p.ok {
		return ""
	}
	rest := p.data[p.off:]
	i := bytes.IndexByte(rest, '"')
	if i < 0 || bytes.IndexByte(rest[:i], '\\') >= 0 {
		p.ok = false
		return ""
	}
	p.off += i + 1
	return string(rest[:i])
}

// digits consumes one or more decimal digits.
func (p *headerParser) digits() string {
	if !p.ok {
		return ""
	}
	i := p.off
	for i < len(p.data) && p.data[i] >= '0' && p.data[i] <= '9' {
		i++
	}
	if i == p.off || (p.data[p.off] == '0' && i > p.off+1) { // JSON has no leading zeros
		p.ok = false
		return ""
	}
	s := string(p.data[p.off:i])
	p.off = i
	return s
}
