package api

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/topk-dev/topk/transforms/publish/liststore"
)

// maxAdminBody bounds an admin request body.
const maxAdminBody = 64 << 10

// authorize checks the bearer token: 401 without credentials, 403 with
// wrong ones or when the admin API has no token configured.
func (s *Server) authorize(r *http.Request) *apiError {
	h := r.Header.Get("Authorization")
	scheme, tok, _ := strings.Cut(h, " ")
	if h == "" || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		e := errorf(http.StatusUnauthorized, "admin API: send Authorization: Bearer <token>")
		e.header = map[string]string{"WWW-Authenticate": `Bearer realm="topk-admin"`}
		return e
	}
	if s.cfg.AdminToken == "" {
		return errorf(http.StatusForbidden, "admin API disabled: the server has no --admin_token or TOPK_ADMIN_TOKEN")
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	want := sha256.Sum256([]byte(s.cfg.AdminToken))
	if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
		return errorf(http.StatusForbidden, "admin API: wrong token")
	}
	return nil
}

// removalRequest is the body of POST (and optionally DELETE)
// /v1/admin/removals.
type removalRequest struct {
	Type   string `json:"type"`
	Item   string `json:"item"`
	Reason string `json:"reason"`
}

// handleRemovals serves the deny set: GET lists it, POST adds, DELETE
// restores.
func (s *Server) handleRemovals(w http.ResponseWriter, r *http.Request) error {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodDelete:
	default:
		return methodNotAllowed(r, "GET, POST, DELETE")
	}
	if e := s.authorize(r); e != nil {
		return e
	}
	switch r.Method {
	case http.MethodPost:
		req, e := readRemoval(r, true)
		if e != nil {
			return e
		}
		s.state.remMu.Lock()
		defer s.state.remMu.Unlock()
		rem, err := s.store.NewRemoval(req.Type, req.Item, req.Reason)
		if errors.Is(err, liststore.ErrBadRemoval) {
			return errorf(http.StatusBadRequest, "%v", err)
		}
		if err != nil {
			return err
		}
		// Durable first: a removal that is only in Redis is lost with it.
		if s.cfg.Removals != nil {
			rec, err := json.Marshal(rem)
			if err != nil {
				return err
			}
			if err := s.cfg.Removals.PutRemoval(r.Context(), rem.Type, rem.Item, rec); err != nil {
				return fmt.Errorf("%w: storing the removal durably failed: %v", errUnavailable, err)
			}
		}
		if err := s.store.PutRemoval(r.Context(), rem); err != nil {
			s.redisError("removals", err)
			if s.cfg.Removals == nil {
				return fmt.Errorf("%w: storing the removal failed: %v", errUnavailable, err)
			}
			// Durable already: this server filters it at once, and the
			// next reload that reaches Redis refills it for the others.
			s.state.mu.Lock()
			s.state.needRefill = true
			s.state.mu.Unlock()
			s.log.Warn("item removed durably; redis missed it and is refilled when it answers", "type", rem.Type, "item", rem.Item, "err", err)
		}
		s.applyRemoval(rem, true)
		s.purgeTakedown(r.Context(), rem.Type)
		s.log.Info("item removed", "type", rem.Type, "item", rem.Item, "reason", rem.Reason)
		writeJSON(w, http.StatusCreated, map[string]any{"removal": rem})
	case http.MethodDelete:
		var req removalRequest
		if r.URL.RawQuery != "" {
			q, err := url.ParseQuery(r.URL.RawQuery)
			if err != nil {
				return badParam("", []string{"type", "item"}, "query string: %v", err)
			}
			for name, vs := range q {
				if name != "type" && name != "item" {
					return badParam(name, []string{"type", "item"}, "unknown parameter %s; allowed: type, item", quoteTrunc(name))
				}
				if len(vs) != 1 {
					return badParam(name, nil, "parameter %q given more than once", name)
				}
			}
			req.Type, req.Item = q.Get("type"), q.Get("item")
		} else {
			var e *apiError
			if req, e = readRemoval(r, false); e != nil {
				return e
			}
		}
		if err := liststore.ValidateRemoval(req.Type, req.Item, ""); err != nil {
			return errorf(http.StatusBadRequest, "%v", err)
		}
		s.state.remMu.Lock()
		defer s.state.remMu.Unlock()
		// Durable first, then the cache. A retry after a failed Redis
		// step finds the durable row gone and still deletes the cached one.
		var durable bool
		if s.cfg.Removals != nil {
			var err error
			if durable, err = s.cfg.Removals.DeleteRemoval(r.Context(), req.Type, req.Item); err != nil {
				return fmt.Errorf("%w: deleting the removal durably failed: %v", errUnavailable, err)
			}
		}
		existed, err := s.store.DeleteRemoval(r.Context(), req.Type, req.Item)
		existed = existed || durable
		if err != nil {
			s.redisError("removals", err)
			return fmt.Errorf("%w: deleting the removal failed: %v", errUnavailable, err)
		}
		if !existed {
			return errorf(http.StatusNotFound, "%s/%s is not removed", req.Type, req.Item)
		}
		s.applyRemoval(liststore.Removal{Type: req.Type, Item: req.Item}, false)
		s.log.Info("item restored", "type", req.Type, "item", req.Item)
		writeJSON(w, http.StatusOK, map[string]any{"restored": map[string]string{"type": req.Type, "item": req.Item}})
	default:
		// The durable set when there is one: it is the truth.
		var all []liststore.Removal
		var err error
		if s.cfg.Removals != nil {
			all, err = s.durableRemovals(r.Context())
		} else if all, err = s.store.Removals(r.Context()); err != nil {
			s.redisError("removals", err)
		}
		if err != nil {
			return fmt.Errorf("%w: reading removals failed: %v", errUnavailable, err)
		}
		writeJSON(w, http.StatusOK, map[string]any{"removals": all})
	}
	return nil
}

func readRemoval(r *http.Request, post bool) (removalRequest, *apiError) {
	var req removalRequest
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return req, errorf(http.StatusUnsupportedMediaType, "Content-Type must be application/json, got %s", quoteTrunc(r.Header.Get("Content-Type")))
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxAdminBody+1))
	if err != nil {
		return req, errorf(http.StatusBadRequest, "reading body: %v", err)
	}
	if len(body) > maxAdminBody {
		return req, errorf(http.StatusRequestEntityTooLarge, "body is over the limit of %d bytes", maxAdminBody)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, errorf(http.StatusBadRequest, "body is not {\"type\":..,\"item\":..,\"reason\":..}: %v", err)
	}
	if dec.More() {
		return req, errorf(http.StatusBadRequest, "body has data after the object")
	}
	if !post && req.Reason != "" {
		return req, badParam("reason", nil, "DELETE takes type and item only")
	}
	return req, nil
}

// applyRemoval updates the in-memory deny set at once (the pub/sub event and
// the poll confirm it later), so that the next response already reflects it.
// The caller holds state.remMu.
func (s *Server) applyRemoval(rem liststore.Removal, add bool) {
	cur := s.state.rem.Load().all
	next := make([]liststore.Removal, 0, len(cur)+1)
	for _, x := range cur {
		if x.Type != rem.Type || x.Item != rem.Item {
			next = append(next, x)
		}
	}
	if add {
		next = append(next, rem)
	}
	sort.Slice(next, func(i, j int) bool {
		if next[i].Type != next[j].Type {
			return next[i].Type < next[j].Type
		}
		return next[i].Item < next[j].Item
	})
	s.setRemovals(next)
}
