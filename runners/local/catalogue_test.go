package main

import (
	"testing"
	"time"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/serving/catalogue"
	"github.com/topk-dev/topk/transforms/source"
)

// Property: the catalogue names items as the load does. Every item the
// generator draws, of every type, whose rank is within the catalogue has a
// record under the same name, and every record is valid; so titles cannot
// silently stop matching when transforms/source renames its items.
func TestSyntheticNames(t *testing.T) {
	types := []string{"video", "hashtag", "search"}
	const n = 5000
	recs := syntheticCatalogue(types, n)
	known := map[[2]string]bool{}
	for _, r := range recs {
		if err := catalogue.Validate(r); err != nil {
			t.Fatalf("record %+v: %v", r, err)
		}
		if known[[2]string{r.Type, r.Item}] {
			t.Fatalf("item %s %q named twice", r.Type, r.Item)
		}
		known[[2]string{r.Type, r.Item}] = true
	}
	if len(recs) != len(types)*n {
		t.Fatalf("%d records, want %d", len(recs), len(types)*n)
	}
	// A universe of n items: every draw must be known.
	g, err := source.NewGenerator(source.SyntheticSpec{Items: n, Zipf: 1.1, Beacon: 100, Types: types, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	var b schemas.Beacon
	for k := int64(0); k < 50; k++ {
		raw, _, err := g.Beacon(k, time.Unix(1_700_000_000, 0))
		if err != nil {
			t.Fatal(err)
		}
		if err := schemas.UnmarshalBeacon(raw, &b); err != nil {
			t.Fatal(err)
		}
		for _, e := range b.Events {
			if !known[[2]string{e.Type, e.Item}] {
				t.Fatalf("generated %s %q has no catalogue record", e.Type, e.Item)
			}
			seen[e.Type]++
		}
	}
	for _, typ := range types {
		if seen[typ] == 0 {
			t.Fatalf("no %s drawn: %v", typ, seen)
		}
	}
	for _, c := range []struct{ typ, item, title string }{
		{"video", "v_1", ""}, // catalogue.SyntheticRecords' title
		{"hashtag", "#news", "News talk"},
		{"hashtag", "#cricket3", "Cricket talk 3"},
		{"search", "news", `Searches for "news"`},
		{"search", "music+news", `Searches for "music news"`},
	} {
		var got *catalogue.Record
		for i := range recs {
			if recs[i].Type == c.typ && recs[i].Item == c.item {
				got = &recs[i]
			}
		}
		if got == nil || got.Title == "" || (c.title != "" && got.Title != c.title) {
			t.Fatalf("%s %q: record %+v, want title %q", c.typ, c.item, got, c.title)
		}
	}
}
