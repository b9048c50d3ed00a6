package liststore

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/topk-dev/topk/internal/retry"
	"github.com/topk-dev/topk/schemas"
)

// Publisher publishes lists through a Store and rides out Redis outages.
// Offer queues a list version; Flush publishes everything queued, retrying
// transient errors (Redis down, restarting, frozen, loading) with capped
// backoff for as long as it takes, or until its context ends.
//
// Newest wins: the queue holds one version per list. Offering a newer
// version replaces a queued older one (the older one is never published),
// and an older version than the one queued is dropped; so after an outage
// each list jumps straight to its newest version. The publish script never
// moves a pointer backwards either, so no older version overwrites a newer
// one, whichever publisher wrote the newer one.
//
// Redis is a cache of the pipeline's output: what is queued when the
// process dies is lost, and the next version of the list (the next slide)
// replaces it. A Publisher is safe for concurrent use; Offer never blocks on
// Redis.
type Publisher struct {
	st     *Store
	policy retry.Policy

	mu      sync.Mutex
	pending map[schemas.ListKey]queued
	stats   PublisherStats
}

// queued is one list version waiting to be published.
type queued struct {
	n    int64
	blob []byte
}

// PublisherStats are a Publisher's totals.
type PublisherStats struct {
	Published  int64 // versions written (the script ran)
	Moved      int64 // of which moved the pointer
	Superseded int64 // versions dropped for a newer one of the same list before they were written
	Failures   int64 // failed attempts (each followed by a backoff wait)
}

// NewPublisher returns a Publisher on st. log (nil: slog.Default()) gets one
// line when an outage starts and one when it ends.
func NewPublisher(st *Store, log *slog.Logger) *Publisher {
	if log == nil {
		log = slog.Default()
	}
	return &Publisher{
		st:      st,
		policy:  retry.Policy{Log: log, What: "publish lists to redis"},
		pending: make(map[schemas.ListKey]queued),
	}
}

// Offer queues version n of list k (blob as for PublishRaw). It reports
// false when a version at least as new is already queued (then this one is
// dropped).
func (p *Publisher) Offer(k schemas.ListKey, n int64, blob []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if q, ok := p.pending[k]; ok {
		if q.n >= n {
			p.stats.Superseded++
			return false
		}
		p.stats.Superseded++
	}
	p.pending[k] = queued{n: n, blob: blob}
	return true
}

// Pending is the number of lists queued.
func (p *Publisher) Pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pending)
}

// Stats returns the totals so far.
func (p *Publisher) Stats() PublisherStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Flush publishes every queued list, newest version of each, in key order.
// A transient error is retried with backoff (an Offer meanwhile replaces the
// version being retried) until it succeeds or ctx ends; moved counts pointer
// moves. A non-transient error (a list that fails validation, a script
// error: a bug, not an outage) drops that list and is returned after the
// rest are published.
func (p *Publisher) Flush(ctx context.Context) (moved int, err error) {
	var errs []error
	for {
		k, ok := p.next()
		if !ok {
			break
		}
		var sent queued
		failures, perr := p.policy.Do(ctx, func(ctx context.Context) error {
			p.mu.Lock()
			q, ok := p.pending[k]
			p.mu.Unlock()
			if !ok {
				return nil // published by a concurrent Flush
			}
			sent = q
			m, err := p.st.PublishRaw(ctx, k, q.n, q.blob)
			if err != nil {
				return err
			}
			p.mu.Lock()
			p.stats.Published++
			if m {
				p.stats.Moved++
				moved++
			}
			p.mu.Unlock()
			return nil
		})
		p.mu.Lock()
		p.stats.Failures += int64(failures)
		if q, ok := p.pending[k]; ok && (perr == nil || !retry.Transient(perr)) && q.n == sent.n {
			delete(p.pending, k)
		}
		p.mu.Unlock()
		if perr != nil {
			if ctx.Err() != nil {
				return moved, fmt.Errorf("publish lists: %w", perr)
			}
			errs = append(errs, fmt.Errorf("publish %s v%d: %w", k, sent.n, perr))
		}
	}
	if len(errs) > 0 {
		return moved, fmt.Errorf("publish lists: %w", errs[0])
	}
	return moved, nil
}

// next returns the smallest queued key.
func (p *Publisher) next() (schemas.ListKey, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.pending) == 0 {
		return schemas.ListKey{}, false
	}
	keys := make([]schemas.ListKey, 0, len(p.pending))
	for k := range p.pending {
		keys = append(keys, k)
	}
	return slices.MinFunc(keys, func(a, b schemas.ListKey) int {
		switch {
		case a.String() < b.String():
			return -1
		case a.String() > b.String():
			return 1
		}
		return 0
	}), true
}
