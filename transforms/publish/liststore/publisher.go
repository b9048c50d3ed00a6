package liststore

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/topk-dev/topk/internal/retry"
	"github.com/topk-dev/topk/internal/stagemetrics"
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
		keys := p.queuedKeys()
		if len(keys) == 0 {
			break
		}
		for _, k := range keys {
			m, err := p.publishOne(ctx, k)
			moved += m
			if err != nil {
				if ctx.Err() != nil {
					return moved, fmt.Errorf("publish lists: %w", err)
				}
				errs = append(errs, err)
			}
		}
	}
	if len(errs) > 0 {
		return moved, fmt.Errorf("publish lists: %w", errs[0])
	}
	return moved, nil
}

// publishOne publishes the newest queued version of k, retrying transient
// errors; the version retried is re-read before every attempt, so an Offer
// during an outage replaces it.
func (p *Publisher) publishOne(ctx context.Context, k schemas.ListKey) (moved int, err error) {
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
	defer p.mu.Unlock()
	p.stats.Failures += int64(failures)
	stagemetrics.PublishFailures(failures)
	// Done with this version: written, or dropped for a non-transient
	// error. A newer one offered meanwhile stays queued.
	if q, ok := p.pending[k]; ok && (perr == nil || !retry.Transient(perr)) && q.n == sent.n {
		delete(p.pending, k)
	}
	if perr != nil {
		return moved, fmt.Errorf("publish %s v%d: %w", k, sent.n, perr)
	}
	return moved, nil
}

// queuedKeys returns the queued keys in order.
func (p *Publisher) queuedKeys() []schemas.ListKey {
	p.mu.Lock()
	keys := make([]schemas.ListKey, 0, len(p.pending))
	for k := range p.pending {
		keys = append(keys, k)
	}
	p.mu.Unlock()
	slices.SortFunc(keys, func(a, b schemas.ListKey) int { return strings.Compare(a.String(), b.String()) })
	return keys
}
