package publish

import (
	"bytes"
	"strconv"
	"testing"
)

// BenchmarkWriteFileAtomic is the file sink's cost per list version: one
// temporary file written and renamed to the version's new name.
//
//	go test -run '^$' -bench WriteFileAtomic -benchtime 20000x ./transforms/publish
func BenchmarkWriteFileAtomic(b *testing.B) {
	dir := b.TempDir()
	blob := bytes.Repeat([]byte("x"), 8<<10) // a replay's list versions average 7.7 kB
	b.SetBytes(int64(len(blob)))
	b.ResetTimer()
	for i := range b.N {
		if err := writeFileAtomic(dir, strconv.Itoa(i)+".json", blob); err != nil {
			b.Fatal(err)
		}
	}
}
