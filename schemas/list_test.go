package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func validList() *List {
	exact := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	return &List{
		Type: "video", Scope: "global", Window: Window1h,
		AsOf:         time.Date(2026, 11, 30, 10, 42, 0, 0, time.UTC),
		ExactUntil:   &exact,
		MaxOvercount: 12,
		Complete:     true,
		CertifiedK:   2,
		Version:      7,
		Items: []Entry{
			{Rank: 1, Item: "v_9", Count: 3104, Lower: 3092},
			{Rank: 2, Item: "v_3", Count: 3000, Lower: 3000},
			{Rank: 3, Item: "v_5", Count: 3000, Lower: 2990},
		},
	}
}

// TestListRoundTrip checks that MarshalList then UnmarshalList gives back the
// same list, and that the JSON uses the field names of DESIGN.md section 6.
func TestListRoundTrip(t *testing.T) {
	l := validList()
	data, err := MarshalList(l)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{`"type":"video"`, `"scope":"global"`, `"window":"1h"`, `"as_of":"2026-11-30T10:42:00Z"`,
		`"exact_until":"2026-11-30T10:00:00Z"`, `"max_overcount":12`, `"complete":true`, `"certified_k":2`,
		`"version":7`, `"stale":false`, `"items":[{"rank":1,"item":"v_9","count":3104,"lower":3092}`} {
		if !strings.Contains(string(data), f) {
			t.Errorf("JSON %s lacks %s", data, f)
		}
	}
	back, err := UnmarshalList(data)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := MarshalList(back)
	if string(again) != string(data) {
		t.Errorf("round trip changed the list:\n%s\n%s", data, again)
	}
	// exact_until null is allowed.
	l.ExactUntil = nil
	data, _ = MarshalList(l)
	if !strings.Contains(string(data), `"exact_until":null`) {
		t.Errorf("nil exact_until not null: %s", data)
	}
	if _, err := UnmarshalList(data); err != nil {
		t.Error(err)
	}
}

// TestListCheck checks each invariant List.Check enforces: the list is
// rejected with ErrBadList and the reason when one is broken, and accepted
// at the edges (empty list, ties, count = lower, count-lower =
// max_overcount).
func TestListCheck(t *testing.T) {
	tests := []struct {
		name string
		mut  func(*List)
		want string // "" = valid
	}{
		{"valid", func(*List) {}, ""},
		{"empty list", func(l *List) { l.Items, l.CertifiedK, l.Complete = nil, 0, false }, ""},
		{"every window", func(l *List) { l.Window = WindowAll }, ""},
		{"country scope", func(l *List) { l.Scope = "IN" }, ""},
		{"region scope", func(l *List) { l.Scope = "IN-MH" }, ""},
		{"certified_k = len", func(l *List) { l.CertifiedK = 3 }, ""},
		{"overcount at bound", func(l *List) { l.MaxOvercount = 12 }, ""},

		{"bad type", func(l *List) { l.Type = "Video" }, `type "Video"`},
		{"missing type", func(l *List) { l.Type = "" }, `type ""`},
		{"bad scope", func(l *List) { l.Scope = "india" }, `scope "india"`},
		{"bad window", func(l *List) { l.Window = "2h" }, `window "2h"`},
		{"missing as_of", func(l *List) { l.AsOf = time.Time{} }, "as_of is missing"},
		{"negative certified_k", func(l *List) { l.CertifiedK = -1 }, "certified_k -1 outside [0, 3]"},
		{"certified_k beyond items", func(l *List) { l.CertifiedK = 4 }, "certified_k 4 outside [0, 3]"},
		{"rank from 0", func(l *List) {
			for i := range l.Items {
				l.Items[i].Rank = i
			}
		}, "entry 0 has rank 0"},
		{"rank skipped", func(l *List) { l.Items[2].Rank = 4 }, "entry 2 has rank 4"},
		{"ranks swapped", func(l *List) { l.Items[1].Rank, l.Items[2].Rank = 3, 2 }, "entry 1 has rank 3"},
		{"lower above count", func(l *List) { l.Items[1].Lower = 3001 }, "entry 1: lower 3001 above count 3000"},
		{"beyond max_overcount", func(l *List) { l.MaxOvercount = 11 }, "entry 0: count-lower 12 above max_overcount 11"},
		{"count rises", func(l *List) { l.Items[2].Count, l.Items[2].Lower = 3001, 3001 }, "entry 2: count 3001 above the previous rank's 3000"},
		{"empty item", func(l *List) { l.Items[1].Item = "" }, "entry 1 has no item"},
		{"item twice", func(l *List) { l.Items[2].Item = "v_9" }, `entry 2: item "v_9" is listed twice`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := validList()
			tc.mut(l)
			err := l.Check()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Check = %v, want nil", err)
				}
			} else if !errors.Is(err, ErrBadList) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check = %v, want ErrBadList mentioning %q", err, tc.want)
			}
			// UnmarshalList applies the same checks to the JSON form.
			data, merr := json.Marshal(l)
			if merr != nil {
				t.Fatal(merr)
			}
			_, uerr := UnmarshalList(data)
			if (uerr == nil) != (err == nil) {
				t.Errorf("UnmarshalList = %v, Check = %v", uerr, err)
			}
		})
	}
}

// TestUnmarshalListJSON checks that malformed JSON and JSON that is not a
// list are rejected with ErrBadList.
func TestUnmarshalListJSON(t *testing.T) {
	for _, in := range []string{``, `null`, `[]`, `{"type":"video"`, `{}`,
		`{"type":"video","scope":"global","window":"1h","as_of":"2026-11-30T10:42:00Z","items":[]} x`,
		`{"type":"video","scope":"global","window":"1h","as_of":"2026-11-30T10:42:00Z","items":[{"rank":1,"item":"a","count":-1}]}`,
		`{"type":"video","scope":"global","window":"1h","as_of":"2026-11-30T10:42:00Z","max_overcount":1.5}`,
	} {
		if _, err := UnmarshalList([]byte(in)); !errors.Is(err, ErrBadList) {
			t.Errorf("UnmarshalList(%q) = %v, want ErrBadList", in, err)
		}
	}
}

// TestWindows checks each window's length and publishing period (DESIGN.md
// section 1) and that only the listed windows are valid.
func TestWindows(t *testing.T) {
	want := map[Window][2]time.Duration{
		Window1m:  {time.Minute, 10 * time.Second},
		Window5m:  {5 * time.Minute, 10 * time.Second},
		Window1h:  {time.Hour, time.Minute},
		Window24h: {24 * time.Hour, time.Minute},
		WindowAll: {0, time.Minute},
	}
	if len(Windows) != len(want) {
		t.Fatalf("Windows = %v", Windows)
	}
	for _, w := range Windows {
		if !w.Valid() || w.Length() != want[w][0] || w.Period() != want[w][1] {
			t.Errorf("%s: valid %v length %v period %v, want %v", w, w.Valid(), w.Length(), w.Period(), want[w])
		}
	}
	for _, w := range []Window{"", "1H", "2h", "ALL"} {
		if w.Valid() {
			t.Errorf("%q is valid", w)
		}
	}
	k := ListKey{Type: "video", Scope: "IN-MH", Window: Window24h}
	if k.String() != "video:IN-MH:24h" || k.Validate() != nil {
		t.Errorf("key %v: %v", k, k.Validate())
	}
}

// TestDeadLetterJSON checks the dead-letter JSON form: the payload travels as
// base64 and comes back byte for byte; empty optional fields are omitted.
func TestDeadLetterJSON(t *testing.T) {
	d := DeadLetter{Stage: "decode", Reason: "bad beacon: missing TKB magic", Payload: []byte{0, 0xff, '"'}}
	data, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"stage":"decode","reason":"bad beacon: missing TKB magic","payload":"AP8i"}`; string(data) != want {
		t.Errorf("got %s, want %s", data, want)
	}
	var back DeadLetter
	if err := json.Unmarshal(data, &back); err != nil || string(back.Payload) != string(d.Payload) || !back.At.IsZero() {
		t.Errorf("round trip %+v, %v", back, err)
	}
}

// Property: the rules version and the entries' distinct users survive a
// round trip, and lists without them encode as before (no new keys).
func TestListRulesAndUsersRoundTrip(t *testing.T) {
	l := &List{Type: "video", Scope: "global", Window: Window1h, AsOf: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC),
		MaxOvercount: 1, Rules: "r1;none", Items: []Entry{{Rank: 1, Item: "v", Count: 5, Lower: 4, Users: 3}}}
	b, err := MarshalList(l)
	if err != nil {
		t.Fatal(err)
	}
	got, err := UnmarshalList(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Rules != "r1;none" || got.Items[0].Users != 3 {
		t.Fatalf("decoded %+v", got)
	}
	l.Rules, l.Items[0].Users = "", 0
	b, _ = MarshalList(l)
	if bytes.Contains(b, []byte(`"rules"`)) || bytes.Contains(b, []byte(`"users"`)) {
		t.Fatalf("unset fields encoded: %s", b)
	}
}

// TestListHeader: the header read without the entries agrees with a full
// decode for top lists and trending lists, and rejects what is not a list.
func TestListHeader(t *testing.T) {
	asOf := time.Date(2026, 11, 30, 10, 42, 0, 0, time.UTC)
	l := &List{Type: "video", Scope: "IN-MH", Window: Window5m, AsOf: asOf, Version: asOf.Unix(),
		Items: []Entry{{Rank: 1, Item: "v_1", Count: 5, Lower: 5}}}
	b, err := MarshalList(l)
	if err != nil {
		t.Fatal(err)
	}
	k, v, at, err := ListHeader(b)
	if err != nil || k != l.Key() || v != l.Version || !at.Equal(asOf) {
		t.Fatalf("header %v %d %v %v, want %v %d %v", k, v, at, err, l.Key(), l.Version, asOf)
	}
	tr := &Trending{Type: "hashtag", Scope: "global", Window: WindowTrending, AsOf: asOf, Version: asOf.Unix(), Counts: "events"}
	if b, err = MarshalTrending(tr); err != nil {
		t.Fatal(err)
	}
	if k, v, _, err = ListHeader(b); err != nil || k != tr.Key() || v != tr.Version {
		t.Fatalf("trending header %v %d %v", k, v, err)
	}
	for _, bad := range []string{``, `[]`, `{"type":"video"}`, `{"type":"Video","scope":"global","window":"1h","as_of":"2026-11-30T10:00:00Z","version":1,"items":[]}`, `{"type":"video","scope":"global","window":"1h","as_of":"2026-11-30T10:00:00Z","version":0,"items":[]}`} {
		if _, _, _, err := ListHeader([]byte(bad)); err == nil {
			t.Errorf("header of %q: no error", bad)
		}
	}
}
