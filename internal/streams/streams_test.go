package streams

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/topk-dev/topk/schemas"
)

// readmeCounts parses the table of testdata/README.md: stream name -> events
// and distinct items, so the README and the data cannot drift apart.
func readmeCounts(t *testing.T) map[string][2]int {
	t.Helper()
	data, err := os.ReadFile("testdata/README.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`(?m)^\| ([a-z0-9-]+) \| ([0-9,]+) \| ([0-9,]+) \|`)
	out := map[string][2]int{}
	for _, m := range row.FindAllStringSubmatch(string(data), -1) {
		ev, _ := strconv.Atoi(strings.ReplaceAll(m[2], ",", ""))
		di, _ := strconv.Atoi(strings.ReplaceAll(m[3], ",", ""))
		out[m[1]] = [2]int{ev, di}
	}
	return out
}

// TestNames checks that the four converted data sets are embedded, sorted,
// and that unknown or malformed names fail with ErrUnknownStream.
func TestNames(t *testing.T) {
	want := []string{"bms-webview-2", "kosarak10k", "ml-latest-small", "nasa-http"}
	if got := Names(); !slices.Equal(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	for _, bad := range []string{"", "nope", "*", "../streams", "testdata/nasa-http"} {
		if _, err := Open(bad); !errors.Is(err, ErrUnknownStream) {
			t.Errorf("Open(%q) = %v, want ErrUnknownStream", bad, err)
		}
		if _, err := Load(bad); !errors.Is(err, ErrUnknownStream) {
			t.Errorf("Load(%q) = %v, want ErrUnknownStream", bad, err)
		}
		if _, err := Path(bad); !errors.Is(err, ErrUnknownStream) {
			t.Errorf("Path(%q) = %v, want ErrUnknownStream", bad, err)
		}
	}
}

// TestStreamsMatchREADME checks every stream against the README: its event
// count equals the exact recount's total (so event_ids are unique), its
// distinct item count equals the number of keys, and every event is
// well-formed (passes the zero Validator, country and region empty).
func TestStreamsMatchREADME(t *testing.T) {
	want := readmeCounts(t)
	if len(want) != len(Names()) {
		t.Fatalf("README table has %d streams (%v), embedded %d", len(want), want, len(Names()))
	}
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			events, err := Load(name)
			if err != nil {
				t.Fatal(err)
			}
			w, ok := want[name]
			if !ok {
				t.Fatalf("%s not in the README table", name)
			}
			if len(events) != w[0] {
				t.Errorf("%d events, README says %d", len(events), w[0])
			}
			counts := ExactCounts(events, time.Time{}, time.Time{})
			if len(counts) != w[1] {
				t.Errorf("%d distinct items, README says %d", len(counts), w[1])
			}
			var total uint64
			for _, c := range counts {
				total += c
			}
			if total != uint64(w[0]) {
				t.Errorf("exact recount totals %d, want %d (duplicate event_ids?)", total, w[0])
			}
			var v schemas.Validator
			for i := range events {
				e := &events[i]
				if err := v.Validate(e, time.Time{}); err != nil {
					t.Fatalf("event %d: %v", i, err)
				}
				if e.Country != "" || e.Region != "" {
					t.Fatalf("event %d has a scope: %+v", i, e)
				}
			}
		})
	}
}

// TestStreamConversions checks each stream's documented conversion on its
// first events (hand-read from the sources) and its ts rule: synthetic
// streams are at exactly 100 events/s from 2026-11-30T00:00:00Z, NASA is in
// time order, MovieLens is not.
func TestStreamConversions(t *testing.T) {
	start := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	first := map[string][]schemas.Event{
		// bms-webview-2.spmf.txt line 1: "82475 -1 84211 -1 86919 -1 86927 -1 86943", line 2: "56109 -1 222699"
		"bms-webview-2": {
			{EventID: "bms-1", Type: "product", Item: "82475", User: "s1", TS: start},
			{EventID: "bms-5", Type: "product", Item: "86943", User: "s1", TS: start.Add(40 * time.Millisecond)},
			{EventID: "bms-6", Type: "product", Item: "56109", User: "s2", TS: start.Add(50 * time.Millisecond)},
		},
		// kosarak10k.utility.txt line 1: "1[8] -1 2[20] -1 3[9] -1 -2 SUtility:37", line 2: "1[16] -1 -2 SUtility:16"
		"kosarak10k": {
			{EventID: "kosarak-1", Type: "article", Item: "1", User: "s1", TS: start},
			{EventID: "kosarak-3", Type: "article", Item: "3", User: "s1", TS: start.Add(20 * time.Millisecond)},
			{EventID: "kosarak-4", Type: "article", Item: "1", User: "s2", TS: start.Add(30 * time.Millisecond)},
		},
		// ratings.csv row 1: "7,1,3,851866703"
		"ml-latest-small": {
			{EventID: "ml-1", Type: "movie", Item: "m1", User: "u7", TS: time.Unix(851866703, 0).UTC()},
		},
		// 199.72.81.55 - - [01/Jul/1995:00:00:01 -0400] "GET /history/apollo/ HTTP/1.0" 200 6245
		"nasa-http": {
			{EventID: "nasa-1", Type: "path", Item: "/history/apollo/", User: "199.72.81.55", TS: time.Date(1995, 7, 1, 4, 0, 1, 0, time.UTC)},
		},
	}
	for name, want := range first {
		events, err := Load(name)
		if err != nil {
			t.Fatal(err)
		}
		byID := map[string]schemas.Event{}
		for _, e := range events[:10] {
			byID[e.EventID] = e
		}
		for _, w := range want {
			if got := byID[w.EventID]; got != w {
				t.Errorf("%s: got %+v, want %+v", name, got, w)
			}
		}
	}

	for _, name := range []string{"bms-webview-2", "kosarak10k"} {
		events, _ := Load(name)
		for i, e := range events {
			if want := start.Add(time.Duration(i) * 10 * time.Millisecond); !e.TS.Equal(want) {
				t.Fatalf("%s event %d: ts %v, want %v", name, i, e.TS, want)
			}
		}
	}
	nasa, _ := Load("nasa-http")
	if !slices.IsSortedFunc(nasa, func(a, b schemas.Event) int { return a.TS.Compare(b.TS) }) {
		t.Error("nasa-http is not in time order")
	}
	// 22 requests lack the protocol: their path must not keep the closing quote.
	for _, e := range nasa {
		if strings.ContainsAny(e.Item, `" `) {
			t.Fatalf("nasa item %q", e.Item)
		}
	}
	ml, _ := Load("ml-latest-small")
	if slices.IsSortedFunc(ml, func(a, b schemas.Event) int { return a.TS.Compare(b.TS) }) {
		t.Error("ml-latest-small is in time order; the README says arrival is out of event-time order")
	}
	lo, hi := ml[0].TS, ml[0].TS
	for _, e := range ml {
		lo, hi = minTime(lo, e.TS), maxTime(hi, e.TS)
	}
	if lo.Format(time.DateOnly) != "1995-01-09" || hi.Format(time.DateOnly) != "2016-10-16" {
		t.Errorf("ml-latest-small ts range %v to %v, README says 1995-01-09 to 2016-10-16", lo, hi)
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// TestOpenPathLoadAgree checks that Open, Path and Load give the same stream:
// Path's file holds Open's bytes, ReadNDJSON of either gives Load's events,
// Path is stable across calls, and Load returns a copy.
func TestOpenPathLoadAgree(t *testing.T) {
	const name = "nasa-http"
	r, err := Open(name)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(r)
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Path(name)
	if err != nil {
		t.Fatal(err)
	}
	onDisk, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, onDisk) {
		t.Fatalf("Path file %s differs from Open", p)
	}
	if p2, err := Path(name); err != nil || p2 != p {
		t.Errorf("second Path = %q, %v; want %q", p2, err, p)
	}
	fromRaw, err := ReadNDJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	events, err := Load(name)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fromRaw, events) {
		t.Error("ReadNDJSON(Open) != Load")
	}
	events[0].Item = "changed"
	again, _ := Load(name)
	if again[0].Item == "changed" {
		t.Error("Load returned shared storage")
	}
	lines := 0
	for sc := bufio.NewScanner(bytes.NewReader(raw)); sc.Scan(); {
		lines++
	}
	if lines != len(events) {
		t.Errorf("%d lines, %d events", lines, len(events))
	}
}

// TestReadNDJSON checks that blank lines are skipped and a bad line fails
// with its line number.
func TestReadNDJSON(t *testing.T) {
	in := `{"event_id":"a","type":"t","item":"x","ts":"2026-11-30T00:00:00Z"}` + "\n\n" +
		`{"event_id":"b","type":"t","item":"y","ts":"2026-11-30T00:00:01Z"}` + "\n"
	events, err := ReadNDJSON(strings.NewReader(in))
	if err != nil || len(events) != 2 || events[1].Item != "y" {
		t.Fatalf("got %+v, %v", events, err)
	}
	_, err = ReadNDJSON(strings.NewReader(in + `{"bad":1}` + "\n"))
	if !errors.Is(err, schemas.ErrInvalidEvent) || !strings.Contains(err.Error(), "line 4") {
		t.Errorf("err %v, want ErrInvalidEvent at line 4", err)
	}
}
