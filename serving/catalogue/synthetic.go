package catalogue

import (
	"context"
	"fmt"
	"net/url"
)

// SyntheticRecords returns catalogue records for the synthetic source's
// items "v_1" .. "v_n" of type typ (transforms/source.Generator names items
// "v_<rank>", rank 1 the most frequent): a short title ending in the rank
// ("Cricket highlights #2") and a small
// SVG tile as a data: URL, so that the local run shows titles and pictures
// without any network. The content is a function of (typ, rank) alone.
func SyntheticRecords(typ string, n int) []Record {
	out := make([]Record, 0, n)
	for rank := 1; rank <= n; rank++ {
		item := fmt.Sprintf("v_%d", rank)
		hue := (rank * 137) % 360 // golden-angle hues: neighbours differ
		svg := fmt.Sprintf(`<svg xmlns="http://www.w3.org/2000/svg" width="64" height="36"><rect width="64" height="36" fill="hsl(%d,60%%,45%%)"/><text x="32" y="23" font-family="sans-serif" font-size="14" fill="white" text-anchor="middle">%d</text></svg>`, hue, rank)
		out = append(out, Record{Type: typ, Item: item, Entry: Entry{
			Title:     fmt.Sprintf("%s #%d", phrases[rank%len(phrases)], rank),
			Thumbnail: "data:image/svg+xml," + url.PathEscape(svg),
		}})
	}
	return out
}

// phrases make synthetic titles look like titles (short: the page's columns
// are narrow).
var phrases = []string{"Cat on a piano", "Street food", "Cricket highlights", "Rain in Mumbai", "Monsoon drive", "Dance cover", "Cooking hack", "Late-night comedy"}

// FillSynthetic loads SyntheticRecords(typ, n) for every type into st: what
// the local all-in-one run calls so that its synthetic items have titles.
// n = a few thousand covers every item a Zipf load ranks in its lists.
func FillSynthetic(ctx context.Context, st *Store, types []string, n int) error {
	for _, t := range types {
		if err := st.Put(ctx, SyntheticRecords(t, n)); err != nil {
			return fmt.Errorf("fill synthetic catalogue: %w", err)
		}
	}
	return nil
}
