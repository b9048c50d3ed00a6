// Package storetest gives tests a fresh exact store: on the Bigtable
// emulator at BIGTABLE_EMULATOR_HOST when it is set (.ci/run sets it), else
// on an in-process bttest. Every store gets its own instance name, so tests
// and repeated runs sharing one emulator never see each other's tables.
package storetest

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/api/option"

	"github.com/topk-dev/topk/transforms/exact/store"
)

// Store is an open store with its tables created, and where it lives.
type Store struct {
	*store.Store
	Project, Instance string
	// EmulatorAddr is the in-process bttest's address; "" when the store is
	// on BIGTABLE_EMULATOR_HOST's emulator.
	EmulatorAddr string
}

var seq atomic.Int64

// New opens a fresh store; it is closed (and its bttest stopped) when the
// test ends.
func New(t testing.TB) Store {
	t.Helper()
	s := Store{Project: "topk-test", Instance: fmt.Sprintf("t%d-%d", time.Now().UnixNano(), seq.Add(1))}
	var opts []option.ClientOption
	if os.Getenv("BIGTABLE_EMULATOR_HOST") == "" {
		addr, stop, err := store.Embedded()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		s.EmulatorAddr = addr
		opts = store.EmulatorOptions(addr)
	}
	ctx := context.Background()
	st, err := store.Open(ctx, s.Project, s.Instance, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.EnsureTables(ctx); err != nil {
		t.Fatal(err)
	}
	s.Store = st
	return s
}
