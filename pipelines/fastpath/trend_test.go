package fastpath

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/topk-dev/topk/internal/streams"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/source"
)

// TestTrendingReplay replays 45 minutes of a Zipf hashtag background (30
// events/s over 2,000 items) with one item ramping from nothing to 3
// events/s (about 9% of the traffic) between minutes 25 and 30, holding
// until 40, through the whole fast path (5m window only): the 5m lists carry
// their total, a trending list (by distinct users: every viral event is
// from its own account, every background event anonymous) is written every minute under
// DIR/hashtag/global/trending/, empty during the 20-minute warm-up, with the
// ramping item at rank 1 by 2 minutes after its ramp ends and no background
// item listed after the warm-up.
//
// It skips until Build calls PublishTrending (trend.go).
func TestTrendingReplay(t *testing.T) {
	events := streams.ZipfStream(7, 1.1, 2000, 45*60*30, start, 30, "hashtag")
	for sec := 25 * 60; sec < 40*60; sec++ {
		rate := 3.0
		if sec < 30*60 {
			rate = 3.0 * float64(sec-25*60) / 300
		}
		n := int(rate)
		if float64(sec%10)/10 < rate-float64(n) {
			n++
		}
		for j := 0; j < n; j++ {
			events = append(events, schemas.Event{EventID: "v" + strconv.Itoa(sec) + "-" + strconv.Itoa(j), Type: "hashtag",
				Item: "viral", User: "v" + strconv.Itoa(sec) + "-" + strconv.Itoa(j), TS: start.Add(time.Duration(sec)*time.Second + time.Duration(j)*time.Millisecond)})
		}
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].TS.Before(events[j].TS) })
	path := writeNDJSON(t, events)
	out := t.TempDir()
	cfg := DefaultConfig()
	spec, err := source.ParseSpec("file:" + path)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Source = spec
	cfg.Windows = []schemas.Window{schemas.Window5m}
	cfg.Publish.ListsOut = out
	if _, err := Run(context.Background(), cfg, BeamRunner, nil); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(out, "hashtag", "global", string(schemas.WindowTrending))
	files, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("no trending lists: %v", err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Name())
	}
	slices.Sort(names)
	if len(names) < 44 {
		t.Fatalf("%d trending lists, want one a minute (>= 44)", len(names))
	}
	warm := start.Add(20 * time.Minute)
	rank1By := start.Add(32 * time.Minute)
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		tl, err := schemas.UnmarshalTrending(b)
		if err != nil {
			t.Fatal(err)
		}
		if tl.Counts != schemas.CountsUsers {
			t.Fatalf("%s: counts %q, want users (the default)", tl.AsOf, tl.Counts)
		}
		if tl.AsOf.Before(warm) && len(tl.Items) != 0 {
			t.Errorf("%s: %d items during the warm-up", tl.AsOf, len(tl.Items))
		}
		for _, e := range tl.Items {
			if e.Item != "viral" {
				t.Errorf("%s: background item %s listed: %+v", tl.AsOf, e.Item, e)
			}
		}
		if !tl.AsOf.Before(rank1By) && tl.AsOf.Before(start.Add(45*time.Minute)) && (len(tl.Items) == 0 || tl.Items[0].Item != "viral") {
			t.Errorf("%s: viral not rank 1: %+v", tl.AsOf, tl.Items)
		}
	}
	f5, _ := os.ReadDir(filepath.Join(out, "hashtag", "global", "5m"))
	b, _ := os.ReadFile(filepath.Join(out, "hashtag", "global", "5m", f5[len(f5)/2].Name()))
	if l, err := schemas.UnmarshalList(b); err != nil || l.Total == 0 {
		t.Errorf("a 5m list without its total: %v %v", l, err)
	}
}
