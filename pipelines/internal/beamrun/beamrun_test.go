package beamrun

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// HeapProfile writes a (gzipped protobuf) heap profile at once and again
// at a bigger heap, refuses a path it cannot create, and "" is a no-op.
func TestHeapProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "heap.pprof")
	stop, err := HeapProfile(path, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	first, err := os.Stat(path)
	if err != nil {
		t.Fatalf("no profile written at start: %v", err)
	}
	keep := make([][]byte, 0, 64)
	for range 64 {
		keep = append(keep, make([]byte, 1<<20)) // 64 MiB more in use
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := os.Stat(path)
		if err == nil && st.ModTime().After(first.ModTime()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("profile not rewritten after the heap grew")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("profile %d bytes (%v): want a gzipped pprof profile", len(b), err)
	}
	_ = keep[len(keep)-1]

	if _, err := HeapProfile(filepath.Join(t.TempDir(), "missing", "heap.pprof"), time.Second); err == nil {
		t.Error("a path in a missing directory: no error")
	}
	stop, err = HeapProfile("", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	stop()
}
