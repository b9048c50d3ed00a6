package schemas

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func validTrending() *Trending {
	at := time.Date(2026, 11, 30, 10, 42, 0, 0, time.UTC)
	return &Trending{
		Type: "hashtag", Scope: "IN-MH", Window: WindowTrending, AsOf: at,
		BaselineHours: 168, Counts: CountsEvents, Version: at.Unix(),
		Items: []TrendEntry{
			{Rank: 1, Item: "#raininmumbai", Score: 0.0053, Count5m: 120, Baseline5m: 1.5, PeakScore: 0.0061, PeakAt: at.Add(-3 * time.Minute)},
			{Rank: 2, Item: "#love", Score: 0.001, Count5m: 900, Baseline5m: 800},
		},
	}
}

// TestTrendingRoundTrip: the JSON has the field names, decodes back
// to the same bytes, and every broken invariant is rejected with
// ErrBadList.
func TestTrendingRoundTrip(t *testing.T) {
	data, err := MarshalTrending(validTrending())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{`"type":"hashtag"`, `"scope":"IN-MH"`, `"window":"trending"`, `"as_of":"2026-11-30T10:42:00Z"`,
		`"baseline_hours":168`, `"counts":"events"`, `"version":`, `"stale":false`,
		`"items":[{"rank":1,"item":"#raininmumbai","score":0.0053,"count_5m":120,"baseline_5m":1.5,"peak_score":0.0061,"peak_at":"2026-11-30T10:39:00Z"}`} {
		if !strings.Contains(string(data), f) {
			t.Errorf("JSON %s lacks %s", data, f)
		}
	}
	back, err := UnmarshalTrending(data)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := MarshalTrending(back); string(again) != string(data) {
		t.Errorf("round trip changed the list:\n%s\n%s", data, again)
	}
	for _, tc := range []struct {
		name string
		mod  func(*Trending)
	}{
		{"top window", func(l *Trending) { l.Window = Window5m }},
		{"no as_of", func(l *Trending) { l.AsOf = time.Time{} }},
		{"bad counts", func(l *Trending) { l.Counts = "views" }},
		{"negative hours", func(l *Trending) { l.BaselineHours = -1 }},
		{"rank", func(l *Trending) { l.Items[1].Rank = 3 }},
		{"duplicate", func(l *Trending) { l.Items[1].Item = l.Items[0].Item }},
		{"order", func(l *Trending) { l.Items[1].Score = 1 }},
		{"negative score", func(l *Trending) { l.Items[1].Score = -1 }},
		{"nan baseline", func(l *Trending) { l.Items[1].Baseline5m = math.NaN() }},
		{"bad scope", func(l *Trending) { l.Scope = "mumbai" }},
	} {
		l := validTrending()
		tc.mod(l)
		if err := l.Check(); !errors.Is(err, ErrBadList) {
			t.Errorf("%s: Check = %v, want ErrBadList", tc.name, err)
		}
	}
}

// TestTrendingWindowKeys: "trending" is a list key's window but not a
// counting window, and a top list cannot claim it.
func TestTrendingWindowKeys(t *testing.T) {
	if WindowTrending.Valid() {
		t.Error("trending is a counting window")
	}
	if err := (ListKey{Type: "video", Scope: "IN", Window: WindowTrending}).Validate(); err != nil {
		t.Errorf("trending key: %v", err)
	}
	l := validList()
	l.Window = WindowTrending
	if err := l.Check(); !errors.Is(err, ErrBadList) {
		t.Errorf("top list with window trending: %v", err)
	}
}

// FuzzUnmarshalTrending: arbitrary bytes give a checked list or an error,
// never a panic; a decoded list re-encodes to a list that decodes the same.
func FuzzUnmarshalTrending(f *testing.F) {
	data, _ := MarshalTrending(validTrending())
	f.Add(data)
	f.Add([]byte(`{"window":"trending"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := UnmarshalTrending(b)
		if err != nil {
			return
		}
		again, err := MarshalTrending(l)
		if err != nil {
			t.Fatal(err)
		}
		l2, err := UnmarshalTrending(again)
		if err != nil {
			t.Fatal(err)
		}
		if third, _ := MarshalTrending(l2); string(third) != string(again) {
			t.Fatalf("not stable:\n%s\n%s", again, third)
		}
	})
}
