// Command naive is the benchmark baseline for the fast path: the pipeline a
// team would write first with Beam's own transforms. Every event becomes a
// KV<item, 1>, sliding one-minute windows every 10 s copy each event into six
// windows, CombinePerKey sums them (Beam's combiner lifting pre-aggregates
// per bundle), and top.Largest ranks each window. It reads the same sources
// as the fast path and prints the same kind of JSON line, so
// scripts/bench-fastpath.sh can compare the two on the same input.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"log/slog"
	"os"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/top"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/x/beamx"

	"github.com/topk-dev/topk/internal/prismopt"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/source"
)

// ItemCount is one item's count in a window.
type ItemCount struct {
	Item string
	N    int
}

var (
	events = beam.NewCounter("naive", "events")
	lists  = beam.NewCounter("naive", "lists")
)

func init() {
	register.Function3x0[context.Context, []byte, func(beam.EventTime, string, int)](explode)
	register.Emitter3[beam.EventTime, string, int]()
	register.Function2x1[string, int, ItemCount](toItemCount)
	register.Function2x0[context.Context, []ItemCount](countList)
	register.Function2x1[ItemCount, ItemCount, bool](less)
	beam.RegisterType(reflectTypeOfItemCount)
}

// explode emits one KV<item, 1> per event at the event's own time.
func explode(ctx context.Context, beacon []byte, emit func(beam.EventTime, string, int)) {
	var r schemas.BeaconReader
	if r.Reset(beacon) != nil {
		return
	}
	var e schemas.Event
	n := int64(0)
	for r.Next(&e) {
		emit(mtime.FromTime(e.TS), e.Item, 1)
		n++
	}
	events.Inc(ctx, n)
}

func toItemCount(item string, n int) ItemCount { return ItemCount{Item: item, N: n} }

func less(a, b ItemCount) bool { return a.N < b.N }

func countList(ctx context.Context, _ []ItemCount) { lists.Inc(ctx, 1) }

func main() {
	src := flag.String("source", "", "same as the fast path's --source")
	k := flag.Int("k", 1000, "list depth")
	flag.Parse()
	beam.Init()
	spec, err := source.ParseSpec(*src)
	if err != nil {
		slog.Error("naive", "err", err)
		os.Exit(1)
	}
	p, s := beam.NewPipelineWithRoot()
	beacons, _ := source.Read(s, spec, source.Options{})
	kv := beam.ParDo(s, explode, beacons)
	w := beam.WindowInto(s, window.NewSlidingWindows(10*time.Second, time.Minute), kv)
	counts := stats.SumPerKey(s, w)
	tops := top.Largest(s, beam.ParDo(s, toItemCount, counts), *k, less)
	beam.ParDo0(s, countList, tops)

	start := time.Now()
	prismopt.Apply() // the same runner settings as the fast path it is compared with
	res, err := beamx.RunWithMetrics(context.Background(), p)
	secs := time.Since(start).Seconds()
	if err != nil {
		slog.Error("naive", "err", err)
		os.Exit(1)
	}
	out := map[string]any{"pipeline": "naive", "seconds": secs}
	for _, c := range res.Metrics().AllMetrics().Counters() {
		if c.Namespace() == "naive" {
			out[c.Name()] = out2int(out[c.Name()]) + c.Result()
		}
	}
	if ev, ok := out["events"].(int64); ok && secs > 0 {
		out["events_per_s"] = float64(ev) / secs
	}
	json.NewEncoder(os.Stdout).Encode(out)
}

func out2int(v any) int64 {
	n, _ := v.(int64)
	return n
}
