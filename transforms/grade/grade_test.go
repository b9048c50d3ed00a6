package grade

import (
	"fmt"
	"testing"
	"time"

	"github.com/topk-dev/topk/schemas"
)

var hour = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

func list(entries [][2]uint64, names []string, bound uint64) *schemas.List {
	l := &schemas.List{Type: "video", Scope: "global", Window: schemas.Window1h, AsOf: hour.Add(time.Hour), MaxOvercount: bound, Version: 1}
	for i, e := range entries {
		l.Items = append(l.Items, schemas.Entry{Rank: i + 1, Item: names[i], Count: e[0], Lower: e[1]})
	}
	return l
}

func TestPerfectList(t *testing.T) {
	exact := map[string]int64{}
	var entries [][2]uint64
	var names []string
	for i := range 150 {
		n := int64(1000 - i)
		name := fmt.Sprintf("v%d", i)
		exact[name] = n
		entries = append(entries, [2]uint64{uint64(n), uint64(n)})
		names = append(names, name)
	}
	g, err := Of(list(entries, names, 0), exact, hour)
	if err != nil {
		t.Fatal(err)
	}
	if g.Alert || g.Recall100 != 1 || g.MaxOvercount != 0 || g.MaxDisplacement != 0 {
		t.Fatalf("perfect list graded %+v", g)
	}
}

// Each breach raises the alert with its reason.
func TestBreaches(t *testing.T) {
	exact := map[string]int64{"a": 10, "b": 9, "c": 8, "d": 7}
	cases := map[string]struct {
		entries [][2]uint64
		names   []string
		bound   uint64
		want    string
	}{
		"over bound":  {[][2]uint64{{15, 10}, {9, 9}, {8, 8}, {7, 7}}, []string{"a", "b", "c", "d"}, 2, "over-count 5 above the list's bound 2"},
		"under-count": {[][2]uint64{{10, 10}, {8, 8}, {8, 8}, {7, 7}}, []string{"a", "b", "c", "d"}, 0, "1 entries under-count"},
		"recall":      {[][2]uint64{{10, 10}, {9, 9}, {8, 8}, {7, 0}}, []string{"a", "b", "c", "zz"}, 7, "recall@100 0.750 < 0.99"},
	}
	for name, c := range cases {
		g, err := Of(list(c.entries, c.names, c.bound), exact, hour)
		if err != nil {
			t.Fatal(err)
		}
		if !g.Alert || len(g.Reasons) == 0 || g.Reasons[0] != c.want {
			t.Errorf("%s: %+v, want alert %q", name, g, c.want)
		}
	}
	// Displacement: d listed first is exact rank 4.
	g, _ := Of(list([][2]uint64{{7, 7}, {10, 10}, {9, 9}, {8, 8}}, []string{"d", "a", "b", "c"}, 0), exact, hour)
	if g.MaxDisplacement != 3 {
		t.Errorf("displacement %d, want 3", g.MaxDisplacement)
	}
	if _, err := Of(list(nil, nil, 0), exact, hour.Add(time.Hour)); err == nil {
		t.Error("a list of another hour was graded")
	}
}
