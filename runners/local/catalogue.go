package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/topk-dev/topk/serving/catalogue"
)

// syntheticWords are transforms/source's words (synthetic.go), in its
// order: hashtags and searches are named after them, so the catalogue must
// use the same list. TestSyntheticNames checks the names against the
// generator's output.
var syntheticWords = [64]string{
	"music", "news", "cats", "football", "cricket", "recipes", "travel", "gaming",
	"weather", "movies", "dance", "comedy", "fitness", "cars", "fashion", "tech",
	"art", "books", "science", "space", "history", "health", "yoga", "coffee",
	"pizza", "dogs", "memes", "anime", "kpop", "diy", "garden", "photo",
	"sunset", "beach", "hiking", "camping", "tennis", "chess", "guitar", "piano",
	"election", "budget", "stocks", "crypto", "jobs", "school", "exam", "wedding",
	"festival", "holiday", "rain", "snow", "summer", "winter", "love", "life",
	"city", "street", "food", "tea", "phone", "laptop", "ai", "robots",
}

// syntheticItem is the name source.Generator gives the item of rank r
// (1: the most frequent) of type typ (appendItem in
// transforms/source/synthetic.go): v_<r> for videos, #<word><r/64> for
// hashtags, word+word+... for searches, and v_<r> for any other type.
func syntheticItem(typ string, r int) string {
	switch typ {
	case "hashtag":
		s := "#" + syntheticWords[r%64]
		if r >= 64 {
			s += strconv.Itoa(r / 64)
		}
		return s
	case "search":
		s := syntheticWords[r%64]
		for r /= 64; r > 0; r /= 64 {
			s += "+" + syntheticWords[r%64]
		}
		return s
	}
	return "v_" + strconv.Itoa(r)
}

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
			item := syntheticItem(typ, i+1)
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
