// Package streams holds real and synthetic event streams for accuracy tests
// and benchmarks, and the exact oracle they are graded against.
//
// The real streams are public click and view data sets converted to NDJSON
// events (one schemas.Event JSON object per line, in arrival order) and
// embedded gzipped: see testdata/README.md for each one's source, license,
// counts and conversion (internal/streams/convert). ZipfStream makes
// deterministic synthetic streams. ExactCounts, TopK and Recall recount a
// stream exactly and grade a top-k answer against it, the way the exact path
// grades the fast path (DESIGN.md section 2).
package streams

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/topk-dev/topk/schemas"
)

//go:embed testdata/*.ndjson.gz
var files embed.FS

const suffix = ".ndjson.gz"

// ErrUnknownStream is returned for a name not in Names.
var ErrUnknownStream = errors.New("unknown stream")

// Names lists the embedded streams, sorted: "bms-webview-2", "kosarak10k",
// "ml-latest-small", "nasa-http".
func Names() []string {
	entries, err := fs.ReadDir(files, "testdata")
	if err != nil {
		panic(err) // the embedded directory always exists
	}
	var names []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), suffix); ok {
			names = append(names, n)
		}
	}
	return names
}

// Gzip returns the embedded gzipped NDJSON of a stream. The bytes are shared:
// do not modify them.
func Gzip(name string) ([]byte, error) {
	if name == "" || strings.ContainsAny(name, "/\\*?[") {
		return nil, fmt.Errorf("%w: %q", ErrUnknownStream, name)
	}
	b, err := files.ReadFile("testdata/" + name + suffix)
	if err != nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownStream, name)
	}
	return b, nil
}

// Open returns the stream's NDJSON, decompressed: one event per line, in
// arrival order.
func Open(name string) (io.ReadCloser, error) {
	b, err := Gzip(name)
	if err != nil {
		return nil, err
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", name, err)
	}
	return zr, nil
}

var loaded sync.Map // name -> *loadOnce

type loadOnce struct {
	once   sync.Once
	events []schemas.Event
	err    error
}

// Load returns the stream's events in arrival order. Streams are parsed once
// per process; each call returns a fresh copy the caller may modify.
func Load(name string) ([]schemas.Event, error) {
	v, _ := loaded.LoadOrStore(name, &loadOnce{})
	l := v.(*loadOnce)
	l.once.Do(func() { l.events, l.err = parse(name) })
	if l.err != nil {
		return nil, l.err
	}
	return slices.Clone(l.events), nil
}

func parse(name string) ([]schemas.Event, error) {
	r, err := Open(name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return ReadNDJSON(r)
}

// ReadNDJSON reads events, one JSON object per line (schemas.ParseEventJSON),
// skipping empty lines. It fails on the first malformed line.
func ReadNDJSON(r io.Reader) ([]schemas.Event, error) {
	var events []schemas.Event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var e schemas.Event
		if err := schemas.ParseEventJSON(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		events = append(events, e)
	}
	return events, sc.Err()
}

var pathMu sync.Mutex

// Path returns the path of a file holding the stream's NDJSON, decompressed,
// for sources that read files. The file lives in a directory of the system's
// temporary directory named after the content's hash, so it is written once
// and shared by every test process and run (written to a temporary name and
// renamed, so a reader never sees half a file). Do not modify it.
func Path(name string) (string, error) {
	gz, err := Gzip(name)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(gz)
	dir := filepath.Join(os.TempDir(), "topk-streams-"+hex.EncodeToString(sum[:8]))
	path := filepath.Join(dir, name+".ndjson")

	pathMu.Lock()
	defer pathMu.Unlock()
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, name+".*.tmp")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	r, err := Open(name)
	if err != nil {
		tmp.Close()
		return "", err
	}
	_, err = io.Copy(tmp, r)
	r.Close()
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("stream %s: %w", name, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", err
	}
	return path, nil
}
