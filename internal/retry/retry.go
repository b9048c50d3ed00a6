// Package retry waits out outages of the services topk depends on (Redis,
// Pub/Sub, Bigtable): Do runs an operation again with capped exponential
// backoff and full jitter for as long as its error is transient and the
// context lives. Every caller's operation is idempotent (a Lua script that
// never moves a pointer backwards, a Bigtable overwrite, a ledger
// difference), which is what makes running it again safe.
//
// Transient means the service may answer differently later: gRPC
// Unavailable, DeadlineExceeded, ResourceExhausted, Aborted and Internal,
// and network errors (connection refused or reset, timeouts, EOF), and a
// Redis that is loading, busy or failing over. Errors
// that say the request itself is wrong (NotFound, PermissionDenied,
// InvalidArgument, a Redis script error) are returned at once.
package retry

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Defaults for the zero fields of a Policy.
const (
	DefaultInitial = 100 * time.Millisecond
	DefaultMax     = 2 * time.Second
)

// Policy says how long to wait between attempts. The zero value waits
// 100 ms, doubling to at most 2 s, forever (until the context ends), and
// retries only transient errors.
type Policy struct {
	// Initial is the first wait. Zero: 100 ms.
	Initial time.Duration
	// Max caps a wait; it is also the longest a recovered service waits to
	// be noticed. Zero: 2 s.
	Max time.Duration
	// Retryable decides which errors are retried. Zero: Transient.
	Retryable func(error) bool
	// Log, when set, receives one warning when the operation first fails
	// and one info line when it succeeds after failing.
	Log *slog.Logger
	// What names the operation in log lines.
	What string
}

// Do runs op until it returns nil, a non-retryable error, or ctx ends (then
// it returns the last error joined with ctx's). It returns the number of
// failed attempts as well.
func (p Policy) Do(ctx context.Context, op func(context.Context) error) (failures int, err error) {
	if p.Initial <= 0 {
		p.Initial = DefaultInitial
	}
	if p.Max <= 0 {
		p.Max = DefaultMax
	}
	if p.Retryable == nil {
		p.Retryable = Transient
	}
	wait := p.Initial
	var start time.Time
	for {
		err = op(ctx)
		if err == nil {
			if failures > 0 && p.Log != nil {
				p.Log.Info("recovered", "op", p.What, "failures", failures, "after", time.Since(start).Round(time.Millisecond))
			}
			return failures, nil
		}
		if !p.Retryable(err) {
			return failures, err
		}
		if failures == 0 {
			start = time.Now()
			if p.Log != nil {
				p.Log.Warn("failed, retrying with backoff until it works", "op", p.What, "err", err)
			}
		}
		failures++
		// Full jitter: a uniform wait in [wait/2, wait], so many clients
		// waiting on one service do not retry in step.
		if serr := Sleep(ctx, wait/2+rand.N(wait/2+1)); serr != nil {
			return failures, errors.Join(err, serr)
		}
		wait = min(2*wait, p.Max)
	}
}

// Sleep waits d, or until ctx ends (then it returns ctx's error). A d of
// zero or less returns at once.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Do is Policy{}.Do: retry transient errors with the default backoff until
// ctx ends.
func Do(ctx context.Context, op func(context.Context) error) error {
	_, err := Policy{}.Do(ctx, op)
	return err
}

// Transient reports whether err may go away on its own: a service that is
// down, restarting, overloaded or slow, as opposed to a request that is
// wrong. A context error of the caller's own context is not transient for
// Do (it stops on ctx.Done first), but a per-attempt deadline is.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	if s, ok := status.FromError(err); ok && s.Code() != codes.OK && s.Code() != codes.Unknown {
		switch s.Code() {
		case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted, codes.Internal, codes.Canceled:
			return true
		default:
			return false
		}
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout) {
		return true
	}
	var re redis.Error
	if errors.As(err, &re) {
		// A Redis that is starting, busy with a script, or failing over.
		msg := re.Error()
		for _, p := range []string{"LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN", "CLUSTERDOWN", "READONLY", "OOM"} {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe)
}
