package api

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/topk-dev/topk/schemas"
)

// topQuery is a parsed /v1/top query.
type topQuery struct {
	key schemas.ListKey
	k   int
}

const defaultK = 100

var (
	windowNames = []string{"1m", "5m", "1h", "24h", "all"}
	topParams   = []string{"type", "scope", "window", "k"}
	kAllowed    = []string{"an integer from 1 to 1000"}
	// Cache-Control by window: lists that move every 10 s to a minute are
	// cached 10 s, the long windows 30 s; a CDN may serve a stale copy while
	// it revalidates, or when we fail.
	ccShort = []string{"public, max-age=10, stale-while-revalidate=30, stale-if-error=300"}
	ccLong  = []string{"public, max-age=30, stale-while-revalidate=60, stale-if-error=600"}
	varyAE  = []string{"Accept-Encoding"}
	gzipEnc = []string{"gzip"}
)

// maxAllowed bounds the allowed values an error message lists.
const maxAllowed = 50

func capAllowed(names []string) []string {
	if len(names) <= maxAllowed {
		return names
	}
	out := append([]string(nil), names[:maxAllowed]...)
	return append(out, "...")
}

func unescape(s string) (string, bool) {
	if strings.IndexByte(s, '%') < 0 && strings.IndexByte(s, '+') < 0 {
		return s, true
	}
	u, err := url.QueryUnescape(s)
	return u, err == nil
}

// parseTopQuery parses and validates a /v1/top query against the catalog.
// It rejects unknown and repeated parameters, so that a typo is an error and
// not a default.
func parseTopQuery(raw string, cat *catalog) (topQuery, *apiError) {
	v, seen, aerr := parseQuery(raw, topParams)
	if aerr != nil {
		return topQuery{}, aerr
	}
	typ, scope, window, kstr := v[0], v[1], v[2], v[3]
	q := topQuery{k: defaultK}
	typ, scope, aerr = parseTypeScope(typ, scope, seen[0], seen[1], cat)
	if aerr != nil {
		return q, aerr
	}
	if !seen[2] || !schemas.Window(window).Valid() {
		what := "is required"
		if seen[2] {
			what = quoteTrunc(window) + " is not a window"
		}
		return q, badParam("window", windowNames, "parameter \"window\" %s; allowed: 1m, 5m, 1h, 24h, all", what)
	}
	if seen[3] {
		k, ok := parseK(kstr)
		if !ok {
			return q, badParam("k", kAllowed, "parameter \"k\": %s is not an integer from 1 to %d", quoteTrunc(kstr), MaxK)
		}
		q.k = k
	}
	q.key = schemas.ListKey{Type: typ, Scope: scope, Window: schemas.Window(window)}
	return q, nil
}

// parseTypeScope validates the type and scope parameters of a list read
// (/v1/top, /v1/trending) against the catalog; scope defaults to global.
func parseTypeScope(typ, scope string, seenType, seenScope bool, cat *catalog) (string, string, *apiError) {
	switch {
	case !seenType || typ == "":
		return "", "", badParam("type", capAllowed(cat.typeNames), "parameter \"type\" is required; allowed: %s", strings.Join(capAllowed(cat.typeNames), ", "))
	case !schemas.IsType(typ):
		return "", "", badParam("type", capAllowed(cat.typeNames), "parameter \"type\": %s is not an item type ([a-z][a-z0-9_]{0,31}); allowed: %s", quoteTrunc(typ), strings.Join(capAllowed(cat.typeNames), ", "))
	case !cat.types[typ]:
		return "", "", badParam("type", capAllowed(cat.typeNames), "parameter \"type\": unknown type %q; allowed: %s", typ, strings.Join(capAllowed(cat.typeNames), ", "))
	}
	if !seenScope {
		scope = schemas.ScopeGlobal
	}
	switch {
	case !schemas.IsScope(scope):
		return "", "", badParam("scope", capAllowed(cat.scopeNames), "parameter \"scope\": %s is not \"global\", a country (IN) or a region (IN-MH); allowed: %s", quoteTrunc(scope), strings.Join(capAllowed(cat.scopeNames), ", "))
	case !cat.scopes[scope]:
		return "", "", badParam("scope", capAllowed(cat.scopeNames), "parameter \"scope\": unknown scope %q; allowed: %s", scope, strings.Join(capAllowed(cat.scopeNames), ", "))
	}
	return typ, scope, nil
}

// parseK accepts 1..MaxK in plain decimal: no sign, no spaces, no leading
// zeros beyond the number itself, no exponent.
func parseK(s string) (int, bool) {
	if len(s) == 0 || len(s) > 4 || s[0] == '0' {
		return 0, false
	}
	k := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		k = k*10 + int(c-'0')
	}
	return k, k >= 1 && k <= MaxK
}

// acceptsGzip reports whether the Accept-Encoding header allows gzip
// (listed, and not with q=0).
func acceptsGzip(h http.Header) bool {
	for _, v := range h["Accept-Encoding"] {
		for v != "" {
			var part string
			part, v, _ = strings.Cut(v, ",")
			name, params, _ := strings.Cut(part, ";")
			if !strings.EqualFold(strings.TrimSpace(name), "gzip") {
				continue
			}
			params = strings.TrimSpace(params)
			if q, ok := strings.CutPrefix(params, "q="); ok {
				if f, err := strconv.ParseFloat(strings.TrimSpace(q), 64); err == nil && f == 0 {
					return false
				}
			}
			return true
		}
	}
	return false
}

// etagMatches implements If-None-Match's weak comparison.
func etagMatches(h http.Header, etag string) bool {
	for _, v := range h["If-None-Match"] {
		for v != "" {
			var t string
			t, v, _ = strings.Cut(v, ",")
			t = strings.TrimSpace(t)
			if t == "*" || strings.TrimPrefix(t, "W/") == etag {
				return true
			}
		}
	}
	return false
}

// handleTop serves GET /v1/top. Hot path: once per read; it looks the list
// up, picks the rendered bytes and writes them, with no marshalling.
func (s *Server) handleTop(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return methodNotAllowed(r, "GET, HEAD")
	}
	cat := s.state.cat.Load()
	q, aerr := parseTopQuery(r.URL.RawQuery, cat)
	if aerr != nil {
		return aerr
	}
	slot := cat.lists[q.key]
	var v *listVersion
	if slot != nil {
		v = slot.cur.Load()
	}
	if v == nil {
		return errorf(http.StatusNotFound, "list %s does not exist yet: no version has been published", q.key.String())
	}
	stale := s.cfg.Now().Sub(v.seenAt) > s.cfg.StaleAfter
	rd := v.response(q.k, stale, s.state.rem.Load(), s.cfg.RenderCacheBytes, s.metrics)
	cc := ccShort
	if q.key.Window == schemas.Window24h || q.key.Window == schemas.WindowAll {
		cc = ccLong
	}
	w.Header()["Surrogate-Key"] = slot.surrogate
	serveRendered(w, r, rd, cc)
	return nil
}

// serveRendered answers with a pre-rendered response: JSON with the given
// Cache-Control, an ETag per encoding, 304 on If-None-Match, gzip when
// accepted, no body for HEAD. Nothing is marshalled here, and over Serve
// headers and body leave in one write (conn.go).
func serveRendered(w http.ResponseWriter, r *http.Request, rd *rendered, cacheControl []string) {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Cache-Control"] = cacheControl
	h["Vary"] = varyAE
	gz := acceptsGzip(r.Header)
	etag := rd.etagHdr
	if gz {
		etag = rd.gzEtagHdr
	}
	h["Etag"] = etag
	if len(r.Header["If-None-Match"]) > 0 && etagMatches(r.Header, etag[0]) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	body, clen := rd.body, rd.lenHdr
	if gz {
		body, clen = rd.gzipped()
		h["Content-Encoding"] = gzipEnc
	}
	h["Content-Length"] = clen
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return
	}
	writeCoalesced(w, r, body)
}

// listInfo is one entry of GET /v1/lists.
type listInfo struct {
	Type    string         `json:"type"`
	Scope   string         `json:"scope"`
	Window  schemas.Window `json:"window"`
	Version int64          `json:"version"`
	AsOf    time.Time      `json:"as_of"`
	Items   int            `json:"items"`
	Stale   bool           `json:"stale"`
}

// handleLists serves GET /v1/lists: every list held, for the page and for
// operators.
func (s *Server) handleLists(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return methodNotAllowed(r, "GET, HEAD")
	}
	if r.URL.RawQuery != "" {
		return badParam("", nil, "/v1/lists takes no parameters")
	}
	cat := s.state.cat.Load()
	now := s.cfg.Now()
	out := struct {
		Types []string   `json:"types"`
		Lists []listInfo `json:"lists"`
	}{Types: cat.typeNames, Lists: make([]listInfo, 0, len(cat.keys))}
	for _, k := range cat.keys {
		v := cat.lists[k].cur.Load()
		out.Lists = append(out.Lists, listInfo{
			Type: k.Type, Scope: k.Scope, Window: k.Window, Version: v.list.Version, AsOf: v.list.AsOf,
			Items: v.items(), Stale: v.list.Stale || now.Sub(v.seenAt) > s.cfg.StaleAfter,
		})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
