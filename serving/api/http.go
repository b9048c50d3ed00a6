package api

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// apiError is an answer other than success: its status, a message that says
// what was wrong, and for a bad parameter its name and allowed values. Every
// handler error is mapped to a response in writeError, and only there.
type apiError struct {
	Status  int      `json:"status"`
	Message string   `json:"error"`
	Param   string   `json:"param,omitempty"`
	Allowed []string `json:"allowed,omitempty"`
	// header lines to add (Allow, Retry-After, WWW-Authenticate).
	header map[string]string
}

func (e *apiError) Error() string { return e.Message }

func errorf(status int, format string, args ...any) *apiError {
	return &apiError{Status: status, Message: fmt.Sprintf(format, args...)}
}

func badParam(param string, allowed []string, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Param: param, Allowed: allowed, Message: fmt.Sprintf(format, args...)}
}

func methodNotAllowed(r *http.Request, allowed string) *apiError {
	e := errorf(http.StatusMethodNotAllowed, "method %s not allowed on %s; allowed: %s", quoteTrunc(r.Method), r.URL.Path, allowed)
	e.header = map[string]string{"Allow": allowed}
	return e
}

// errUnavailable wraps failures of a dependency the request needed (Pub/Sub).
var errUnavailable = errors.New("unavailable")

// quoteTrunc quotes a client-supplied string for a message, cut to 64
// bytes: messages name the bad value without echoing a hostile payload whole.
func quoteTrunc(s string) string {
	const max = 64
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return fmt.Sprintf("%q...", s[:cut])
	}
	return fmt.Sprintf("%q", s)
}

var jsonContentType = []string{"application/json"}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, route string, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{Status: http.StatusInternalServerError, Message: "internal error"}
		if errors.Is(err, errUnavailable) {
			ae.Status, ae.Message = http.StatusServiceUnavailable, err.Error()
			ae.header = map[string]string{"Retry-After": "2"}
		}
	}
	h := w.Header()
	for k, v := range ae.header {
		h.Set(k, v)
	}
	h["Content-Type"] = jsonContentType
	h.Set("Cache-Control", "no-store")
	body, _ := json.Marshal(ae)
	body = append(body, '\n')
	w.WriteHeader(ae.Status)
	if r.Method != http.MethodHead {
		w.Write(body)
	}
	if ae.Status >= 500 {
		s.log.Error("request failed", "route", route, "method", r.Method, "url", r.URL.String(), "status", ae.Status, "err", err)
	} else {
		s.log.Debug("request rejected", "route", route, "method", r.Method, "url", r.URL.String(), "status", ae.Status, "err", ae.Message)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		panic("api: marshal response: " + err.Error())
	}
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}

// statusWriter records the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer (Flush).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

var statusWriters = sync.Pool{New: func() any { return new(statusWriter) }}

// handle wraps a route: status and latency metrics, panic recovery, and the
// one place errors become responses.
func (s *Server) handle(route string, h func(http.ResponseWriter, *http.Request) error) http.Handler {
	rm := s.metrics.route(route)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := statusWriters.Get().(*statusWriter)
		sw.ResponseWriter, sw.code = w, 0
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Error("handler panic", "route", route, "panic", fmt.Sprint(p))
				if sw.code == 0 {
					s.writeError(sw, r, route, fmt.Errorf("panic: %v", p))
				}
			}
			code := sw.code
			if code == 0 {
				code = http.StatusOK
			}
			rm.observe(code, time.Since(start))
			sw.ResponseWriter = nil
			statusWriters.Put(sw)
		}()
		w.Header()["X-Content-Type-Options"] = nosniff
		if err := h(sw, r); err != nil {
			s.writeError(sw, r, route, err)
		}
	})
}

var nosniff = []string{"nosniff"}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/v1/top", s.handle("top", s.handleTop))
	mux.Handle("/v1/trending", s.handle("trending", s.handleTrending))
	mux.Handle("/v1/lists", s.handle("lists", s.handleLists))
	mux.Handle("/v1/events", s.handle("events", s.handleEvents))
	mux.Handle("/v1/admin/removals", s.handle("removals", s.handleRemovals))
	mux.Handle("/v1/admin/rollback", s.handle("rollback", s.handleRollback))
	mux.Handle("/v1/admin/catalogue", s.handle("catalogue", s.handleCatalogue))
	mux.Handle("/healthz", s.handle("healthz", s.handleHealthz))
	mux.Handle("/readyz", s.handle("readyz", s.handleReadyz))
	mux.Handle("/metrics", s.handle("metrics", s.metricsHandler()))
	mux.Handle("/{$}", s.handle("page", s.handlePage))
	mux.Handle("/", s.handle("other", func(w http.ResponseWriter, r *http.Request) error {
		return errorf(http.StatusNotFound, "no such path %s; see / for the page and /v1/top, /v1/trending, /v1/lists, /v1/events, /v1/admin/removals, /v1/admin/rollback, /v1/admin/catalogue, /healthz, /readyz, /metrics", quoteTrunc(r.URL.Path))
	}))
	return mux
}

func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return methodNotAllowed(r, "GET, HEAD")
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return methodNotAllowed(r, "GET, HEAD")
	}
	if !s.ready.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "not ready"})
		return nil
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "lists": len(s.state.cat.Load().keys)})
	return nil
}

func gzipBytes(b []byte) []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

// maxParams is the most parameters a route's query takes.
const maxParams = 4

// parseQuery splits a raw query string into the values of params (in that
// order), rejecting bad escapes, unknown names and repeated parameters with
// a 400 that names them. seen[i] reports whether params[i] was given. The
// results are arrays so that a read allocates nothing.
func parseQuery(raw string, params []string) (vals [maxParams]string, seen [maxParams]bool, aerr *apiError) {
	if len(params) > maxParams {
		panic("api: parseQuery: more than maxParams parameters")
	}
	for raw != "" {
		var part string
		part, raw, _ = strings.Cut(raw, "&")
		if part == "" {
			continue
		}
		rawName, rawVal, _ := strings.Cut(part, "=")
		name, ok1 := unescape(rawName)
		val, ok2 := unescape(rawVal)
		if !ok1 || !ok2 {
			return vals, seen, badParam("", params, "query string: bad percent-escape in %s", quoteTrunc(part))
		}
		i := slices.Index(params, name)
		if i < 0 {
			return vals, seen, badParam(name, params, "unknown parameter %s; allowed: %s", quoteTrunc(name), strings.Join(params, ", "))
		}
		if seen[i] {
			return vals, seen, badParam(name, nil, "parameter %q given more than once", name)
		}
		vals[i], seen[i] = val, true
	}
	return vals, seen, nil
}
