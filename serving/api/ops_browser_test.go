package api

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/serving/catalogue"
)

// pageEntry is one rendered entry of the page's 1h column.
type pageEntry struct {
	item, name, change, img string
}

// Property: the page, in a real browser, shows the catalogue's title and
// thumbnail for known items and the id for unknown ones, and each entry's
// rank change.
func TestPageShowsTitlesAndChanges(t *testing.T) {
	if _, err := os.Stat(chromiumBin); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing: CI must apt-get install chromium", chromiumBin)
		}
		t.Skipf("%s is missing (apt-get install chromium): the browser test did not run", chromiumBin)
	}
	e := newEnv(t, nil)
	k := key("video", "global", schemas.Window1h)
	base := mkList(k, 1, 6, 1)
	base.AsOf = time.Now().Add(-20 * time.Second).Truncate(time.Second).UTC()
	e.publish(t, reorder(base, 1, []string{"v_1", "v_2", "v_3", "v_4", "v_5", "v_6"}))
	e.publish(t, reorder(base, 2, []string{"v_3", "v_1", "v_2", "zz_9", "v_5", "v_6"}))
	e.start(t)
	recs := catalogue.SyntheticRecords("video", 3)
	recs = append(recs, catalogue.Record{Type: "video", Item: "v_5", Entry: catalogue.Entry{Title: `<b>not bold</b> & "quoted"`}})
	if err := e.srv.Catalogue().Put(t.Context(), recs); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Second, "titles hydrated", func() bool {
		got, _ := e.top(t, k, 6)
		return got.Items[0].Title != ""
	})
	url := e.ts.URL + "/?type=video&k=10"
	dom := chromium(t, url, "--dump-dom")
	doc, err := html.Parse(bytes.NewReader(dom))
	if err != nil {
		t.Fatal(err)
	}
	var entries []pageEntry
	var walk func(n *html.Node, in1h bool)
	walk = func(n *html.Node, in1h bool) {
		if n.Type == html.ElementNode && n.Data == "section" && hasClass(n, "col") {
			in1h = attr(n, "data-window") == "1h"
		}
		if in1h && n.Type == html.ElementNode && n.Data == "li" && attr(n, "data-item") != "" {
			pe := pageEntry{item: attr(n, "data-item")}
			for c := n.FirstChild; c != nil; c = c.NextSibling {
				switch {
				case c.Type != html.ElementNode:
				case hasClass(c, "item"):
					pe.name = text(c)
					for i := c.FirstChild; i != nil; i = i.NextSibling {
						if i.Type == html.ElementNode && i.Data == "img" {
							pe.img = attr(i, "src")
						}
					}
				case hasClass(c, "change"):
					pe.change = text(c)
				}
			}
			entries = append(entries, pe)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, in1h)
		}
	}
	walk(doc, false)
	want := []pageEntry{
		{item: "v_3", name: recs[2].Title, change: "+2", img: recs[2].Thumbnail},
		{item: "v_1", name: recs[0].Title, change: "-1", img: recs[0].Thumbnail},
		{item: "v_2", name: recs[1].Title, change: "-1", img: recs[1].Thumbnail},
		{item: "zz_9", name: "zz_9", change: "new"},
		{item: "v_5", name: `<b>not bold</b> & "quoted"`, change: "·"},
		{item: "v_6", name: "v_6", change: "·"},
	}
	if len(entries) != len(want) {
		t.Fatalf("1h column shows %d entries %+v, want %d", len(entries), entries, len(want))
	}
	for i := range want {
		got := entries[i]
		got.name = strings.TrimSpace(got.name)
		if got != want[i] {
			t.Errorf("entry %d: %+v, want %+v", i, got, want[i])
		}
	}
	if dir := os.Getenv("TOPK_SCREENSHOT_DIR"); dir != "" {
		chromium(t, url, "--window-size=1400,600", "--screenshot="+filepath.Join(dir, "page-titles.png"))
	}
}
