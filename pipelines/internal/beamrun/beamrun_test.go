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

// CPUProfileWindow writes a gzipped profile for a window that started
// (stopped early or at its end), an empty file when stopped before the
// window, and its stop waits for the file to be closed.
func TestCPUProfileWindow(t *testing.T) {
	gz := func(path string) bool {
		b, err := os.ReadFile(path)
		return err == nil && len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b
	}
	dir := t.TempDir()
	for _, c := range []struct {
		name     string
		from, to time.Duration
		run      time.Duration
		want     bool
	}{
		{"ended by its to", 10 * time.Millisecond, 60 * time.Millisecond, 200 * time.Millisecond, true},
		{"ended by stop", 10 * time.Millisecond, 0, 100 * time.Millisecond, true},
		{"stopped before from", time.Hour, 0, 20 * time.Millisecond, false},
		{"whole run", 0, 0, 20 * time.Millisecond, true},
	} {
		path := filepath.Join(dir, c.name+".pprof")
		stop, err := CPUProfileWindow(path, c.from, c.to)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(c.run)
		stop()
		if got := gz(path); got != c.want {
			t.Errorf("%s: a gzipped profile %v, want %v", c.name, got, c.want)
		}
	}
	// A new profile can start once a window is over: its stop stopped it.
	stop, err := CPUProfile(filepath.Join(dir, "after.pprof"))
	if err != nil {
		t.Fatalf("a profile after the windows: %v", err)
	}
	stop()
}
