// Package beamrun runs a pipeline on the runner Beam's --runner flag names
// (Prism in-process when unset) and reads back one namespace's counters: the
// one way every topk pipeline command runs.
package beamrun

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/x/beamx"

	"github.com/topk-dev/topk/internal/prismopt"
)

// Counters runs p with beamx.RunWithMetrics and returns the counters of
// namespace, summed over steps. On Prism, its dynamic splitting is turned
// off first (prismopt: a split stateful bundle lost or double-fired
// sliding-window panes).
//
// On Prism the committed counters are not exact: a counter of the
// summaries the list merge received read 5,616 where its DoFn had logged
// 5,648 (2 of 3 runs, 2026-12-02), so they report what a run did but
// cannot prove that no element was lost (a conservation check by counters
// was tried and dropped; the replay tests check list totals instead).
// That was measured with Prism's splitting on; split bundles may have been
// the cause, but it was not measured again.
func Counters(ctx context.Context, p *beam.Pipeline, namespace string) (map[string]int64, error) {
	prismopt.Apply()
	res, err := beamx.RunWithMetrics(ctx, p)
	if err != nil {
		return nil, err
	}
	m := map[string]int64{}
	if res == nil {
		return m, nil
	}
	for _, c := range res.Metrics().AllMetrics().Counters() {
		if c.Namespace() == namespace {
			m[c.Name()] += c.Result()
		}
	}
	return m, nil
}

// CPUProfile starts a CPU profile of the whole process into path (Prism runs
// in-process, so the pipeline is in it); "" profiles nothing. Call stop when
// the run ends.
func CPUProfile(path string) (stop func(), err error) {
	return CPUProfileWindow(path, 0, 0)
}

// CPUProfileWindow is CPUProfile over part of the run: from `from` after
// the call until `to` after it (to 0: until stop), so that a streaming
// job's steady state can be profiled without its start-up and
// end-of-input flush, which weigh differently on each stage
// (BENCHMARKS.md, "Trending's cost in steady state"). A stop before
// `from` writes an empty file.
func CPUProfileWindow(path string, from, to time.Duration) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if from <= 0 && to <= 0 {
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, err
		}
		return func() { pprof.StopCPUProfile(); f.Close() }, nil
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		defer f.Close()
		select {
		case <-done:
			return
		case <-time.After(from):
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			slog.Error("cpu profile", "err", err)
			return
		}
		defer pprof.StopCPUProfile()
		if to <= 0 {
			<-done
			return
		}
		select {
		case <-done:
		case <-time.After(to - from):
		}
	}()
	return func() { close(done); <-finished }, nil
}

// HeapProfile writes the heap profile (in use and allocated, as pprof's
// heap profile holds both) to path at the largest in-use heap the run
// reaches: the heap is checked every interval, and the profile rewritten
// whenever it is bigger than at the last write. "" profiles nothing. Call
// stop when the run ends.
func HeapProfile(path string, interval time.Duration) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	// Fail now on a path that cannot be written, not at the first peak.
	if err := writeHeapProfile(path); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(interval)
		defer t.Stop()
		var peak uint64
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse <= peak {
				continue
			}
			peak = ms.HeapInuse
			if err := writeHeapProfile(path); err != nil {
				slog.Warn("heap profile", "path", path, "err", err)
				return
			}
			slog.Info("heap profile written", "path", path, "heap_inuse_mb", peak>>20)
		}
	}()
	return func() { close(done); <-finished }, nil
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Main is a pipeline command's main after its flags are defined: it parses
// them, calls beam.Init (the binary is also the worker on portable runners),
// runs run with a context cancelled on SIGTERM or Ctrl-C, and exits 1 with
// the error logged under name. On Dataflow's --dry_run, Beam's log (the
// pipeline and the translated job, tens of KB) goes to a file and one line
// says where.
func Main(name string, run func(context.Context) error) {
	flag.Parse()
	beam.Init() // first call after flags: this binary is also the worker
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	dryRunDone, err := logDryRun(name)
	if err == nil {
		err = run(ctx)
		dryRunDone()
	}
	if err != nil {
		slog.Error(name, "err", err)
		stop()
		os.Exit(1)
	}
}
