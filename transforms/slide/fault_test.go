package slide

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/state"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/timers"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/util/reflectx"

	"github.com/topk-dev/topk/transforms/summary"
)

// runnerState is a state.Provider with a runner's bundle semantics, over
// in-memory maps: a bundle's writes are pending (its reads see them, as
// Beam's state types replay them) until commit, and abort discards them,
// as a runner does with a failed bundle's. failWrites makes the next
// writes fail, as a state request to an unreachable runner does.
type runnerState struct {
	values     map[string]any
	maps       map[string]map[any]any
	pending    []state.Transaction
	failWrites int
}

var errStateDown = errors.New("state request failed")

func newRunnerState() *runnerState {
	return &runnerState{values: map[string]any{}, maps: map[string]map[any]any{}}
}

func (r *runnerState) pendingFor(id string) []state.Transaction {
	var out []state.Transaction
	for _, t := range r.pending {
		if t.Key == id {
			out = append(out, t)
		}
	}
	return out
}

func (r *runnerState) write(t state.Transaction, kind string) error {
	if r.failWrites > 0 {
		r.failWrites--
		return errStateDown
	}
	t.Key = kind + t.Key
	r.pending = append(r.pending, t)
	return nil
}

func (r *runnerState) commit() {
	for _, t := range r.pending {
		kind, id := t.Key[:1], t.Key[1:]
		switch {
		case kind == "v" && t.Type == state.TransactionTypeSet:
			r.values[id] = t.Val
		case kind == "v":
			delete(r.values, id)
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

func (r *runnerState) abort() { r.pending = nil }

// unprefixed is r's pending transactions of kind ("v" or "m") and state
// id, as the state types expect them.
func (r *runnerState) unprefixed(kind, id string) []state.Transaction {
	var out []state.Transaction
	for _, t := range r.pendingFor(kind + id) {
		t.Key = id
		out = append(out, t)
	}
	return out
}

func (r *runnerState) ReadValueState(id string) (any, []state.Transaction, error) {
	return r.values[id], r.unprefixed("v", id), nil
}
func (r *runnerState) WriteValueState(t state.Transaction) error { return r.write(t, "v") }
func (r *runnerState) ClearValueState(t state.Transaction) error { return r.write(t, "v") }
func (r *runnerState) ReadMapStateValue(id string, key any) (any, []state.Transaction, error) {
	return r.maps[id][key], r.unprefixed("m", id), nil
}
func (r *runnerState) ReadMapStateKeys(id string) ([]any, []state.Transaction, error) {
	var keys []any
	for k := range r.maps[id] {
		keys = append(keys, k)
	}
	return keys, r.unprefixed("m", id), nil
}
func (r *runnerState) WriteMapState(t state.Transaction) error    { return r.write(t, "m") }
func (r *runnerState) ClearMapStateKey(t state.Transaction) error { return r.write(t, "m") }
func (r *runnerState) ClearMapState(t state.Transaction) error    { return r.write(t, "m") }

// Not used by windowsFn.
func (r *runnerState) ReadBagState(string) ([]any, []state.Transaction, error) {
	return nil, nil, errors.New("no bag state")
}
func (r *runnerState) WriteBagState(state.Transaction) error    { return errors.New("no bag state") }
func (r *runnerState) ClearBagState(state.Transaction) error    { return errors.New("no bag state") }
func (r *runnerState) CreateAccumulatorFn(string) reflectx.Func { return nil }
func (r *runnerState) AddInputFn(string) reflectx.Func          { return nil }
func (r *runnerState) MergeAccumulatorsFn(string) reflectx.Func { return nil }
func (r *runnerState) ExtractOutputFn(string) reflectx.Func     { return nil }
func (r *runnerState) WriteOrderedListState(state.Transaction) error {
	return errors.New("no list state")
}
func (r *runnerState) ClearOrderedListState(state.Transaction) error {
	return errors.New("no list state")
}
func (r *runnerState) ReadOrderedListState(string) ([]any, []state.Transaction, error) {
	return nil, nil, errors.New("no list state")
}

type noTimers struct{}

func (noTimers) Set(timers.TimerMap) {}

// faultRig drives one partition of a windowsFn (a 1m window of 10 s
// buckets, one list) through bundles against a runnerState.
type faultRig struct {
	t  *testing.T
	fn *windowsFn
	sp *runnerState
}

const faultList = "video\x00global"

func newFaultRig(t *testing.T) *faultRig {
	cfg := BeamConfig{
		Config: Config{Bucket: 10 * time.Second, Limit: 100,
			Windows: []Window{{Name: "1m", Length: time.Minute, Period: 10 * time.Second}}},
		Shards: 1, Durable: true,
	}
	return &faultRig{t: t, fn: newWindowsFn(cfg), sp: newRunnerState()}
}

// add runs a bundle of one element: bucket b's set with count of "a".
func (r *faultRig) add(b int64, count uint64) error {
	r.t.Helper()
	set, err := summary.AppendSet(nil, []string{faultList}, []*summary.Summary{summarize(map[string]uint64{"a": count}, 8)})
	if err != nil {
		r.t.Fatal(err)
	}
	none := func(beam.EventTime, string, []byte) {}
	return r.fn.ProcessElement(context.Background(), beam.EventTime(b+1), r.sp, noTimers{}, "p0", set, none, none)
}

// bundle runs a bundle of one element (add) that succeeds, and commits
// it.
func (r *faultRig) bundle(b int64, count uint64) {
	r.t.Helper()
	if err := r.add(b, count); err != nil {
		r.t.Fatal(err)
	}
	r.sp.commit()
}

// faultT0 is the first bucket the fault tests add.
const faultT0 = int64(1_780_000_000_000)

// fire runs the slide ending at end as a bundle of its own and returns
// the list's count of "a" in its 1m window (0 if the slide emitted none).
// The caller commits or aborts.
func (r *faultRig) fire(end int64) (uint64, error) {
	r.t.Helper()
	var got uint64
	emit := func(_ beam.EventTime, _ string, set []byte) {
		err := summary.EachInSet(set, func(list string, smb []byte) error {
			sm, err := summary.Unmarshal(smb)
			if err == nil && list == faultList {
				if e := sm.Find("a"); e != nil {
					got = e.Lo
				}
			}
			return err
		})
		if err != nil {
			r.t.Fatal(err)
		}
	}
	none := func(beam.EventTime, string, []byte) {}
	tc := timers.Context{Family: r.fn.Slide.Family, Tag: strconv.FormatInt(end, 10)}
	err := r.fn.OnTimer(context.Background(), beam.EventTime(end), r.sp, noTimers{}, "p0", tc, emit, none)
	return got, err
}

// slide is fire, succeeding and committed.
func (r *faultRig) slide(end int64) uint64 {
	r.t.Helper()
	got, err := r.fire(end)
	if err != nil {
		r.t.Fatal(err)
	}
	r.sp.commit()
	return got
}

// A bundle that fails after its element changed the cached State (here a
// state write fails) is retried: the retry counts the bucket once. The
// cache must not keep the failed bundle's change, which the runner
// discarded with its state writes.
func TestWindowsFnRetryAfterFailedWrite(t *testing.T) {
	r := newFaultRig(t)
	t0 := faultT0
	r.bundle(t0, 3)
	r.sp.failWrites = 1 // the pane's write fails
	if err := r.add(t0+bucketMs, 5); !errors.Is(err, errStateDown) {
		t.Fatalf("bundle with a failed write: %v, want %v", err, errStateDown)
	}
	r.sp.abort()
	r.bundle(t0+bucketMs, 5) // the retry
	if got := r.slide(t0 + 2*bucketMs); got != 8 {
		t.Fatalf("a counts %d after the retry, want 3 + 5 = 8", got)
	}
}

// A bundle whose state writes the runner discards after the DoFn returned
// (a later step of the bundle failed), then a bundle processed elsewhere
// (another worker, which rebuilt from Beam state), then the key back on
// this worker: its cache holds the failed bundle's State, and must see
// that Beam state moved on without it.
func TestWindowsFnCacheAfterBundleElsewhere(t *testing.T) {
	r := newFaultRig(t)
	t0 := faultT0
	r.bundle(t0, 3)
	if err := r.add(t0+bucketMs, 100); err != nil {
		t.Fatal(err)
	}
	r.sp.abort() // the bundle failed after this step
	// Another worker takes the key: it has no cache for it.
	k := r.fn.ID + "\x00p0"
	mine, _ := cache.Load(k)
	cache.Delete(k)
	r.bundle(t0+bucketMs, 5)
	cache.Store(k, mine) // back on this worker
	if got := r.slide(t0 + 2*bucketMs); got != 8 {
		t.Fatalf("a counts %d, want 3 + 5 = 8 (the discarded bundle's 100 must not count)", got)
	}
}

// A slide whose bundle fails (here the write of the last slide fired) is
// retried and emits the window: the cache must not keep the failed
// slide's "fired", or the retry would take it for a slide armed twice and
// emit nothing, and the lists of that as_of would never be published.
func TestWindowsFnSlideRetry(t *testing.T) {
	r := newFaultRig(t)
	r.bundle(faultT0, 3)
	r.sp.failWrites = 1
	if _, err := r.fire(faultT0 + bucketMs); !errors.Is(err, errStateDown) {
		t.Fatalf("slide with a failed write: %v, want %v", err, errStateDown)
	}
	r.sp.abort()
	if got := r.slide(faultT0 + bucketMs); got != 3 {
		t.Fatalf("the retried slide emitted a = %d, want 3", got)
	}
}
