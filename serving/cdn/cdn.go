// Package cdn purges cached API responses from a CDN by surrogate key, so
// that a takedown or a rollback is visible at the edge at once rather than
// after the response's max-age plus stale-while-revalidate (40-90 s).
//
// The serving binary tags every list response with surrogate keys
// (SurrogateKeys: the whole API, the item type, the list) and purges the
// type's key on a takedown and the list's key on a rollback. Purger is the
// interface; Fastly implements Fastly's purge API:
//
//	POST {endpoint}/service/{service_id}/purge/{key}     one key
//	POST {endpoint}/service/{service_id}/purge           several keys, in the
//	     Surrogate-Key header, space-separated (at most 256 per request)
//
// with the API token in the Fastly-Key header and, for a soft purge (mark
// stale instead of evict, so the edge may still serve it if the origin
// fails), Fastly-Soft-Purge: 1. The endpoint is configurable so that tests
// (and a proxy) can stand in for api.fastly.com.
package cdn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/topk-dev/topk/schemas"
)

// Purger removes every cached response tagged with any of keys.
type Purger interface {
	Purge(ctx context.Context, keys ...string) error
}

// Surrogate keys of API responses.
const (
	// KeyAll tags every list and chart response.
	KeyAll = "topk"
)

// TypeKey tags every response about items of typ: what a takedown purges.
func TypeKey(typ string) string { return "topk:" + typ }

// ListKey tags the responses of one list: what a rollback purges.
func ListKey(k schemas.ListKey) string { return "topk:" + k.String() }

// SurrogateKeys is the Surrogate-Key header value of a list's responses.
// There are no per-item keys: a takedown must reach every response of the
// type holding the item, and a response of k = 1,000 entries could not carry
// one key per entry within Fastly's 16 KB header limit.
func SurrogateKeys(k schemas.ListKey) string {
	return KeyAll + " " + TypeKey(k.Type) + " " + ListKey(k)
}

// ChartKeys is the Surrogate-Key header value of a daily chart's
// responses: a final chart is cached an hour at the edge, so a takedown
// must reach it through the type's key too.
func ChartKeys(typ, scope string) string {
	return KeyAll + " " + TypeKey(typ) + " topk:chart:" + typ + ":" + scope
}

// DefaultFastlyEndpoint is Fastly's API.
const DefaultFastlyEndpoint = "https://api.fastly.com"

// maxKeysPerRequest is Fastly's limit of surrogate keys per bulk purge.
const maxKeysPerRequest = 256

// ErrPurge wraps every failed purge.
var ErrPurge = errors.New("cdn purge failed")

// Fastly purges by surrogate key through Fastly's API. Configure it, then
// Validate.
type Fastly struct {
	// Endpoint is the API base URL. Zero: DefaultFastlyEndpoint.
	Endpoint string
	// ServiceID is the Fastly service whose cache is purged. Required.
	ServiceID string
	// Token is the API token (Fastly-Key header). Required.
	Token string
	// Soft marks content stale instead of evicting it.
	Soft bool
	// Attempts is how many times a request is tried on a network error, a
	// 429 or a 5xx. Zero: 3.
	Attempts int
	// Backoff is the wait before the second attempt, doubled after each.
	// Zero: 200 ms.
	Backoff time.Duration
	// Client sends the requests. Zero: a client with a 10 s timeout.
	Client *http.Client
}

// Validate checks the configuration and fills defaults.
func (f *Fastly) Validate() error {
	if f.Endpoint == "" {
		f.Endpoint = DefaultFastlyEndpoint
	}
	u, err := url.Parse(f.Endpoint)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("fastly: endpoint %q is not an http(s) URL", f.Endpoint)
	}
	f.Endpoint = strings.TrimSuffix(f.Endpoint, "/")
	if f.ServiceID == "" || strings.ContainsAny(f.ServiceID, "/?# ") {
		return fmt.Errorf("fastly: service id %q is missing or malformed", f.ServiceID)
	}
	if f.Token == "" {
		return errors.New("fastly: API token is missing")
	}
	if f.Attempts <= 0 {
		f.Attempts = 3
	}
	if f.Backoff <= 0 {
		f.Backoff = 200 * time.Millisecond
	}
	if f.Client == nil {
		f.Client = &http.Client{Timeout: 10 * time.Second}
	}
	return nil
}

// Purge purges keys: one request for a single key, bulk requests of up to
// 256 keys otherwise. It returns the first error (ErrPurge), after retries.
func (f *Fastly) Purge(ctx context.Context, keys ...string) error {
	for _, k := range keys {
		if k == "" || strings.ContainsAny(k, " \t\r\n") {
			return fmt.Errorf("%w: surrogate key %q is empty or has spaces", ErrPurge, k)
		}
	}
	base := f.Endpoint + "/service/" + url.PathEscape(f.ServiceID) + "/purge"
	if len(keys) == 1 {
		return f.send(ctx, base+"/"+url.PathEscape(keys[0]), "")
	}
	for start := 0; start < len(keys); start += maxKeysPerRequest {
		part := keys[start:min(start+maxKeysPerRequest, len(keys))]
		if err := f.send(ctx, base, strings.Join(part, " ")); err != nil {
			return err
		}
	}
	return nil
}

// send POSTs one purge request, retrying transient failures.
func (f *Fastly) send(ctx context.Context, u, surrogate string) error {
	wait := f.Backoff
	var last error
	for attempt := 1; attempt <= f.Attempts; attempt++ {
		retry, err := f.once(ctx, u, surrogate)
		if err == nil {
			return nil
		}
		last = err
		if !retry || attempt == f.Attempts {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %v (then %v)", ErrPurge, last, ctx.Err())
		case <-time.After(wait):
		}
		wait *= 2
	}
	return last
}

func (f *Fastly) once(ctx context.Context, u, surrogate string) (retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrPurge, err)
	}
	req.Header.Set("Fastly-Key", f.Token)
	req.Header.Set("Accept", "application/json")
	if surrogate != "" {
		req.Header.Set("Surrogate-Key", surrogate)
	}
	if f.Soft {
		req.Header.Set("Fastly-Soft-Purge", "1")
	}
	resp, err := f.Client.Do(req)
	if err != nil {
		return ctx.Err() == nil, fmt.Errorf("%w: %v", ErrPurge, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 == 2 {
		return false, nil
	}
	retry = resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500
	return retry, fmt.Errorf("%w: %s %s: %s", ErrPurge, resp.Status, req.URL.Path, strings.TrimSpace(string(body)))
}
