package retry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Property: a transient error is retried until the operation succeeds, with
// waits that grow and never exceed Max; a permanent error is returned at
// once; a context that ends stops the retries with both errors.
func TestDo(t *testing.T) {
	ctx := context.Background()
	n := 0
	start := time.Now()
	fails, err := Policy{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond}.Do(ctx, func(context.Context) error {
		n++
		if n < 6 {
			return status.Error(codes.Unavailable, "down")
		}
		return nil
	})
	if err != nil || fails != 5 || n != 6 {
		t.Fatalf("fails=%d n=%d err=%v", fails, n, err)
	}
	// Waits: <=5, <=10, <=20, <=20, <=20 ms.
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("5 retries took %v: Max not honoured", d)
	}

	perm := status.Error(codes.NotFound, "no such table")
	n = 0
	if _, err := (Policy{}).Do(ctx, func(context.Context) error { n++; return perm }); !errors.Is(err, perm) || n != 1 {
		t.Fatalf("permanent error: n=%d err=%v", n, err)
	}

	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = Policy{Initial: time.Millisecond}.Do(cctx, func(context.Context) error { return status.Error(codes.Unavailable, "down") })
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "down") {
		t.Fatalf("ended context: %v", err)
	}
}

func TestTransient(t *testing.T) {
	_, dialErr := net.Dial("tcp", "127.0.0.1:1")
	for _, c := range []struct {
		err  error
		want bool
	}{
		{status.Error(codes.Unavailable, "x"), true},
		{status.Error(codes.DeadlineExceeded, "x"), true},
		{status.Error(codes.NotFound, "x"), false},
		{status.Error(codes.PermissionDenied, "x"), false},
		{fmt.Errorf("publish: %w", dialErr), true},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), true},
		{errors.New("bad list"), false},
		{nil, false},
	} {
		if got := Transient(c.err); got != c.want {
			t.Errorf("Transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
