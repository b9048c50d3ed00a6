package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/topk-dev/topk/serving/catalogue"
	"github.com/topk-dev/topk/transforms/source"
)

// syntheticTitle is a title that reads like the item's name: a video keeps
// catalogue.SyntheticRecords' title, a hashtag "#cricket3" is "Cricket
// talk 3", a search "music+news" is `Searches for "music news"`.
func syntheticTitle(typ, item, video string) string {
	switch typ {
	case "hashtag":
		word := strings.TrimRight(item[1:], "0123456789")
		t := strings.ToUpper(word[:1]) + word[1:] + " talk"
		if n := item[1+len(word):]; n != "" {
			t += " " + n
		}
		return t
	case "search":
		return `Searches for "` + strings.ReplaceAll(item, "+", " ") + `"`
	}
	return video
}

// syntheticCatalogue returns a title and a thumbnail for the n most
// frequent synthetic items of each type, named as the load names them.
// The thumbnails are catalogue.SyntheticRecords' tiles (a data: URL per
// rank, no network).
func syntheticCatalogue(types []string, n int) []catalogue.Record {
	var out []catalogue.Record
	for _, typ := range types {
		for i, r := range catalogue.SyntheticRecords(typ, n) {
			item := source.ItemName(typ, uint64(i+1))
			r.Title = syntheticTitle(typ, item, r.Title)
			r.Item = item
			out = append(out, r)
		}
	}
	return out
}

// fillCatalogue writes syntheticCatalogue(types, n) into st.
func fillCatalogue(ctx context.Context, st *catalogue.Store, types []string, n int) error {
	if n <= 0 {
		return nil
	}
	if err := st.Put(ctx, syntheticCatalogue(types, n)); err != nil {
		return fmt.Errorf("fill the synthetic catalogue: %w", err)
	}
	return nil
}
