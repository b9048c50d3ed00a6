package fastpath

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"

	"github.com/topk-dev/topk/pipelines/internal/beamrun"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/publish/liststore"
)

// BeamRunner runs p with beamx.RunWithMetrics (the runner named by Beam's
// --runner flag; Prism in-process when unset) and returns the "topk"
// counters summed over steps.
func BeamRunner(ctx context.Context, p *beam.Pipeline) (Metrics, error) {
	m, err := beamrun.Counters(ctx, p, "topk")
	return Metrics(m), err
}

// LagObserver measures publish lag as a reader sees it: for every pointer
// move of a 1m list, the wall time the notification arrived minus the list's
// as_of. It only means something when event time is wall time (synthetic and
// Pub/Sub sources).
type LagObserver struct {
	mu   sync.Mutex
	lags []float64 // ms
	stop context.CancelFunc
	done chan struct{}
}

// ObserveLag subscribes to st's notifications until Stop.
func ObserveLag(ctx context.Context, st *liststore.Store) (*LagObserver, error) {
	ctx, cancel := context.WithCancel(ctx)
	ch, err := st.Subscribe(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	o := &LagObserver{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		for k := range ch {
			if k.Window != schemas.Window1m {
				continue
			}
			at := time.Now()
			_, asOf, err := st.CurrentHeader(ctx, k)
			if err != nil {
				continue
			}
			if asOf.After(at) {
				// Flushed before its window ended: the end of a finite input
				// moves the watermark to infinity. Not a steady-state lag.
				continue
			}
			o.mu.Lock()
			o.lags = append(o.lags, float64(at.Sub(asOf).Milliseconds()))
			o.mu.Unlock()
		}
	}()
	return o, nil
}

// Stop ends the subscription and returns the lag percentiles (ms), 0 when
// nothing was observed.
func (o *LagObserver) Stop() (p50, p99 float64) {
	o.stop()
	<-o.done
	o.mu.Lock()
	defer o.mu.Unlock()
	return Percentile(o.lags, 0.50), Percentile(o.lags, 0.99)
}

// Snapshot returns the percentiles so far without stopping.
func (o *LagObserver) Snapshot() (p50, p99 float64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return Percentile(o.lags, 0.50), Percentile(o.lags, 0.99)
}

// Count is the number of lag samples so far.
func (o *LagObserver) Count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.lags)
}

// Percentile is the nearest-rank percentile q of xs (0 for none).
func Percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}
