package api

// Operations endpoints: rollback of a list's pointer, the catalogue of
// titles, and CDN purges (see the package doc's endpoint list).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"time"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/serving/catalogue"
	"github.com/topk-dev/topk/serving/cdn"
	"github.com/topk-dev/topk/transforms/publish/liststore"
)

// maxCatalogueBody bounds a POST /v1/admin/catalogue body.
const maxCatalogueBody = 32 << 20

// purgeTimeout bounds one purge (with its retries) in a request.
const purgeTimeout = 5 * time.Second

// lookupTitles reads the catalogue entries of l's items. A failure is
// logged and counted, and the list is served with ids only: titles never
// hold a list back.
func (s *Server) lookupTitles(ctx context.Context, l *schemas.List) map[string]catalogue.Entry {
	if len(l.Items) == 0 {
		return nil
	}
	items := make([]string, len(l.Items))
	for i := range l.Items {
		items[i] = l.Items[i].Item
	}
	info, err := s.titles.Get(ctx, l.Type, items)
	if errors.Is(err, context.Canceled) {
		return nil // the server stopping (or the reader gone), not Redis failing
	}
	if err != nil {
		s.redisError("catalogue", err)
		s.log.Warn("catalogue lookup failed: serving ids without titles", "list", l.Key().String(), "err", err)
		return nil
	}
	if len(info) == 0 {
		return nil
	}
	return info
}

// rehydrate re-reads the catalogue entries of every held list of typ (every
// list when typ is ""), after a catalogue change. A list that moved
// meanwhile is left alone: its new version was hydrated when installed.
func (s *Server) rehydrate(ctx context.Context, typ string) {
	cat := s.state.cat.Load()
	for _, k := range cat.keys {
		if typ != "" && k.Type != typ {
			continue
		}
		slot := cat.lists[k]
		old := slot.cur.Load()
		if old == nil {
			continue
		}
		nv := &listVersion{list: old.list, prev: old.prev, seenAt: old.seenAt, info: s.lookupTitles(ctx, old.list)}
		slot.cur.CompareAndSwap(old, nv)
	}
}

// handleCatalogue serves POST /v1/admin/catalogue: NDJSON records (see
// package catalogue) loaded into the catalogue, then the lists held here
// re-hydrated (other servers follow the change's pub/sub message).
func (s *Server) handleCatalogue(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodPost {
		return methodNotAllowed(r, "POST")
	}
	if e := s.authorize(r); e != nil {
		return e
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || (mt != "application/x-ndjson" && mt != "application/json") {
		return errorf(http.StatusUnsupportedMediaType, "Content-Type must be application/x-ndjson, got %s", quoteTrunc(r.Header.Get("Content-Type")))
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxCatalogueBody+1))
	if err != nil {
		return errorf(http.StatusBadRequest, "reading body: %v", err)
	}
	if len(body) > maxCatalogueBody {
		return errorf(http.StatusRequestEntityTooLarge, "body is over the limit of %d bytes: split the file", maxCatalogueBody)
	}
	n, err := s.titles.Load(r.Context(), bytes.NewReader(body))
	if errors.Is(err, catalogue.ErrBadRecord) {
		return errorf(http.StatusBadRequest, "%v (%d records before it were loaded)", err, n)
	}
	if err != nil {
		s.redisError("catalogue", err)
		return fmt.Errorf("%w: loading the catalogue failed after %d records: %v", errUnavailable, n, err)
	}
	s.rehydrate(r.Context(), "")
	s.log.Info("catalogue loaded", "records", n, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, map[string]any{"loaded": n})
	return nil
}

// rollbackRequest is the body of POST /v1/admin/rollback.
type rollbackRequest struct {
	Type    string `json:"type"`
	Scope   string `json:"scope"`
	Window  string `json:"window"`
	Version int64  `json:"version"`
	Reason  string `json:"reason"`
}

// handleRollback serves /v1/admin/rollback. GET ?type=&scope=&window= lists
// the versions held in Redis (the candidates) and the current one. POST
// {"type","scope","window","version","reason"} moves the list's pointer back
// to that version (liststore.Rollback), logs it at Warn as an audit record,
// installs it here at once, and purges the list from the CDN. The
// pipeline's next publish moves the pointer forward again.
func (s *Server) handleRollback(w http.ResponseWriter, r *http.Request) error {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodPost:
	default:
		return methodNotAllowed(r, "GET, POST")
	}
	if e := s.authorize(r); e != nil {
		return e
	}
	var req rollbackRequest
	if r.Method == http.MethodPost {
		mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || mt != "application/json" {
			return errorf(http.StatusUnsupportedMediaType, "Content-Type must be application/json, got %s", quoteTrunc(r.Header.Get("Content-Type")))
		}
		dec := json.NewDecoder(io.LimitReader(r.Body, maxAdminBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return errorf(http.StatusBadRequest, "body is not {\"type\",\"scope\",\"window\",\"version\",\"reason\"}: %v", err)
		}
	} else {
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			return badParam("", nil, "query string: %v", err)
		}
		req.Type, req.Scope, req.Window = q.Get("type"), q.Get("scope"), q.Get("window")
	}
	if req.Scope == "" {
		req.Scope = schemas.ScopeGlobal
	}
	k := schemas.ListKey{Type: req.Type, Scope: req.Scope, Window: schemas.Window(req.Window)}
	if err := k.Validate(); err != nil {
		return errorf(http.StatusBadRequest, "list: %v", err)
	}
	if r.Method != http.MethodPost {
		held, err := s.store.Versions(r.Context(), k)
		if err != nil {
			s.redisError("versions", err)
			return fmt.Errorf("%w: reading versions failed: %v", errUnavailable, err)
		}
		ptrs, err := s.store.Pointers(r.Context(), []schemas.ListKey{k})
		if err != nil {
			s.redisError("versions", err)
			return fmt.Errorf("%w: reading the pointer failed: %v", errUnavailable, err)
		}
		if held == nil {
			held = []int64{}
		}
		writeJSON(w, http.StatusOK, map[string]any{"list": k.String(), "current": ptrs[0], "held": held})
		return nil
	}
	from, err := s.store.Rollback(r.Context(), k, req.Version)
	switch {
	case errors.Is(err, liststore.ErrNotFound):
		return errorf(http.StatusNotFound, "list %s has no version", k.String())
	case errors.Is(err, liststore.ErrNotEarlier):
		return errorf(http.StatusConflict, "v%d is not earlier than the current version of %s", req.Version, k.String())
	case errors.Is(err, liststore.ErrVersionNotHeld):
		return errorf(http.StatusNotFound, "v%d of %s is not held in Redis (GET /v1/admin/rollback?type=%s&scope=%s&window=%s lists the held versions)", req.Version, k.String(), k.Type, k.Scope, k.Window)
	case err != nil:
		s.redisError("rollback", err)
		return fmt.Errorf("%w: rollback failed: %v", errUnavailable, err)
	}
	s.log.Warn("audit: list rolled back", "list", k.String(), "from", from, "to", req.Version,
		"reason", req.Reason, "remote", r.RemoteAddr)
	s.metrics.rollbacks.Inc()
	if _, err := s.refreshList(r.Context(), k); err != nil {
		s.log.Warn("rollback: installing the version here failed; polling will", "list", k.String(), "err", err)
	}
	purged := s.purge(r.Context(), "rollback", cdn.ListKey(k))
	writeJSON(w, http.StatusOK, struct {
		List   string `json:"list"`
		From   int64  `json:"from"`
		To     int64  `json:"to"`
		Purged bool   `json:"purged"`
	}{k.String(), from, req.Version, purged})
	return nil
}

// purge asks the CDN to drop responses tagged with keys, bounded by
// purgeTimeout; a failure is logged and counted, never returned (the change
// itself is done; the CDN's max-age bounds the damage). It reports whether
// a purge was made.
func (s *Server) purge(ctx context.Context, why string, keys ...string) bool {
	if s.cfg.Purger == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), purgeTimeout)
	defer cancel()
	if err := s.cfg.Purger.Purge(ctx, keys...); err != nil {
		s.metrics.purges.WithLabelValues(why, "failed").Inc()
		s.log.Error("cdn purge failed", "why", why, "keys", keys, "err", err)
		return false
	}
	s.metrics.purges.WithLabelValues(why, "ok").Inc()
	s.log.Info("cdn purged", "why", why, "keys", keys)
	return true
}

// purgeTakedown purges every response about items of typ: a removed item
// may be in any of them.
func (s *Server) purgeTakedown(ctx context.Context, typ string) {
	s.purge(ctx, "takedown", cdn.TypeKey(typ))
}
