package api

import (
	_ "embed"
	"net/http"
	"strconv"
)

// page is the trending shelf: a static page that calls /v1/lists, /v1/top
// and /v1/trending (no build step).
//
//go:embed web/index.html
var page []byte

var (
	htmlContentType = []string{"text/html; charset=utf-8"}
	pageCSP         = []string{"default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src https: http: data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"}
	pageCache       = []string{"public, max-age=60"}
	pageLen         = []string{strconv.Itoa(len(page))}
)

func (s *Server) handlePage(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return methodNotAllowed(r, "GET, HEAD")
	}
	h := w.Header()
	h["Content-Type"] = htmlContentType
	h["Content-Security-Policy"] = pageCSP
	h["Cache-Control"] = pageCache
	h["Content-Length"] = pageLen
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(page)
	}
	return nil
}
