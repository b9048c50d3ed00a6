// Package publish is the fast path's last step: it writes every list version
// (top lists, and trending lists under window "trending": schemas.Trending)
// to Redis as a new immutable blob and moves the list's pointer in one atomic
// step (liststore: a Lua script), and optionally to files
// DIR/{type}/{scope}/{window}/{as_of unix ms}.json. A list's version is its
// as_of in Unix seconds, so republishing after a replay is idempotent and a
// pointer never moves backwards. It also writes dead letters as NDJSON.
package publish

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
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
	beam.ParDo0(s, &publishFn{RedisAddr: cfg.RedisAddr, RedisPrefix: cfg.RedisPrefix, ListsOut: cfg.ListsOut}, lists)
}

// DeadLetters writes dead letters as NDJSON files under dir (one file per
// bundle), or only counts them when dir is "".
func DeadLetters(s beam.Scope, dead beam.PCollection, dir string) {
	s = s.Scope("publish.DeadLetters")
	beam.ParDo0(s, &deadLetterFn{Dir: dir}, dead)
}

var (
	listsPublished = beam.NewCounter("topk", "lists")
	listsMoved     = beam.NewCounter("topk", "lists_moved")
	deadLetters    = beam.NewCounter("topk", "dead_letters")
)

func init() {
	register.DoFn3x1[context.Context, string, []byte, error](&publishFn{})
	register.DoFn2x1[context.Context, schemas.DeadLetter, error](&deadLetterFn{})
}

type publishFn struct {
	RedisAddr   string
	RedisPrefix string
	ListsOut    string

	client *redis.Client
	store  *liststore.Store
}

func (fn *publishFn) Setup() {
	if fn.RedisAddr == "" {
		return
	}
	fn.client = redis.NewClient(&redis.Options{Addr: fn.RedisAddr, MaxRetries: 5})
	fn.store = liststore.New(fn.client, liststore.Options{Prefix: fn.RedisPrefix})
}

func (fn *publishFn) Teardown() {
	if fn.client != nil {
		fn.client.Close()
	}
}

// decodeBlob checks a list blob, a top list or, under a key ending in
// ":trending", a trending list, and returns its key, version and as_of.
func decodeBlob(key string, blob []byte) (schemas.ListKey, int64, time.Time, error) {
	if strings.HasSuffix(key, ":"+string(schemas.WindowTrending)) {
		t, err := schemas.UnmarshalTrending(blob)
		if err != nil {
			return schemas.ListKey{}, 0, time.Time{}, err
		}
		return t.Key(), t.Version, t.AsOf, nil
	}
	l, err := schemas.UnmarshalList(blob)
	if err != nil {
		return schemas.ListKey{}, 0, time.Time{}, err
	}
	return l.Key(), l.Version, l.AsOf, nil
}

func (fn *publishFn) ProcessElement(ctx context.Context, key string, blob []byte) error {
	k, version, asOf, err := decodeBlob(key, blob)
	if err != nil {
		return fmt.Errorf("publish %s: %w", key, err)
	}
	if fn.store != nil {
		moved, err := fn.store.PublishRaw(ctx, k, version, blob)
		if err != nil {
			return fmt.Errorf("publish %s v%d: %w", key, version, err)
		}
		if moved {
			listsMoved.Inc(ctx, 1)
		}
	}
	if fn.ListsOut != "" {
		dir := filepath.Join(fn.ListsOut, k.Type, k.Scope, string(k.Window))
		if err := writeFileAtomic(dir, strconv.FormatInt(asOf.UnixMilli(), 10)+".json", blob); err != nil {
			return fmt.Errorf("publish %s: %w", key, err)
		}
	}
	listsPublished.Inc(ctx, 1)
	return nil
}

// writeFileAtomic writes name in dir via a temporary file and a rename, so a
// reader never sees half a file and a replay overwrites with the same bytes.
func writeFileAtomic(dir, name string, data []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, name))
}

type deadLetterFn struct {
	Dir string

	f   *os.File
	enc *json.Encoder
}

var deadFileSeq atomic.Int64

func (fn *deadLetterFn) ProcessElement(ctx context.Context, d schemas.DeadLetter) error {
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

func (fn *deadLetterFn) FinishBundle() error {
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
