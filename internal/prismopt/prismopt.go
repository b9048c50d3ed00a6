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
package prismopt

import (
	"slices"
	"strings"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/options/jobopts"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners"
)

// NoSplit is Prism's experiment that turns its dynamic splitting off.
const NoSplit = "prism_disable_sdf_split"

// Apply adds NoSplit to Beam's --experiments when the pipeline is to run on
// Prism: the runner flag unset (beamx and ptest default to Prism), "prism"
// or "PrismRunner", or "universal" (a job server: Prism is the one this
// repository documents; other job servers ignore an experiment they do
// not know). Call it after flags are parsed and before the run; calling it
// again changes nothing.
func Apply() {
	switch *runners.Runner {
	case "", "prism", "PrismRunner", "universal":
	default:
		return
	}
	exps := jobopts.GetExperiments()
	if slices.Contains(exps, NoSplit) {
		return
	}
	*jobopts.Experiments = strings.Join(append(exps, NoSplit), ",")
}
