package api

import (
	"encoding/json"
	"net/http"

	"github.com/topk-dev/topk/schemas"
)

// Trending reads: GET /v1/trending?type=hashtag&scope=IN-MH&k=20 answers
// the first k (1..MaxTrendingK, default 20) entries of the current trending
// list of (type, scope) (schemas.Trending, published by the fast path's
// trend step), minus removed items and renumbered, with the same
// validation, Cache-Control (10 s), ETag, 304, gzip and stale marking as
// /v1/top, served from responses rendered once per (version, k, removals,
// stale).

// MaxTrendingK is the largest k a trending read may ask for, and
// defaultTrendingK the k without one.
const (
	MaxTrendingK     = 100
	defaultTrendingK = 20
)

var (
	trendingParams   = []string{"type", "scope", "k"}
	trendingKAllowed = []string{"an integer from 1 to 100"}
)

// parseTrendingQuery parses and validates a /v1/trending query.
func parseTrendingQuery(raw string, cat *catalog) (topQuery, *apiError) {
	v, seen, aerr := parseQuery(raw, trendingParams)
	if aerr != nil {
		return topQuery{}, aerr
	}
	q := topQuery{k: defaultTrendingK}
	typ, scope, aerr := parseTypeScope(v[0], v[1], seen[0], seen[1], cat)
	if aerr != nil {
		return q, aerr
	}
	if seen[2] {
		k, ok := parseK(v[2])
		if !ok || k > MaxTrendingK {
			return q, badParam("k", trendingKAllowed, "parameter \"k\": %s is not an integer from 1 to %d", quoteTrunc(v[2]), MaxTrendingK)
		}
		q.k = k
	}
	q.key = schemas.ListKey{Type: typ, Scope: scope, Window: schemas.WindowTrending}
	return q, nil
}

// handleTrending serves GET /v1/trending.
func (s *Server) handleTrending(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return methodNotAllowed(r, "GET, HEAD")
	}
	cat := s.state.cat.Load()
	q, aerr := parseTrendingQuery(r.URL.RawQuery, cat)
	if aerr != nil {
		return aerr
	}
	var v *listVersion
	if slot := cat.lists[q.key]; slot != nil {
		v = slot.cur.Load()
	}
	if v == nil || v.trend == nil {
		return errorf(http.StatusNotFound, "trending list %s:%s does not exist yet: no version has been published", q.key.Type, q.key.Scope)
	}
	stale := s.cfg.Now().Sub(v.seenAt) > s.cfg.StaleAfter
	serveRendered(w, r, v.response(q.k, stale, s.state.rem.Load(), s.cfg.RenderCacheBytes, s.metrics), ccShort)
	return nil
}

// renderTrending builds the response for the first k entries of t that are
// not removed, ranks renumbered; stale is set when t says so or stale.
func renderTrending(t *schemas.Trending, k int, stale bool, rs *removalSet) *rendered {
	deny := rs.byType[t.Type]
	items := make([]schemas.TrendEntry, 0, min(k, len(t.Items)))
	for _, e := range t.Items {
		if len(items) == k {
			break
		}
		if deny[e.Item] {
			continue
		}
		e.Rank = len(items) + 1
		items = append(items, e)
	}
	out := *t
	out.Items = items
	out.Stale = t.Stale || stale
	body, err := json.Marshal(&out)
	if err != nil {
		// Checked trending lists hold only finite numbers: a programmer error.
		panic("api: marshal trending list: " + err.Error())
	}
	return newRendered(body, t.Version, rs.gen)
}
