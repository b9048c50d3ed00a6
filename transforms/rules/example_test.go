package rules_test

import (
	"fmt"
	"time"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/rules"
)

// A pre-aggregation step builds one Filter per DoFn instance (in Setup),
// tells it the stream's time once per beacon, checks every event before
// counting it, and moves its counters in FinishBundle.
func Example() {
	cfg := rules.DefaultConfig() // or *rules.RegisterFlags(fs, "") after fs.Parse
	cfg.MaxIDs, cfg.MaxKeys = 1024, 1024
	r, err := rules.New(cfg)
	if err != nil {
		panic(err)
	}
	f := r.NewFilter()

	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	f.Advance(now) // once per beacon: its element time
	counts := map[string]int{}
	trending := map[string]float64{}
	for i, e := range []schemas.Event{
		{EventID: "e1", Type: "video", Item: "v_1", User: "u_1", TS: now},
		{EventID: "e1", Type: "video", Item: "v_1", User: "u_1", TS: now},                      // the same event again
		{EventID: "e2", Type: "video", Item: "v_1", User: "u_1", TS: now.Add(5 * time.Second)}, // a repeat
		{EventID: "e3", Type: "video", Item: "v_1", User: "u_2", TS: now.Add(5 * time.Second)},
	} {
		w, why := f.Check(&e) // hot path: once per event
		fmt.Println(i, why)
		if why == rules.OK {
			counts[e.Item]++
			trending[e.Item] += w
		}
	}
	st := f.TakeStats() // in FinishBundle: one counter per reason
	fmt.Println(counts["v_1"], trending["v_1"], st.Events[rules.Duplicate], st.Events[rules.Repeat])
	fmt.Println(r.Version())
	// Output:
	// 0 ok
	// 1 duplicate
	// 2 repeat
	// 3 ok
	// 2 2 1 1
	// r1;repeat=30s;cap=10/1h0m0s;bots=-;blocklist=-;trust=-/1
}
