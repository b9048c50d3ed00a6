// Package prismopt sets the Beam options topk's pipelines need on Prism,
// Beam's local runner (the default of beamx and ptest), before they run.
//
// Prism splits a bundle that makes no visible progress for a while (its
// dynamic splitting, on by default, for every stage: a stage does not have
// to be splittable). On a stateful stage the split is not safe (Beam
// 2.77.0, engine.stageState.splitBundle): it releases the keys of the
// split-off elements while the bundle that keeps running still holds
// elements of the same keys, so a second bundle of one key can start
// before the first has committed its state, read the state as it was
// before the first, and overwrite what the first wrote. The same applies
// to timers split off a timer bundle (the runner logs "Unexpected split
// on a bundle with timers", apache/beam#35771, open). In topk that showed
// as sliding windows that lost or double-fired panes when a slow bundle
// was split under CPU load: rare (2 of about 50 replays, each while a
// whole `go test ./...` shared the 2-core machine), and reproduced
// directly by TestSlowStatefulBundles, whose slow elements get split.
//
// Apply turns dynamic splitting off with Prism's own experiment,
// prism_disable_sdf_split. No topk stage needs runner-initiated splits:
// the sources are bounded reads by one worker or readers that checkpoint
// themselves (their residuals come back with the bundle, not from a
// split). Dataflow and Flink keep a key to one worker at a time whatever
// they split, so they are left alone.
//
// Apply also gives an in-process Prism more Go processors than the
// machine's cores (Procs). Prism's per-bundle progress loop
// (internal.stage.Execute, Beam 2.77.0 and 2.78.0) keeps selecting on the
// bundle's data channel after that channel has closed, so from the moment
// the SDK has sent a bundle's last output until its response arrives the
// loop spins: 55 million selects for about 2,100 bundles in the
// 80-minute replay, 7.3 of its 69 CPU-s (BENCHMARKS.md, "A quiet
// machine, and Prism's progress loop that spins"). While a spinning loop
// holds one of a 2-core machine's two processors, the SDK harness and
// gRPC goroutines that would end the wait queue behind it for a scheduler
// time slice. With six processors more than GOMAXPROCS's default they get
// one at once: 6 million selects in the same replay, and the CPU of a
// patched runner without the spin (9% less than without the extra
// processors, the same list files, on a 2-core Intel Xeon; on a 2-core
// AMD EPYC VM, whose context switches cost more, the replay's CPU was the
// same with and without them: BENCHMARKS.md, "Fewer early flushes"). The
// fix belongs in Beam (forget the data
// channel once it has closed); this is what a pipeline can do from outside.
package prismopt

import (
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/options/jobopts"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners"
)

// NoSplit is Prism's experiment that turns its dynamic splitting off.
const NoSplit = "prism_disable_sdf_split"

// Apply adds NoSplit to Beam's --experiments when the pipeline is to run on
// Prism: the runner flag unset (beamx and ptest default to Prism), "prism"
// or "PrismRunner", or "universal" (a job server: Prism is the one this
// repository documents; other job servers ignore an experiment they do
// not know). For Prism in-process (not "universal": that runner is
// another process) it also raises GOMAXPROCS to Procs. Call it after flags
// are parsed and before the run; calling it again changes nothing.
func Apply() {
	switch {
	case InProcess():
		raiseProcs.Do(func() { runtime.GOMAXPROCS(Procs(runtime.GOMAXPROCS(0), os.Getenv("GOMAXPROCS"))) })
	case *runners.Runner == "universal":
	default:
		return
	}
	exps := jobopts.GetExperiments()
	if slices.Contains(exps, NoSplit) {
		return
	}
	*jobopts.Experiments = strings.Join(append(exps, NoSplit), ",")
}

// InProcess reports whether the pipeline is to run on Prism in this
// process: Beam's --runner unset (beamx and ptest default to Prism),
// "prism" or "PrismRunner". Beam state then lives in this process's
// memory and dies with it, and Prism ends the job at a bundle's first
// failure rather than retrying it.
func InProcess() bool {
	switch *runners.Runner {
	case "", "prism", "PrismRunner":
		return true
	}
	return false
}

// ExtraProcs is how many Go processors Apply adds for an in-process Prism
// above GOMAXPROCS's default (the cores, or the container's CPU limit).
// Measured on 2 cores (the 80-minute replay): 2 more took Prism's
// spinning selects from 55 to 11 million, 6 more to 6 million; the spins
// are one per running bundle, so they follow the pipeline's stages, not
// the cores, and the extra is a constant rather than a multiple.
const ExtraProcs = 6

// Procs is the GOMAXPROCS Apply sets for Prism in-process, given the
// current one and the GOMAXPROCS environment variable: the user's choice
// when the variable is set, else the current one plus ExtraProcs.
func Procs(cur int, env string) int {
	if env != "" {
		return cur
	}
	return cur + ExtraProcs
}

// raiseProcs makes Apply raise GOMAXPROCS once a process.
var raiseProcs sync.Once
