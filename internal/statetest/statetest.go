// Package statetest is a Beam state.Provider with a runner's bundle
// semantics, for unit tests of stateful DoFns under failures: a bundle's
// writes are pending (its own reads see them, as Beam's state types replay
// them) until Commit, and Abort discards them, as a runner does with a
// failed bundle's. FailWrites makes the next writes fail, as a state
// request to an unreachable runner does. Value, map and bag states; one
// key and window (a test drives one key per Runner). A DoFn's methods are
// called directly with it (and NoTimers), so a test can fail, discard or
// retry each bundle as a runner would, which no runner here does: Prism
// ends the job on a failed bundle.
package statetest

import (
	"errors"
	"slices"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/state"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/timers"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/util/reflectx"
)

// ErrDown is what a write returns while FailWrites > 0.
var ErrDown = errors.New("statetest: state request failed")

// Runner is the state of one key, committed and pending.
type Runner struct {
	// FailWrites is how many of the next writes fail with ErrDown.
	FailWrites int
	// Reads counts the read requests by state id (a value, a map's value
	// or keys, a bag), so that a test can tell what a call read.
	Reads map[string]int

	values  map[string]any
	maps    map[string]map[any]any
	bags    map[string][]any
	pending []state.Transaction // Key: kind ("v", "m", "b") + state id
}

// New returns an empty Runner.
func New() *Runner {
	return &Runner{values: map[string]any{}, maps: map[string]map[any]any{}, bags: map[string][]any{}, Reads: map[string]int{}}
}

// Commit applies the bundle's pending writes, in order.
func (r *Runner) Commit() {
	for _, t := range r.pending {
		kind, id := t.Key[:1], t.Key[1:]
		switch {
		case kind == "v" && t.Type == state.TransactionTypeSet:
			r.values[id] = t.Val
		case kind == "v":
			delete(r.values, id)
		case kind == "b" && t.Type == state.TransactionTypeAppend:
			r.bags[id] = append(r.bags[id], t.Val)
		case kind == "b":
			delete(r.bags, id)
		case t.Type == state.TransactionTypeSet:
			if r.maps[id] == nil {
				r.maps[id] = map[any]any{}
			}
			r.maps[id][t.MapKey] = t.Val
		case t.MapKey == nil:
			delete(r.maps, id)
		default:
			delete(r.maps[id], t.MapKey)
		}
	}
	r.pending = nil
}

// Abort discards the bundle's pending writes.
func (r *Runner) Abort() { r.pending = nil }

func (r *Runner) write(t state.Transaction, kind string) error {
	if r.FailWrites > 0 {
		r.FailWrites--
		return ErrDown
	}
	t.Key = kind + t.Key
	r.pending = append(r.pending, t)
	return nil
}

// pendingOf is the pending transactions of kind and state id, keyed by
// the id alone, as the state types expect them.
func (r *Runner) pendingOf(kind, id string) []state.Transaction {
	var out []state.Transaction
	for _, t := range r.pending {
		if t.Key == kind+id {
			t.Key = id
			out = append(out, t)
		}
	}
	return out
}

func (r *Runner) ReadValueState(id string) (any, []state.Transaction, error) {
	r.Reads[id]++
	return r.values[id], r.pendingOf("v", id), nil
}
func (r *Runner) WriteValueState(t state.Transaction) error { return r.write(t, "v") }
func (r *Runner) ClearValueState(t state.Transaction) error { return r.write(t, "v") }

func (r *Runner) ReadMapStateValue(id string, key any) (any, []state.Transaction, error) {
	r.Reads[id]++
	return r.maps[id][key], r.pendingOf("m", id), nil
}
func (r *Runner) ReadMapStateKeys(id string) ([]any, []state.Transaction, error) {
	r.Reads[id]++
	var keys []any
	for k := range r.maps[id] {
		keys = append(keys, k)
	}
	return keys, r.pendingOf("m", id), nil
}
func (r *Runner) WriteMapState(t state.Transaction) error    { return r.write(t, "m") }
func (r *Runner) ClearMapStateKey(t state.Transaction) error { return r.write(t, "m") }
func (r *Runner) ClearMapState(t state.Transaction) error    { return r.write(t, "m") }

func (r *Runner) ReadBagState(id string) ([]any, []state.Transaction, error) {
	r.Reads[id]++
	return slices.Clone(r.bags[id]), r.pendingOf("b", id), nil
}
func (r *Runner) WriteBagState(t state.Transaction) error { return r.write(t, "b") }
func (r *Runner) ClearBagState(t state.Transaction) error { return r.write(t, "b") }

// Combining and ordered-list states are not modelled.
var errNotModelled = errors.New("statetest: state type not modelled")

func (r *Runner) CreateAccumulatorFn(string) reflectx.Func { return nil }
func (r *Runner) AddInputFn(string) reflectx.Func          { return nil }
func (r *Runner) MergeAccumulatorsFn(string) reflectx.Func { return nil }
func (r *Runner) ExtractOutputFn(string) reflectx.Func     { return nil }
func (r *Runner) ReadOrderedListState(string) ([]any, []state.Transaction, error) {
	return nil, nil, errNotModelled
}
func (r *Runner) WriteOrderedListState(state.Transaction) error { return errNotModelled }
func (r *Runner) ClearOrderedListState(state.Transaction) error { return errNotModelled }

var _ state.Provider = (*Runner)(nil)

// NoTimers is a timers.Provider that drops the timers a DoFn sets: the
// test calls OnTimer itself, when the watermark would pass them.
type NoTimers struct{}

// Set drops t.
func (NoTimers) Set(timers.TimerMap) {}
