package recount

import (
	"context"
	"fmt"
	"maps"
	"os"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"

	"github.com/topk-dev/topk/internal/faults"
	"github.com/topk-dev/topk/pipelines/recount/recounttest"
	"github.com/topk-dev/topk/transforms/exact/store"
)

// Property: the recount waits out Bigtable outages instead of failing: cut
// off when it starts, and again between its Beam job and its writes, it
// resumes when Bigtable returns, and the hour's exact counts are then the
// independent exact count. Bigtable (the emulator at BIGTABLE_EMULATOR_HOST,
// else an in-process bttest) is behind a proxy the test cuts (connection
// refused) and restores.
func TestRecountWaitsOutBigtableOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the outage test waits 6 s")
	}
	// Behind the proxy: the official emulator when CI runs one, else bttest.
	addr := os.Getenv("BIGTABLE_EMULATOR_HOST")
	if addr == "" {
		a, stop, err := store.Embedded()
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		addr = a
	}
	px, err := faults.NewProxy(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	// The client prefers BIGTABLE_EMULATOR_HOST to its options.
	t.Setenv("BIGTABLE_EMULATOR_HOST", px.Addr())
	ctx := context.Background()
	st, err := store.Open(ctx, "topk-test", fmt.Sprintf("outage%d", time.Now().UnixNano()), store.EmulatorOptions(px.Addr())...)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	root := t.TempDir()
	evs := recounttest.GenEvents(3, hour0, 3000)
	recounttest.WriteArchive(t, root, hour0, evs)
	const outage = 3 * time.Second
	cutFor := func() {
		px.Cut()
		time.AfterFunc(outage, func() {
			if err := px.Restore(); err != nil {
				t.Error(err)
			}
		})
	}
	cutFor() // down when the recount starts
	runner := func(ctx context.Context, p *beam.Pipeline) (map[string]int64, error) {
		m, err := BeamRunner(ctx, p)
		cutFor() // and again between the job and the writes
		return m, err
	}
	start := time.Now()
	reps, err := Run(ctx, Config{Archive: root, Hours: []time.Time{hour0}, K: 10, Shards: 4, Parts: 3,
		RequireClosed: true, Store: st, Runner: runner})
	if err != nil {
		t.Fatalf("recount failed during a Bigtable outage: %v", err)
	}
	took := time.Since(start)
	if took < 2*outage {
		t.Fatalf("recount took %v, less than the two outages: they were not exercised", took)
	}
	want := recounttest.Oracle(evs)
	if g := hourCounts(t, st, hour0, want); !maps.Equal(g, want) {
		t.Fatalf("hour counts after the outages: %d keys, want %d", len(g), len(want))
	}
	if reps[0].ExactUntil != store.HourKey(hour0.Add(time.Hour)) {
		t.Fatalf("exact_until %s", reps[0].ExactUntil)
	}
	t.Logf("recount done in %v through two %v outages", took.Round(time.Millisecond), outage)
}
