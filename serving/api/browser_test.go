package api

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/topk-dev/topk/schemas"
)

const chromiumBin = "/usr/bin/chromium"

// chromium runs headless Chromium on url with extra flags (--dump-dom or
// --screenshot=...) and returns its stdout. The virtual time budget lets
// the page's fetches finish before the DOM is dumped.
func chromium(t *testing.T, url string, extra ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--user-data-dir=" + t.TempDir(), "--virtual-time-budget=4000",
	}
	args = append(append(args, extra...), url)
	cmd := exec.CommandContext(ctx, chromiumBin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", extra, err, stderr.String())
	}
	return out
}

// column is what the page shows for one window.
type column struct {
	version, stale, meta, bar, staleNote string
	items                                []string // data-item, in order
	counts                               []string
}

func attr(n *html.Node, name string) string {
	for _, a := range n.Attr {
		if a.Key == name {
			return a.Val
		}
	}
	return ""
}

func hasClass(n *html.Node, c string) bool {
	for _, f := range strings.Fields(attr(n, "class")) {
		if f == c {
			return true
		}
	}
	return false
}

func text(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

// parseColumns reads the dumped DOM into columns by window.
func parseColumns(t *testing.T, dom []byte) (map[string]*column, string) {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(string(dom)))
	if err != nil {
		t.Fatal(err)
	}
	cols := map[string]*column{}
	var errorbar string
	var walk func(*html.Node, *column)
	walk = func(n *html.Node, cur *column) {
		if n.Type == html.ElementNode {
			switch {
			case n.Data == "section" && hasClass(n, "col"):
				cur = &column{version: attr(n, "data-version"), stale: attr(n, "data-stale")}
				cols[attr(n, "data-window")] = cur
			case attr(n, "id") == "errorbar":
				errorbar = text(n)
			case cur != nil && hasClass(n, "meta"):
				cur.meta = text(n)
			case cur != nil && hasClass(n, "bar"):
				cur.bar = text(n)
			case cur != nil && hasClass(n, "stale"):
				cur.staleNote = text(n)
			case cur != nil && n.Data == "li" && attr(n, "data-item") != "":
				cur.items = append(cur.items, attr(n, "data-item"))
				for c := n.FirstChild; c != nil; c = c.NextSibling {
					if c.Type == html.ElementNode && hasClass(c, "count") {
						cur.counts = append(cur.counts, text(c))
					}
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, cur)
		}
	}
	walk(doc, nil)
	return cols, errorbar
}

// Property: the page, in a real browser, shows one column per window (and
// "Trending now") with
// the top 10 of each published list, its age, error bar and stale note,
// "not published yet" for a missing list, and moves to a new version.
func TestPageInHeadlessChromium(t *testing.T) {
	if _, err := os.Stat(chromiumBin); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing: CI must apt-get install chromium", chromiumBin)
		}
		t.Skipf("%s is missing (apt-get install chromium): the browser test did not run", chromiumBin)
	}
	e := newEnv(t, nil)
	asOf := time.Now().Add(-30 * time.Second).Truncate(time.Second).UTC()
	published := map[schemas.Window]*schemas.List{}
	for i, w := range []schemas.Window{schemas.Window1m, schemas.Window5m, schemas.Window1h, schemas.WindowAll} {
		l := mkList(key("video", "global", w), 1, 1100, uint64(i))
		l.AsOf = asOf
		for j := range l.Items {
			l.Items[j].Item = fmt.Sprintf("%s_vid_%d", w, j)
		}
		if w == schemas.Window5m {
			l.Stale = true
		}
		published[w] = l
		e.publish(t, l)
	}
	tl := mkTrending("global", asOf.Unix(), 12)
	tl.Type = "video"
	e.publishTrending(t, tl)
	e.start(t)
	url := e.ts.URL + "/?type=video&k=10"

	cols, errorbar := parseColumns(t, chromium(t, url, "--dump-dom"))
	if !strings.Contains(errorbar, "never below") {
		t.Errorf("error bar line %q", errorbar)
	}
	for _, w := range schemas.Windows {
		c := cols[string(w)]
		if c == nil {
			t.Fatalf("no column for %s", w)
		}
		l := published[w]
		if l == nil {
			if len(c.items) != 0 || !strings.Contains(c.meta, "not published yet") {
				t.Errorf("%s: missing list shows %q, %v", w, c.meta, c.items)
			}
			continue
		}
		if c.version != "1" || len(c.items) != 10 {
			t.Fatalf("%s: version %q, %d items %v", w, c.version, len(c.items), c.items)
		}
		for j := 0; j < 10; j++ {
			if c.items[j] != l.Items[j].Item || c.counts[j] != formatCount(l.Items[j].Count) {
				t.Errorf("%s item %d: %s %s, want %s %s", w, j, c.items[j], c.counts[j], l.Items[j].Item, formatCount(l.Items[j].Count))
			}
		}
		if !strings.Contains(c.meta, "updated") || !strings.Contains(c.meta, "s ago") {
			t.Errorf("%s: meta %q, want \"updated N s ago\"", w, c.meta)
		}
		if !strings.Contains(c.bar, "+9 high") {
			t.Errorf("%s: error bar %q, want +9", w, c.bar)
		}
		if wantStale := fmt.Sprint(w == schemas.Window5m); c.stale != wantStale {
			t.Errorf("%s: data-stale %q, want %s", w, c.stale, wantStale)
		}
	}
	// The "Trending now" column: the trending list's first 10, its score
	// explained in one line.
	if c := cols["trending"]; c == nil || len(c.items) != 10 || c.items[0] != "t_0" || c.items[9] != "t_9" || !strings.Contains(c.bar, "ln(share") {
		t.Errorf("trending column: %+v", c)
	}
	if dir := os.Getenv("TOPK_SCREENSHOT_DIR"); dir != "" {
		chromium(t, url, "--window-size=1400,900", "--screenshot="+filepath.Join(dir, "page-v1.png"))
	}

	// A new version of the 1h list with other items: the page moves.
	l2 := mkList(key("video", "global", schemas.Window1h), 2, 1100, 7)
	l2.AsOf = asOf.Add(20 * time.Second)
	for j := range l2.Items {
		l2.Items[j].Item = fmt.Sprintf("new_%d", j)
	}
	e.publish(t, l2)
	eventually(t, 3*time.Second, "server holds v2", func() bool {
		_, b := e.do(t, "GET", topPath(l2.Key(), 1), nil, "")
		return decodeList(t, b).Version == 2
	})
	cols, _ = parseColumns(t, chromium(t, url, "--dump-dom"))
	c := cols["1h"]
	if c.version != "2" || len(c.items) != 10 || c.items[0] != "new_0" || c.items[9] != "new_9" {
		t.Fatalf("1h after a new version: version %q items %v", c.version, c.items)
	}
	if c1m := cols["1m"]; c1m.version != "1" || c1m.items[0] != "1m_vid_0" {
		t.Fatalf("1m changed: %q %v", c1m.version, c1m.items)
	}
	if dir := os.Getenv("TOPK_SCREENSHOT_DIR"); dir != "" {
		chromium(t, url, "--window-size=1400,900", "--screenshot="+filepath.Join(dir, "page-v2.png"))
	}
}

// formatCount is the page's Intl.NumberFormat("en"): thousands with commas.
func formatCount(n uint64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}
