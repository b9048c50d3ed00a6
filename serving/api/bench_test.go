package api

import (
	"net/http"
	"testing"

	"github.com/topk-dev/topk/schemas"
)

// discardWriter is a reusable ResponseWriter that keeps nothing.
type discardWriter struct {
	h    http.Header
	code int
	n    int
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) WriteHeader(c int)   { w.code = c }
func (w *discardWriter) Write(b []byte) (int, error) {
	w.n += len(b)
	return len(b), nil
}

// BenchmarkTopHandler is the read path without the network: route,
// parse, look up, pick the rendered bytes, write headers and body.
func BenchmarkTopHandler(b *testing.B) {
	e := newEnv(b, nil)
	k := key("video", "global", schemas.Window1h)
	if _, err := e.store.Publish(b.Context(), mkList(k, 1, 1100, 1)); err != nil {
		b.Fatal(err)
	}
	srv, err := New(e.cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	h := srv.Handler()
	req, _ := http.NewRequest("GET", topPath(k, 100), nil)
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		clear(w.h)
		w.code = 0
		h.ServeHTTP(w, req)
	}
	b.StopTimer()
	if w.code != 200 || w.n == 0 {
		b.Fatalf("status %d", w.code)
	}
}
