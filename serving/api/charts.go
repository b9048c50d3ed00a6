package api

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/serving/cdn"
)

// GET /v1/charts/daily: the exact chart of one UTC day, summed from the
// hourly exact counts of the hours the recount has marked done (see the
// package doc). Computing a chart costs one scan of the done hours and up to
// 24 prefix scans of the exact table, so it is cached: per (type, scope,
// date) the summed top list, and per (k, removals generation) its rendered
// bytes. A final date (all 24 hours recounted) is kept until evicted by the
// byte budget; a non-final one for chartTTL.

const (
	dateLayout = "2006-01-02"
	// chartTTL is how long a non-final chart is cached (and its max-age).
	chartTTL = time.Minute
	// chartTimeout bounds one computation against Bigtable.
	chartTimeout = 20 * time.Second
	// chartComputations bounds the days computed at once, so a flood of
	// distinct uncached queries queues instead of multiplying Bigtable scans.
	chartComputations = 2
)

var (
	chartParams   = []string{"type", "scope", "date", "k"}
	dateAllowed   = []string{"a UTC date YYYY-MM-DD, today or earlier"}
	ccChartFinal  = []string{"public, max-age=3600"}
	ccChartRecent = []string{"public, max-age=60"}
)

// chartQuery is a parsed /v1/charts/daily query.
type chartQuery struct {
	day dayKey
	k   int
}

// dayKey names one daily chart.
type dayKey struct {
	typ, scope string
	date       time.Time // midnight UTC
}

// parseChartQuery parses and validates a /v1/charts/daily query: type and
// scope as /v1/top checks them (against the catalog), date a real calendar
// date no later than today (UTC, by now), k as /v1/top. Unknown and repeated
// parameters are rejected.
func parseChartQuery(raw string, cat *catalog, now time.Time) (chartQuery, *apiError) {
	v, seen, aerr := parseQuery(raw, chartParams)
	if aerr != nil {
		return chartQuery{}, aerr
	}
	typ, scope, date, kstr := v[0], v[1], v[2], v[3]
	q := chartQuery{k: defaultK}
	if !seen[1] {
		scope = schemas.ScopeGlobal
	}
	if aerr := checkTypeScope(typ, seen[0], scope, cat); aerr != nil {
		return q, aerr
	}
	if !seen[2] || date == "" {
		return q, badParam("date", dateAllowed, "parameter \"date\" is required: a UTC date YYYY-MM-DD")
	}
	d, err := time.Parse(dateLayout, date)
	if err != nil || len(date) != len(dateLayout) {
		return q, badParam("date", dateAllowed, "parameter \"date\": %s is not a date YYYY-MM-DD", quoteTrunc(date))
	}
	today := now.UTC().Truncate(24 * time.Hour)
	if d.After(today) {
		return q, badParam("date", dateAllowed, "parameter \"date\": %s is in the future (today is %s UTC)", date, today.Format(dateLayout))
	}
	if seen[3] {
		k, ok := parseK(kstr)
		if !ok {
			return q, badParam("k", kAllowed, "parameter \"k\": %s is not an integer from 1 to %d", quoteTrunc(kstr), MaxK)
		}
		q.k = k
	}
	q.day = dayKey{typ: typ, scope: scope, date: d}
	return q, nil
}

// checkTypeScope is /v1/top's check of type and scope, with its messages.
func checkTypeScope(typ string, typeGiven bool, scope string, cat *catalog) *apiError {
	types := capAllowed(cat.typeNames)
	switch {
	case !typeGiven || typ == "":
		return badParam("type", types, "parameter \"type\" is required; allowed: %s", strings.Join(types, ", "))
	case !schemas.IsType(typ):
		return badParam("type", types, "parameter \"type\": %s is not an item type ([a-z][a-z0-9_]{0,31}); allowed: %s", quoteTrunc(typ), strings.Join(types, ", "))
	case !cat.types[typ]:
		return badParam("type", types, "parameter \"type\": unknown type %q; allowed: %s", typ, strings.Join(types, ", "))
	}
	scopes := capAllowed(cat.scopeNames)
	switch {
	case !schemas.IsScope(scope):
		return badParam("scope", scopes, "parameter \"scope\": %s is not \"global\", a country (IN) or a region (IN-MH); allowed: %s", quoteTrunc(scope), strings.Join(scopes, ", "))
	case !cat.scopes[scope]:
		return badParam("scope", scopes, "parameter \"scope\": unknown scope %q; allowed: %s", scope, strings.Join(scopes, ", "))
	}
	return nil
}

// chartEntry is one ranked item of a daily chart.
type chartEntry struct {
	Rank  int    `json:"rank"`
	Item  string `json:"item"`
	Count int64  `json:"count"`
}

// chartBody is the JSON of a daily chart.
type chartBody struct {
	Type           string       `json:"type"`
	Scope          string       `json:"scope"`
	Date           string       `json:"date"`
	Final          bool         `json:"final"`
	HoursRecounted int          `json:"hours_recounted"`
	Items          []chartEntry `json:"items"`
}

// dayChart is the summed chart of one day: the largest counts in rank order
// (count descending, ties by item), cut to a length that leaves MaxK entries
// after the removals known when it was computed.
type dayChart struct {
	final   bool
	hours   int
	top     []chartEntry // Rank unset
	cut     bool         // top is shorter than the day's items
	expires time.Time    // zero: final, never expires
	bytes   int64
	renders map[renderKey]*rendered
}

type renderKey struct {
	k   int
	gen uint64
}

// chartCache holds day charts and their renders under a byte budget, and
// makes concurrent misses of one day share a computation.
type chartCache struct {
	mu       sync.Mutex
	days     map[dayKey]*dayChart
	inflight map[dayKey]*chartCall
	bytes    int64
	budget   int64
	sem      chan struct{} // chartComputations slots
}

type chartCall struct {
	done chan struct{}
	day  *dayChart
	err  error
}

func newChartCache(budget int64) *chartCache {
	return &chartCache{days: map[dayKey]*dayChart{}, inflight: map[dayKey]*chartCall{}, budget: budget,
		sem: make(chan struct{}, chartComputations)}
}

// handleCharts serves GET /v1/charts/daily.
func (s *Server) handleCharts(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return methodNotAllowed(r, "GET, HEAD")
	}
	if s.cfg.Exact == nil {
		return errorf(http.StatusServiceUnavailable, "exact tables not configured: this server has no Bigtable exact store (serving --exact)")
	}
	now := s.cfg.Now()
	q, aerr := parseChartQuery(r.URL.RawQuery, s.state.cat.Load(), now)
	if aerr != nil {
		return aerr
	}
	rs := s.state.rem.Load()
	rd, final, err := s.chartResponse(r.Context(), q, rs, now)
	if err != nil {
		if r.Context().Err() != nil {
			return err
		}
		s.log.Error("charts: exact tables", "type", q.day.typ, "scope", q.day.scope, "date", q.day.date.Format(dateLayout), "err", err)
		e := errorf(http.StatusServiceUnavailable, "exact tables unavailable; retry later")
		e.header = map[string]string{"Retry-After": "5"}
		return e
	}
	cc := ccChartRecent
	if final {
		cc = ccChartFinal
	}
	w.Header().Set("Surrogate-Key", cdn.ChartKeys(q.day.typ, q.day.scope))
	serveRendered(w, r, rd, cc)
	return nil
}

// chartResponse returns the rendered chart for q under the deny set rs,
// from the cache or computed.
func (s *Server) chartResponse(ctx context.Context, q chartQuery, rs *removalSet, now time.Time) (*rendered, bool, error) {
	c := s.charts
	rk := renderKey{q.k, rs.gen}
	for attempt := 0; ; attempt++ {
		c.mu.Lock()
		d := c.days[q.day]
		if d != nil && !d.expires.IsZero() && !now.Before(d.expires) {
			c.dropLocked(q.day, d)
			d = nil
		}
		if d != nil {
			if rd := d.renders[rk]; rd != nil {
				c.mu.Unlock()
				return rd, d.final, nil
			}
			c.mu.Unlock()
		} else {
			call := c.inflight[q.day]
			if call == nil {
				call = &chartCall{done: make(chan struct{})}
				c.inflight[q.day] = call
				c.mu.Unlock()
				go s.computeDay(q.day, rs, now, call)
			} else {
				c.mu.Unlock()
			}
			select {
			case <-call.done:
			case <-ctx.Done():
				return nil, false, ctx.Err()
			}
			if call.err != nil {
				return nil, false, call.err
			}
			d = call.day
		}
		rd, ok := renderChart(q, d, rs)
		if !ok && attempt == 0 {
			// Removals made since the computation left fewer than k of
			// the entries it kept: recompute with a longer cut.
			c.mu.Lock()
			if c.days[q.day] == d {
				c.dropLocked(q.day, d)
			}
			c.mu.Unlock()
			continue
		}
		c.mu.Lock()
		if c.days[q.day] == d && d.renders[rk] == nil {
			for k, old := range d.renders { // renders for an older deny set
				if k.gen != rs.gen {
					delete(d.renders, k)
					d.bytes -= int64(len(old.body))
					c.bytes -= int64(len(old.body))
				}
			}
			if c.makeRoomLocked(int64(len(rd.body)), q.day, now) {
				d.renders[rk] = rd
				d.bytes += int64(len(rd.body))
				c.bytes += int64(len(rd.body))
			}
		}
		c.mu.Unlock()
		return rd, d.final, nil
	}
}

// computeDay computes a day's chart, detached from the request that asked
// (others may wait on it), and installs it in the cache.
func (s *Server) computeDay(key dayKey, rs *removalSet, now time.Time, call *chartCall) {
	ctx, cancel := context.WithTimeout(context.Background(), chartTimeout)
	defer cancel()
	c := s.charts
	var d *dayChart
	var err error
	select {
	case c.sem <- struct{}{}:
		d, err = s.sumDay(ctx, key, MaxK+len(rs.byType[key.typ]))
		<-c.sem
	case <-ctx.Done():
		err = fmt.Errorf("waiting for another chart computation: %w", ctx.Err())
	}
	c.mu.Lock()
	delete(c.inflight, key)
	if err == nil {
		if !d.final {
			d.expires = now.Add(chartTTL)
		}
		if c.makeRoomLocked(d.bytes, key, now) {
			if old := c.days[key]; old != nil {
				c.dropLocked(key, old)
			}
			c.days[key] = d
			c.bytes += d.bytes
		}
	}
	call.day, call.err = d, err
	c.mu.Unlock()
	close(call.done)
}

// sumDay reads which hours of the day are done and asks the store for the
// exact top limit of those hours (store.TopOfHours). Hours not marked done
// are not read: a chart never shows an hour the recount is still writing.
func (s *Server) sumDay(ctx context.Context, key dayKey, limit int) (*dayChart, error) {
	done, err := s.cfg.Exact.DoneHours(ctx)
	if err != nil {
		return nil, err
	}
	end := key.date.Add(24 * time.Hour)
	var hours []time.Time
	for _, h := range done {
		if !h.Before(key.date) && h.Before(end) {
			hours = append(hours, h)
		}
	}
	exact, err := s.cfg.Exact.TopOfHours(ctx, key.typ, key.scope, hours, limit)
	if err != nil {
		return nil, err
	}
	top := make([]chartEntry, len(exact))
	for i, e := range exact {
		top[i] = chartEntry{Item: e.Item, Count: e.Count}
	}
	d := &dayChart{final: len(hours) == 24, hours: len(hours), renders: map[renderKey]*rendered{}}
	// A chart of exactly limit entries may have been cut; a longer one is
	// computed when removals need it.
	d.cut = len(top) >= limit
	d.top = top
	for _, e := range top {
		d.bytes += int64(len(e.Item)) + 48
	}
	return d, nil
}

// renderChart renders the first k entries of d that rs does not remove. It
// reports false when d was cut and removals left fewer than k entries of it
// (the chart must be recomputed with a longer cut).
func renderChart(q chartQuery, d *dayChart, rs *removalSet) (*rendered, bool) {
	deny := rs.byType[q.day.typ]
	items := make([]chartEntry, 0, min(q.k, len(d.top)))
	for _, e := range d.top {
		if len(items) == q.k {
			break
		}
		if deny[e.Item] {
			continue
		}
		e.Rank = len(items) + 1
		items = append(items, e)
	}
	complete := len(items) == q.k || !d.cut
	body, err := json.Marshal(chartBody{
		Type: q.day.typ, Scope: q.day.scope, Date: q.day.date.Format(dateLayout),
		Final: d.final, HoursRecounted: d.hours, Items: items,
	})
	if err != nil {
		panic("api: marshal chart: " + err.Error())
	}
	body = append(body, '\n')
	h := fnv.New64a()
	h.Write(body)
	sum := hex.EncodeToString(h.Sum(nil))
	etag := `"c-` + sum + `"`
	return &rendered{
		gen:       rs.gen,
		body:      body,
		etag:      etag,
		etagHdr:   []string{etag},
		gzEtagHdr: []string{`"c-` + sum + `-gz"`},
		lenHdr:    []string{strconv.Itoa(len(body))},
	}, complete
}

// makeRoomLocked evicts expired days, then any other days (never keep),
// until n more bytes fit the budget. It reports false when n alone is over
// the budget.
func (c *chartCache) makeRoomLocked(n int64, keep dayKey, now time.Time) bool {
	if n > c.budget {
		return false
	}
	if c.bytes+n <= c.budget {
		return true
	}
	for k, d := range c.days {
		if k != keep && !d.expires.IsZero() && !now.Before(d.expires) {
			c.dropLocked(k, d)
		}
	}
	for k, d := range c.days {
		if c.bytes+n <= c.budget {
			break
		}
		if k != keep {
			c.dropLocked(k, d)
		}
	}
	return c.bytes+n <= c.budget
}

func (c *chartCache) dropLocked(k dayKey, d *dayChart) {
	delete(c.days, k)
	c.bytes -= d.bytes
}
