package cdn

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/topk-dev/topk/schemas"
)

// fakeFastly is a local stand-in for Fastly's purge API: it checks the
// token, records each purge and can fail the first requests.
type fakeFastly struct {
	mu       sync.Mutex
	purged   []string // one entry per key purged
	soft     []bool
	requests int
	failN    int // answer 503 to the first failN requests
}

func (ff *fakeFastly) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	ff.requests++
	if r.Method != http.MethodPost {
		http.Error(w, "method", http.StatusMethodNotAllowed)
		return
	}
	if r.Header.Get("Fastly-Key") != "tok" {
		http.Error(w, `{"msg":"Provided credentials are missing or invalid"}`, http.StatusUnauthorized)
		return
	}
	if ff.failN > 0 {
		ff.failN--
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/service/svc1/purge")
	if !ok {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	var keys []string
	if rest == "" {
		keys = strings.Fields(r.Header.Get("Surrogate-Key"))
	} else {
		k, err := url.PathUnescape(strings.TrimPrefix(rest, "/"))
		if err != nil {
			http.Error(w, "bad path", http.StatusBadRequest)
			return
		}
		keys = []string{k}
	}
	for _, k := range keys {
		ff.purged = append(ff.purged, k)
		ff.soft = append(ff.soft, r.Header.Get("Fastly-Soft-Purge") == "1")
	}
	fmt.Fprintf(w, `{"status":"ok","id":"%d"}`, ff.requests)
}

func newFastly(t *testing.T, ff *fakeFastly, mod func(*Fastly)) *Fastly {
	t.Helper()
	ts := httptest.NewServer(ff)
	t.Cleanup(ts.Close)
	f := &Fastly{Endpoint: ts.URL, ServiceID: "svc1", Token: "tok", Backoff: time.Millisecond}
	if mod != nil {
		mod(f)
	}
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	return f
}

// Property: a single key goes to /purge/{key}, several keys to one bulk
// request per 256 keys in the Surrogate-Key header; every key asked for is
// purged exactly once, with the soft flag when configured.
func TestFastlyPurge(t *testing.T) {
	ff := &fakeFastly{}
	f := newFastly(t, ff, func(f *Fastly) { f.Soft = true })
	ctx := context.Background()
	list := ListKey(schemas.ListKey{Type: "video", Scope: "IN-MH", Window: "1h"})
	if err := f.Purge(ctx, list); err != nil {
		t.Fatal(err)
	}
	var many []string
	for i := 0; i < 300; i++ {
		many = append(many, fmt.Sprintf("k%d", i))
	}
	if err := f.Purge(ctx, many...); err != nil {
		t.Fatal(err)
	}
	ff.mu.Lock()
	defer ff.mu.Unlock()
	if ff.requests != 3 {
		t.Fatalf("%d requests, want 3 (one single, two bulk)", ff.requests)
	}
	want := append([]string{"topk:video:IN-MH:1h"}, many...)
	if len(ff.purged) != len(want) {
		t.Fatalf("purged %d keys, want %d", len(ff.purged), len(want))
	}
	for i := range want {
		if ff.purged[i] != want[i] || !ff.soft[i] {
			t.Fatalf("purge %d = %q soft=%v, want %q soft", i, ff.purged[i], ff.soft[i], want[i])
		}
	}
}

// Property: transient failures (503) are retried up to Attempts; a wrong
// token fails at once with ErrPurge and the API's message.
func TestFastlyErrors(t *testing.T) {
	ff := &fakeFastly{failN: 2}
	f := newFastly(t, ff, nil)
	if err := f.Purge(context.Background(), "topk:video"); err != nil {
		t.Fatalf("after two 503s: %v, want success on the third attempt", err)
	}
	ff.failN = 3
	if err := f.Purge(context.Background(), "topk:video"); !errors.Is(err, ErrPurge) || !strings.Contains(err.Error(), "503") {
		t.Fatalf("three 503s: %v, want ErrPurge naming 503", err)
	}
	bad := newFastly(t, &fakeFastly{}, func(f *Fastly) { f.Token = "wrong" })
	if err := bad.Purge(context.Background(), "topk:video"); !errors.Is(err, ErrPurge) || !strings.Contains(err.Error(), "401") {
		t.Fatalf("wrong token: %v, want ErrPurge naming 401", err)
	}
	if err := f.Purge(context.Background(), "has space"); !errors.Is(err, ErrPurge) {
		t.Fatalf("key with a space: %v", err)
	}
	for _, tc := range []Fastly{{ServiceID: "s"}, {Token: "t"}, {Endpoint: "ftp://x", ServiceID: "s", Token: "t"}} {
		if err := tc.Validate(); err == nil {
			t.Errorf("Validate(%+v) passed", tc)
		}
	}
}

func TestSurrogateKeys(t *testing.T) {
	got := SurrogateKeys(schemas.ListKey{Type: "video", Scope: "global", Window: "24h"})
	if got != "topk topk:video topk:video:global:24h" {
		t.Fatalf("SurrogateKeys = %q", got)
	}
}
