package api

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/topk-dev/topk/internal/retry"
	"github.com/topk-dev/topk/transforms/publish/liststore"
)

// The durable deny set.
//
// With Config.Removals set, the deny set's truth is a Bigtable table
// (store.PutRemoval and friends); Redis' hash is its cache, marked filled
// by a key (liststore.FillRemovals). A takedown is written to Bigtable
// first, then to Redis. The in-memory set that filters every response is
// only ever replaced by a Redis set that carries the filled marker: when
// the marker is missing (Redis restarted empty, or was flushed) the server
// refills Redis from Bigtable first, logs it, and keeps filtering with the
// set it had meanwhile. At start the server refills Redis before it loads
// any list, so no list is ever served without the filter.

// startRefillTimeout bounds the wait for Bigtable at start.
const startRefillTimeout = 15 * time.Second

// durableRemovals reads the deny set from Bigtable, sorted by type then
// item. Records that do not decode are skipped.
func (s *Server) durableRemovals(ctx context.Context) ([]liststore.Removal, error) {
	recs, err := s.cfg.Removals.Removals(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]liststore.Removal, 0, len(recs))
	for _, rec := range recs {
		var r liststore.Removal
		if err := json.Unmarshal(rec.Record, &r); err != nil || r.Type != rec.Type || r.Item != rec.Item {
			s.log.Error("removals: undecodable durable record, skipped", "type", rec.Type, "item", rec.Item, "err", err)
			continue
		}
		out = append(out, r)
	}
	sortRemovals(out)
	return out, nil
}

func sortRemovals(rs []liststore.Removal) {
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].Type != rs[j].Type {
			return rs[i].Type < rs[j].Type
		}
		return rs[i].Item < rs[j].Item
	})
}

// refillRemovals copies the durable deny set into Redis and marks it
// filled. The caller holds state.remMu.
func (s *Server) refillRemovals(ctx context.Context, why string) ([]liststore.Removal, error) {
	all, err := s.durableRemovals(ctx)
	if err != nil {
		s.metrics.refills.WithLabelValues("failed").Inc()
		return nil, fmt.Errorf("refill removals: read bigtable: %w", err)
	}
	if err := s.store.FillRemovals(ctx, all); err != nil {
		s.metrics.refills.WithLabelValues("failed").Inc()
		s.redisFailed("removals", err)
		return nil, fmt.Errorf("refill removals: %w", err)
	}
	s.metrics.refills.WithLabelValues("done").Inc()
	s.state.mu.Lock()
	s.state.needRefill = false
	s.state.mu.Unlock()
	// At start a refill is routine (Info); later it means Redis lost its
	// deny set (Warn).
	level := slog.LevelWarn
	if why == "start" {
		level = slog.LevelInfo
	}
	s.log.Log(ctx, level, "removals refilled from bigtable into redis", "why", why, "removals", len(all))
	return all, nil
}

// startRemovals runs at start, before any list is loaded: refill Redis
// from Bigtable (retrying while Bigtable or Redis is unavailable, up to
// startRefillTimeout). If that fails but Redis' set is marked filled, it is
// a complete cache and the server starts with it; otherwise New fails
// rather than serve lists without the filter.
func (s *Server) startRemovals(ctx context.Context) error {
	if s.cfg.Removals == nil {
		s.log.Warn("takedowns are kept in redis only: a redis that loses its data forgets them (configure the durable deny set: --removals_bigtable)")
		return nil
	}
	s.state.remMu.Lock()
	defer s.state.remMu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, startRefillTimeout)
	defer cancel()
	var all []liststore.Removal
	_, err := retry.Policy{Log: s.log, What: "refill removals at start"}.Do(rctx, func(ctx context.Context) error {
		var err error
		all, err = s.refillRemovals(ctx, "start")
		return err
	})
	if err == nil {
		s.setRemovals(all)
		return nil
	}
	cached, filled, rerr := s.store.RemovalsState(ctx)
	if rerr != nil || !filled {
		return fmt.Errorf("removals: the durable deny set is unreachable and redis holds no filled copy: %w", err)
	}
	s.log.Warn("removals: bigtable unreachable at start, using redis' filled copy", "removals", len(cached), "err", err)
	s.setRemovals(cached)
	return nil
}
