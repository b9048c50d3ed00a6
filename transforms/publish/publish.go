// Package publish is the fast path's last step: it writes every list version
// (top lists, and trending lists under window "trending": schemas.Trending)
// to Redis as a new immutable blob and moves the list's pointer in one atomic
// step (liststore: a Lua script), and optionally to files
// DIR/{type}/{scope}/{window}/{as_of unix ms}.json. A list's version is its
// as_of in Unix seconds, so republishing after a replay is idempotent and a
// pointer never moves backwards. It also writes dead letters as NDJSON.
//
// # Redis outages
//
// A Redis outage never fails a bundle (on Prism a failed bundle fails the
// job). ProcessElement only queues the list in a liststore.Publisher;
// FinishBundle publishes the queue, retrying transient errors with capped
// backoff (at most 2 s between attempts) for as long as Redis is down, so
// the lists move again within about 2 s of Redis returning. Within a bundle
// the newest version of each list wins: older queued versions are skipped,
// and the publish script never moves a pointer backwards over a newer one.
// While a bundle waits, the rest of the job (reading, counting) goes on; the
// publish stage catches up when Redis returns. Errors that are not an outage
// (a list that fails validation) still fail the bundle: they are bugs.
package publish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/redis/go-redis/v9"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/publish/liststore"
)

// Config says where lists go. An empty RedisAddr and ListsOut publish
// nowhere (the lists are still counted), which is what a dry run needs.
type Config struct {
	RedisAddr   string
	RedisPrefix string // liststore key prefix; "" = liststore's default
	ListsOut    string
}

// Lists publishes KV<list key, list JSON> and returns nothing.
func Lists(s beam.Scope, lists beam.PCollection, cfg Config) {
	s = s.Scope("publish.Lists")
	terminate(s, beam.ParDo(s, &publishFn{RedisAddr: cfg.RedisAddr, RedisPrefix: cfg.RedisPrefix, ListsOut: cfg.ListsOut}, lists))
}

// DeadLetters writes dead letters as NDJSON files under dir (one file per
// bundle), or only counts them when dir is "".
func DeadLetters(s beam.Scope, dead beam.PCollection, dir string) {
	s = s.Scope("publish.DeadLetters")
	terminate(s, beam.ParDo(s, &deadLetterFn{Dir: dir}, dead))
}

// terminate ends a sink's never-written output (KV<string, int64>) in a
// GroupByKey, so that the sink's stage has an output.
//
// Why: Prism (v2.77.0, stage.Execute) waits for a bundle in a select loop
// over a channel that is closed from the start when the stage has no
// outputs, so for a sink stage the loop spins on a core for the whole
// bundle. On two cores, the list publishing stage spinning for every slide
// took 90% of a replay's CPU (pprof: runtime.selectgo under
// prism/internal.(*stage).Execute). With an output the channel closes only
// when the bundle's data ends, just before its response. Other runners
// treat the empty output as a no-op.
func terminate(s beam.Scope, out beam.PCollection) {
	beam.ParDo0(s, discardFn, beam.GroupByKey(s, out))
}

func discardFn(string, func(*int64) bool) {}

var (
	listsPublished = beam.NewCounter("topk", "lists")
	listsMoved     = beam.NewCounter("topk", "lists_moved")
	deadLetters    = beam.NewCounter("topk", "dead_letters")
)

func init() {
	register.DoFn4x1[context.Context, string, []byte, func(string, int64), error](&publishFn{})
	register.DoFn3x1[context.Context, schemas.DeadLetter, func(string, int64), error](&deadLetterFn{})
	register.Function2x0[string, func(*int64) bool](discardFn)
	register.Emitter2[string, int64]()
	register.Iter1[int64]()
}

type publishFn struct {
	RedisAddr   string
	RedisPrefix string
	ListsOut    string

	client *redis.Client
	pub    *liststore.Publisher
	dirs   map[string]bool // list directories made (a stat saved per list)
}

func (fn *publishFn) Setup() {
	if fn.RedisAddr == "" {
		return
	}
	// Short timeouts and no client-side retries: the Publisher retries
	// with backoff, and a frozen Redis must not hold a call for long.
	fn.client = redis.NewClient(&redis.Options{
		Addr: fn.RedisAddr, MaxRetries: -1,
		DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
	})
	fn.pub = liststore.NewPublisher(liststore.New(fn.client, liststore.Options{Prefix: fn.RedisPrefix}), nil)
}

func (fn *publishFn) Teardown() {
	if fn.client != nil {
		fn.client.Close()
	}
}

// decodeBlob reads a list's (or trending list's) key, version and as_of
// from its header (schemas.ListHeader), and checks the key matches the
// element's.
func decodeBlob(key string, blob []byte) (schemas.ListKey, int64, time.Time, error) {
	k, version, asOf, err := listHeader(blob)
	if err == nil && k.String() != key {
		err = fmt.Errorf("blob of %s under key %q", k, key)
	}
	return k, version, asOf, err
}

func (fn *publishFn) ProcessElement(ctx context.Context, key string, blob []byte, _ func(string, int64)) error {
	k, version, asOf, err := decodeBlob(key, blob)
	if err != nil {
		return fmt.Errorf("publish %s: %w", key, err)
	}
	if fn.pub != nil {
		if err := k.Validate(); err != nil || version <= 0 {
			return fmt.Errorf("publish %s v%d: bad key or version: %v", key, version, err)
		}
		fn.pub.Offer(k, version, blob)
	}
	if fn.ListsOut != "" {
		dir := filepath.Join(fn.ListsOut, k.Type, k.Scope, string(k.Window))
		if err := fn.writeList(dir, strconv.FormatInt(asOf.UnixMilli(), 10)+".json", blob); err != nil {
			return fmt.Errorf("publish %s: %w", key, err)
		}
	}
	listsPublished.Inc(ctx, 1)
	return nil
}

// writeList writes a list file, making its directory the first time (and
// again if it was removed since).
func (fn *publishFn) writeList(dir, name string, blob []byte) error {
	if !fn.dirs[dir] {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if fn.dirs == nil {
			fn.dirs = map[string]bool{}
		}
		fn.dirs[dir] = true
	}
	err := writeFileAtomic(dir, name, blob)
	if errors.Is(err, fs.ErrNotExist) {
		delete(fn.dirs, dir)
		if err = os.MkdirAll(dir, 0o755); err == nil {
			fn.dirs[dir] = true
			err = writeFileAtomic(dir, name, blob)
		}
	}
	return err
}

// FinishBundle publishes the bundle's lists, waiting out a Redis outage
// (see the package doc).
func (fn *publishFn) FinishBundle(ctx context.Context, _ func(string, int64)) error {
	if fn.pub == nil || fn.pub.Pending() == 0 {
		return nil
	}
	moved, err := fn.pub.Flush(ctx)
	listsMoved.Inc(ctx, int64(moved))
	return err
}

// writeFileAtomic writes name in dir (which exists) via a temporary file and
// a rename, so a reader never sees half a file and a replay overwrites with
// the same bytes.
//
// It makes the system calls itself (open, write, close, rename: four per
// list version) rather than through os.CreateTemp and os.Rename, which add
// an fcntl, an epoll registration and an lstat of the target per file and
// an os.File around it: a replay writes 120,000 list files, and on tmpfs
// a file took 30 us that way against 19 us this way (BENCHMARKS.md,
// "Window results cut to their share, and the file sink's system
// calls"). The file is 0644 before the umask, as os.WriteFile makes
// them (os.CreateTemp made 0600): the lists are for readers.
func writeFileAtomic(dir, name string, data []byte) error {
	var tmp string
	var fd int
	for {
		tmp = filepath.Join(dir, "."+name+"."+tmpSuffix())
		var err error
		fd, err = syscall.Open(tmp, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC, 0o644)
		if err == nil {
			break
		}
		if err == syscall.EINTR || err == syscall.EEXIST {
			continue
		}
		return &fs.PathError{Op: "open", Path: tmp, Err: err}
	}
	for b := data; len(b) > 0; {
		n, err := syscall.Write(fd, b)
		if err == syscall.EINTR {
			continue
		}
		if err == nil && n == 0 {
			err = io.ErrShortWrite
		}
		if err != nil {
			syscall.Close(fd)
			syscall.Unlink(tmp)
			return &fs.PathError{Op: "write", Path: tmp, Err: err}
		}
		b = b[n:]
	}
	if err := syscall.Close(fd); err != nil {
		syscall.Unlink(tmp)
		return &fs.PathError{Op: "close", Path: tmp, Err: err}
	}
	if err := syscall.Rename(tmp, filepath.Join(dir, name)); err != nil {
		syscall.Unlink(tmp)
		return &os.LinkError{Op: "rename", Old: tmp, New: filepath.Join(dir, name), Err: err}
	}
	return nil
}

// tmpPrefix and tmpSeq name temporary files: random per process (another
// process may write the same folder), then a counter.
var (
	tmpPrefix = strconv.FormatUint(mrand.Uint64(), 36)
	tmpSeq    atomic.Uint64
)

func tmpSuffix() string {
	return tmpPrefix + "-" + strconv.FormatUint(tmpSeq.Add(1), 36)
}

type deadLetterFn struct {
	Dir string

	f   *os.File
	enc *json.Encoder
}

var deadFileSeq atomic.Int64

func (fn *deadLetterFn) ProcessElement(ctx context.Context, d schemas.DeadLetter, _ func(string, int64)) error {
	deadLetters.Inc(ctx, 1)
	if fn.Dir == "" {
		return nil
	}
	if fn.f == nil {
		if err := os.MkdirAll(fn.Dir, 0o755); err != nil {
			return fmt.Errorf("dead letters: %w", err)
		}
		name := fmt.Sprintf("dead-%d-%d-%d.ndjson", time.Now().UnixNano(), os.Getpid(), deadFileSeq.Add(1))
		f, err := os.Create(filepath.Join(fn.Dir, name))
		if err != nil {
			return fmt.Errorf("dead letters: %w", err)
		}
		fn.f, fn.enc = f, json.NewEncoder(f)
	}
	if err := fn.enc.Encode(&d); err != nil {
		return fmt.Errorf("dead letters: %w", err)
	}
	return nil
}

func (fn *deadLetterFn) FinishBundle(_ func(string, int64)) error {
	if fn.f == nil {
		return nil
	}
	err := fn.f.Close()
	fn.f, fn.enc = nil, nil
	if err != nil {
		return fmt.Errorf("dead letters: %w", err)
	}
	return nil
}
