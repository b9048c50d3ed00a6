package api

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash/fnv"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/serving/catalogue"
	"github.com/topk-dev/topk/serving/cdn"
	"github.com/topk-dev/topk/transforms/publish/liststore"
)

// catalog is the immutable set of lists held, swapped whole when a list
// appears (rare); reads load it with one atomic pointer.
type catalog struct {
	lists      map[schemas.ListKey]*listSlot
	keys       []schemas.ListKey // sorted
	types      map[string]bool   // published types and Config.Types
	scopes     map[string]bool   // "global" and published scopes
	typeNames  []string          // sorted, for error messages
	scopeNames []string
}

// listSlot holds the current version of one list.
type listSlot struct {
	key schemas.ListKey
	cur atomic.Pointer[listVersion]
	// surrogate is the Surrogate-Key header of the list's responses.
	surrogate []string
}

// listVersion is one version of a list as held in memory, with its rendered
// responses.
type listVersion struct {
	// list is the version held; for a trending list (window "trending") it
	// is only the header (key, as_of, version, stale) and trend holds the
	// list itself.
	list  *schemas.List
	trend *schemas.Trending
	// prev is the version that was current before it in Redis (the
	// liststore `prev` pointer), which `change` is derived from; nil when
	// none is held (and for trending lists).
	prev *schemas.List
	// info holds the catalogue entries of the list's items (nil: none).
	info   map[string]catalogue.Entry
	seenAt time.Time // when this server first saw this version
	// renders caches the response per [stale][k]; an entry is valid for the
	// removals generation it was rendered for.
	renders [2][MaxK + 1]atomic.Pointer[rendered]
	cached  atomic.Int64 // bytes held in renders
}

// rendered is one response body, ready to write.
type rendered struct {
	gen  uint64 // removals generation
	body []byte
	etag string
	// Header values, built once so that a read allocates none.
	etagHdr, gzEtagHdr, lenHdr []string

	gzOnce   sync.Once
	gz       []byte
	gzLenHdr []string
}

// removalSet is the immutable deny set; gen changes whenever it does.
type removalSet struct {
	gen    uint64
	byType map[string]map[string]bool
	all    []liststore.Removal
}

func newCatalog(slots map[schemas.ListKey]*listSlot, declared []string) *catalog {
	c := &catalog{lists: slots, types: map[string]bool{}, scopes: map[string]bool{schemas.ScopeGlobal: true}}
	for _, t := range declared {
		c.types[t] = true
	}
	for k := range slots {
		c.keys = append(c.keys, k)
		c.types[k.Type] = true
		c.scopes[k.Scope] = true
	}
	sort.Slice(c.keys, func(i, j int) bool { return c.keys[i].String() < c.keys[j].String() })
	for t := range c.types {
		c.typeNames = append(c.typeNames, t)
	}
	for s := range c.scopes {
		c.scopeNames = append(c.scopeNames, s)
	}
	sort.Strings(c.typeNames)
	sort.Strings(c.scopeNames)
	return c
}

func newRemovalSet(gen uint64, all []liststore.Removal) *removalSet {
	rs := &removalSet{gen: gen, byType: map[string]map[string]bool{}, all: all}
	for _, r := range all {
		m := rs.byType[r.Type]
		if m == nil {
			m = map[string]bool{}
			rs.byType[r.Type] = m
		}
		m[r.Item] = true
	}
	return rs
}

func sameRemovals(a, b []liststore.Removal) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Type != b[i].Type || a[i].Item != b[i].Item {
			return false
		}
	}
	return true
}

// response returns the rendered response of the first k entries, rendering
// and caching it on first use. Safe for concurrent use; two concurrent first
// uses may both render (the result is identical).
func (v *listVersion) response(k int, stale bool, rs *removalSet, budget int64, m *metrics) *rendered {
	si := 0
	if stale {
		si = 1
	}
	p := &v.renders[si][k]
	if r := p.Load(); r != nil && r.gen == rs.gen {
		return r
	}
	var r *rendered
	if v.trend != nil {
		r = renderTrending(v.trend, k, stale, rs)
	} else {
		r = renderList(v, k, stale, rs)
	}
	if v.cached.Add(int64(len(r.body))) <= budget {
		p.Store(r)
		m.renders.WithLabelValues("cached").Inc()
	} else {
		v.cached.Add(-int64(len(r.body)))
		m.renders.WithLabelValues("uncached").Inc()
	}
	return r
}

// topEntry is one entry of a /v1/top response: the list's entry, its rank
// change since the previous version, and its catalogue entry.
type topEntry struct {
	schemas.Entry
	Change    string `json:"change,omitempty"`
	Title     string `json:"title,omitempty"`
	Thumbnail string `json:"thumbnail,omitempty"`
}

// topResponse is a /v1/top response: the list (its items replaced) and
// whether its counts are approximate.
type topResponse struct {
	schemas.List
	Approximate bool       `json:"approximate"`
	Items       []topEntry `json:"items"`
}

// renderList builds the response for the first k entries of v's list that
// are not removed (see the package doc for certified_k, complete, stale,
// change and approximate).
func renderList(v *listVersion, k int, stale bool, rs *removalSet) *rendered {
	l := v.list
	deny := rs.byType[l.Type]
	prevRank := prevRanks(v.prev, deny)
	items := make([]topEntry, 0, min(k, len(l.Items)))
	certKept := 0 // kept entries among the list's first CertifiedK
	exact := l.ExactUntil != nil && !l.ExactUntil.Before(l.AsOf)
	for i := range l.Items {
		if len(items) == k {
			break
		}
		e := topEntry{Entry: l.Items[i]}
		if deny[e.Item] {
			continue
		}
		if i < l.CertifiedK {
			certKept++
		}
		e.Rank = len(items) + 1
		e.Change = change(prevRank, e.Item, e.Rank)
		if e.Count != e.Lower {
			exact = false
		}
		e.Title, e.Thumbnail = v.info[e.Item].Title, v.info[e.Item].Thumbnail
		items = append(items, e)
	}
	out := topResponse{List: *l, Items: items}
	out.List.Items = nil
	out.CertifiedK = min(k, certKept)
	out.Complete = l.Complete && out.CertifiedK == len(items)
	out.Stale = l.Stale || stale
	out.Approximate = !exact || out.CertifiedK != len(items)
	body, err := json.Marshal(&out)
	if err != nil {
		// A List always marshals; reaching here is a programmer error.
		panic("api: marshal list: " + err.Error())
	}
	return newRendered(body, l.Version, rs.gen)
}

// newRendered wraps a response body of a list version with its strong ETag
// (version and a hash of the body) and header values.
func newRendered(body []byte, version int64, gen uint64) *rendered {
	h := fnv.New64a()
	h.Write(body)
	sum := hex.EncodeToString(h.Sum(nil))
	ver := itoa(version)
	etag := `"` + ver + "-" + sum + `"`
	return &rendered{
		gen:       gen,
		body:      body,
		etag:      etag,
		etagHdr:   []string{etag},
		gzEtagHdr: []string{`"` + ver + "-" + sum + `-gz"`},
		lenHdr:    []string{strconv.Itoa(len(body))},
	}
}

// prevRanks numbers the previous version's items that are not removed, 1
// first, as the previous response showed them; nil without a previous
// version.
func prevRanks(prev *schemas.List, deny map[string]bool) map[string]int {
	if prev == nil {
		return nil
	}
	out := make(map[string]int, len(prev.Items))
	for i := range prev.Items {
		if it := prev.Items[i].Item; !deny[it] {
			out[it] = len(out) + 1
		}
	}
	return out
}

// change is an entry's rank movement since the previous version: "+2" (up
// two places), "-1", "=" or "new" (not in the previous version); "" when no
// previous version is held.
func change(prevRank map[string]int, item string, rank int) string {
	if prevRank == nil {
		return ""
	}
	p, ok := prevRank[item]
	switch {
	case !ok:
		return "new"
	case p == rank:
		return "="
	case p > rank:
		return "+" + strconv.Itoa(p-rank)
	}
	return "-" + strconv.Itoa(rank-p)
}

// gzipped returns the gzip form of the body and its Content-Length header,
// compressed once.
func (r *rendered) gzipped() ([]byte, []string) {
	r.gzOnce.Do(func() {
		r.gz = gzipBytes(r.body)
		r.gzLenHdr = []string{strconv.Itoa(len(r.gz))}
	})
	return r.gz, r.gzLenHdr
}

// state is what the read path loads: the catalog and the deny set.
type state struct {
	cat atomic.Pointer[catalog]
	rem atomic.Pointer[removalSet]

	mu      sync.Mutex // serializes writers
	remGen  uint64
	redisOK bool
	// needRefill is set when a takedown reached Bigtable but not Redis:
	// the next reload refills Redis from Bigtable.
	needRefill bool

	// remMu makes "change the deny set in Redis, then in memory" (admin)
	// and "read it from Redis, then install it" (refresh) atomic with
	// respect to each other, so that a reload that read Redis before a
	// local takedown cannot install its older set after it.
	remMu sync.Mutex
}

// refresher keeps the state in step with Redis: pub/sub first, polling as a
// fallback.
func (s *Server) refresher(ctx context.Context, moves <-chan schemas.ListKey, rems <-chan liststore.RemovalEvent, titles <-chan string) {
	poll := time.NewTicker(s.cfg.PollInterval)
	defer poll.Stop()
	lastScan := s.cfg.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case k, ok := <-moves:
			if !ok {
				moves = nil
				continue
			}
			s.refreshList(ctx, k)
		case _, ok := <-rems:
			if !ok {
				rems = nil
				continue
			}
			s.reloadRemovals(ctx)
		case typ, ok := <-titles:
			if !ok {
				titles = nil
				continue
			}
			s.rehydrate(ctx, typ)
		case <-poll.C:
			scan := s.cfg.Now().Sub(lastScan) >= s.cfg.ScanInterval
			if scan {
				lastScan = s.cfg.Now()
			}
			s.poll(ctx, scan)
		}
	}
}

// load finds every list (SCAN), then refreshes the ones that are new or
// moved, and reloads the deny set (startup and rescans).
func (s *Server) load(ctx context.Context) error {
	keys, err := s.store.Keys(ctx)
	if err != nil {
		s.redisFailed("keys", err)
		return err
	}
	return s.refreshMoved(ctx, keys)
}

// poll compares every held pointer with Redis in one round trip and
// refreshes the lists that moved; with scan, it also looks for new lists.
func (s *Server) poll(ctx context.Context, scan bool) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.PollInterval+2*time.Second)
	defer cancel()
	if scan {
		s.load(ctx)
		return
	}
	s.refreshMoved(ctx, s.state.cat.Load().keys)
}

// refreshMoved reads the pointers of keys in one round trip (MGET) and
// refreshes each list whose pointer is ahead of the version held, then the
// deny set.
func (s *Server) refreshMoved(ctx context.Context, keys []schemas.ListKey) error {
	ptrs, err := s.store.Pointers(ctx, keys)
	if err != nil {
		s.redisFailed("poll", err)
		return err
	}
	s.redisWorked()
	cat := s.state.cat.Load()
	for i, k := range keys {
		var held int64
		if slot := cat.lists[k]; slot != nil {
			if v := slot.cur.Load(); v != nil {
				held = v.list.Version
			}
		}
		// != rather than >: a rollback moves a pointer back.
		if ptrs[i] != 0 && ptrs[i] != held {
			if _, err := s.refreshList(ctx, k); err != nil {
				return err
			}
		}
	}
	return s.reloadRemovals(ctx)
}

// refreshList installs the current version of k, with its previous version
// and its items' catalogue entries, if it differs from the one held (newer,
// or older after a rollback). It reports whether the version changed.
func (s *Server) refreshList(ctx context.Context, k schemas.ListKey) (bool, error) {
	var held *listVersion
	if slot := s.state.cat.Load().lists[k]; slot != nil {
		held = slot.cur.Load()
	}
	var skip int64
	if held != nil {
		skip = held.list.Version
	}
	snap, err := s.store.CurrentWithPrevious(ctx, k, skip)
	if errors.Is(err, liststore.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		s.redisFailed("current", err)
		return false, err
	}
	s.redisWorked()
	if held != nil && held.list.Version == snap.Version {
		return false, nil
	}
	l, tl, err := decodeBlob(snap.Raw, k, snap.Version)
	if err != nil {
		s.metrics.badBlobs.Inc()
		s.log.Error("bad list blob, keeping the last good version", "list", k.String(), "version", snap.Version, "err", err)
		return false, nil
	}
	nv := &listVersion{list: l, trend: tl, seenAt: s.cfg.Now()}
	switch {
	case tl != nil:
		// Trending lists carry no change.
	case snap.PrevRaw != nil:
		if nv.prev, _, err = decodeBlob(snap.PrevRaw, k, snap.PrevVersion); err != nil {
			s.metrics.badBlobs.Inc()
			s.log.Warn("bad previous list blob: serving without change", "list", k.String(), "version", snap.PrevVersion, "err", err)
		}
	case snap.PrevVersion != 0 && held != nil && held.list.Version == snap.PrevVersion:
		nv.prev = held.list
	}
	if tl == nil {
		nv.info = s.lookupTitles(ctx, l)
	}
	version := snap.Version
	s.state.mu.Lock()
	defer s.state.mu.Unlock()
	cat := s.state.cat.Load()
	slot := cat.lists[k]
	if slot == nil {
		slots := make(map[schemas.ListKey]*listSlot, len(cat.lists)+1)
		for kk, ss := range cat.lists {
			slots[kk] = ss
		}
		slot = &listSlot{key: k, surrogate: []string{cdn.SurrogateKeys(k)}}
		slots[k] = slot
		slot.cur.Store(nv)
		s.state.cat.Store(newCatalog(slots, s.cfg.Types))
		s.log.Info("list appeared", "list", k.String(), "version", version)
		return true, nil
	}
	if v := slot.cur.Load(); v != nil && v.list.Version == version {
		return false, nil
	}
	slot.cur.Store(nv)
	return true, nil
}

// decodeBlob decodes a list blob and checks that it is version n of k: a
// top list, or for window "trending" a trending list, returned with a
// header-only List (key, as_of, version, stale) that the generic code
// (versions, staleness, /v1/lists, metrics) reads.
func decodeBlob(raw []byte, k schemas.ListKey, n int64) (*schemas.List, *schemas.Trending, error) {
	var (
		l   *schemas.List
		t   *schemas.Trending
		err error
	)
	if k.Window != schemas.WindowTrending {
		l, err = schemas.UnmarshalList(raw)
	} else if t, err = schemas.UnmarshalTrending(raw); err == nil {
		l = &schemas.List{Type: t.Type, Scope: t.Scope, Window: t.Window, AsOf: t.AsOf, Version: t.Version, Stale: t.Stale}
	}
	if err == nil && (l.Key() != k || l.Version != n) {
		err = errors.New("blob names " + l.Key().String() + " v" + itoa(l.Version))
	}
	return l, t, err
}

// reloadRemovals replaces the deny set with Redis' when it differs. With a
// durable deny set (removals.go), a Redis set without the filled marker is
// refilled from Bigtable first; until that works the set held is kept.
func (s *Server) reloadRemovals(ctx context.Context) error {
	s.state.remMu.Lock()
	defer s.state.remMu.Unlock()
	all, filled, err := s.store.RemovalsState(ctx)
	if err != nil {
		s.redisFailed("removals", err)
		return err
	}
	if s.cfg.Removals != nil {
		s.state.mu.Lock()
		need := s.state.needRefill
		s.state.mu.Unlock()
		if !filled || need {
			why := "redis has no filled deny set (restarted empty or flushed)"
			if filled {
				why = "a takedown reached bigtable but not redis"
			}
			if all, err = s.refillRemovals(ctx, why); err != nil {
				s.log.Error("removals: refill failed, filtering with the set held", "err", err)
				return err
			}
			if all, _, err = s.store.RemovalsState(ctx); err != nil {
				s.redisFailed("removals", err)
				return err
			}
		}
	}
	s.setRemovals(all)
	return nil
}

func (s *Server) setRemovals(all []liststore.Removal) {
	s.state.mu.Lock()
	defer s.state.mu.Unlock()
	if cur := s.state.rem.Load(); cur != nil && sameRemovals(cur.all, all) {
		return
	}
	s.state.remGen++
	s.state.rem.Store(newRemovalSet(s.state.remGen, all))
	s.metrics.removals.Set(float64(len(all)))
}

// redisError counts a failed Redis operation, unless its context was
// cancelled: the server stopping, or a request whose client went away, is
// not Redis failing.
func (s *Server) redisError(op string, err error) {
	if !errors.Is(err, context.Canceled) {
		s.metrics.redisErrors.WithLabelValues(op).Inc()
	}
}

func (s *Server) redisFailed(op string, err error) {
	if errors.Is(err, context.Canceled) {
		// The server stopping (these calls run on its context), not Redis
		// failing: no error counted, no outage logged.
		return
	}
	s.redisError(op, err)
	s.state.mu.Lock()
	was := s.state.redisOK
	s.state.redisOK = false
	s.state.mu.Unlock()
	if was {
		s.log.Warn("redis unreachable, serving lists from memory", "op", op, "err", err)
	}
}

func (s *Server) redisWorked() {
	s.state.mu.Lock()
	was := s.state.redisOK
	s.state.redisOK = true
	s.state.mu.Unlock()
	if !was {
		s.log.Info("redis reachable")
	}
}

// items is the number of entries of the version held.
func (v *listVersion) items() int {
	if v.trend != nil {
		return len(v.trend.Items)
	}
	return len(v.list.Items)
}
