// Package memtest measures memory in tests: the live heap after a full
// collection, so that a test can assert that some state is bounded (flat
// under a spam wave, not growing once a window is full).
package memtest

import "runtime"

// LiveHeap is the bytes of live heap objects after two full collections
// (the second frees what the first's finalizers released).
func LiveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
