// Package gcstest is for tests only: it starts one in-process fake Google
// Cloud Storage server per test binary (github.com/fsouza/fake-gcs-server,
// in memory, on a loopback port) and points the process's Cloud Storage
// clients at it through STORAGE_EMULATOR_HOST, so archive roots under
// gs:// work in `go test ./...` with no emulator or credentials.
package gcstest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/fsouza/fake-gcs-server/fakestorage"
)

// EnvEmulator is the variable the Cloud Storage client reads.
const EnvEmulator = "STORAGE_EMULATOR_HOST"

var (
	once     sync.Once
	server   *fakestorage.Server
	startErr error
)

func start() {
	// PublicHost without a port matches the loopback host on any port, so
	// the client's XML-API reads (http://host:port/bucket/object) are served.
	server, startErr = fakestorage.NewServerWithOptions(fakestorage.Options{
		Scheme: "http", Host: "127.0.0.1", PublicHost: "127.0.0.1"})
	if startErr != nil {
		startErr = fmt.Errorf("fake GCS server: %w", startErr)
		return
	}
	// Before any client exists: the archive package makes its client once.
	startErr = os.Setenv(EnvEmulator, strings.TrimPrefix(server.URL(), "http://"))
}

// Root makes a new, empty bucket on the process's fake server (started on
// first use) and returns gs://<bucket>/archive, an archive root of the
// test's own.
func Root(tb testing.TB) string {
	tb.Helper()
	once.Do(start)
	if startErr != nil {
		tb.Fatal(startErr)
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatal(err)
	}
	bucket := "topk-test-" + hex.EncodeToString(b[:])
	server.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: bucket})
	return "gs://" + bucket + "/archive"
}
