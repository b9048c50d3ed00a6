package publish

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
	"github.com/redis/go-redis/v9"

	"github.com/topk-dev/topk/internal/prismopt/prismtest"
	"github.com/topk-dev/topk/internal/redistest"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/publish/liststore"
)

func TestMain(m *testing.M) { prismtest.Main(m) }

func init() {
	register.Function2x1[string, func(string, []byte), error](testListFn)
	register.Emitter2[string, []byte]()
}

// testListFn turns "type:scope:window|version" into KV<key, list JSON>.
func testListFn(spec string, emit func(string, []byte)) error {
	ks, vs, _ := strings.Cut(spec, "|")
	k, err := liststore.ParseListKey(ks)
	if err != nil {
		return err
	}
	v, err := strconv.ParseInt(vs, 10, 64)
	if err != nil {
		return err
	}
	emit(k.String(), mkList(k, v))
	return nil
}

func mkList(k schemas.ListKey, version int64) []byte {
	l := &schemas.List{Type: k.Type, Scope: k.Scope, Window: k.Window, AsOf: time.Unix(version, 0).UTC(),
		MaxOvercount: 1, Complete: true, CertifiedK: 3, Version: version}
	for i := 0; i < 3; i++ {
		c := uint64(100*version) - uint64(i)
		l.Items = append(l.Items, schemas.Entry{Rank: i + 1, Item: fmt.Sprintf("v_%d", i), Count: c, Lower: c - 1})
	}
	b, err := schemas.MarshalList(l)
	if err != nil {
		panic(err)
	}
	return b
}

// Property: the publish step of a Beam pipeline on Prism does not fail its
// bundle, nor the job, when Redis is down for longer than 7 s while it
// runs: the job succeeds once Redis is back, and each list's newest version
// is current (an older version in the same input never overwrites it).
func TestListsSurviveRedisDown(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the Redis outage test takes about 10 s")
	}
	rs := redistest.New(t)
	rs.Kill()
	go func() {
		time.Sleep(8 * time.Second)
		rs.Start()
	}()
	keys := []schemas.ListKey{
		{Type: "video", Scope: "global", Window: schemas.Window1m},
		{Type: "video", Scope: "IN", Window: schemas.Window1h},
	}
	var specs []any
	for _, k := range keys {
		for _, v := range []int64{5, 9, 7} { // 9 is the newest, 7 arrives after it
			specs = append(specs, k.String()+"|"+strconv.Itoa(int(v)))
		}
	}
	p, s := beam.NewPipelineWithRoot()
	col := beam.ParDo(s, testListFn, beam.Create(s, specs...))
	Lists(s, col, Config{RedisAddr: rs.Addr(), RedisPrefix: "topkpub"})
	start := time.Now()
	if err := ptest.Run(p); err != nil {
		t.Fatalf("pipeline failed while Redis was down: %v", err)
	}
	if d := time.Since(start); d < 7*time.Second {
		t.Fatalf("pipeline ended after %v, before Redis came back: the outage was not exercised", d)
	}
	c := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer c.Close()
	st := liststore.New(c, liststore.Options{Prefix: "topkpub"})
	for _, k := range keys {
		l, err := st.CurrentList(context.Background(), k)
		if err != nil || l.Version != 9 {
			t.Fatalf("%s: %v %+v, want v9 current", k, err, l)
		}
	}
	t.Logf("job succeeded %v after it started with Redis down for 8 s", time.Since(start).Round(time.Millisecond))
}

// TestWriteFileAtomic: a version is written whole, a rewrite replaces it,
// no temporary file is left behind, and a folder that is gone is an
// fs.ErrNotExist (writeList makes it again on that error).
func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	for _, body := range []string{"first version", "second, longer version"} {
		if err := writeFileAtomic(dir, "1000.json", []byte(body)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, "1000.json"))
		if err != nil || string(got) != body {
			t.Fatalf("read %q, %v; want %q", got, err, body)
		}
	}
	if err := writeFileAtomic(dir, "empty.json", nil); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if want := []string{"1000.json", "empty.json"}; !slices.Equal(names, want) {
		t.Fatalf("folder holds %q, want %q", names, want)
	}
	gone := filepath.Join(dir, "gone")
	if err := writeFileAtomic(gone, "1.json", []byte("x")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("write into a missing folder: %v, want fs.ErrNotExist", err)
	}
	fn := &publishFn{}
	if err := fn.writeList(gone, "1.json", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(gone); err != nil {
		t.Fatal(err)
	}
	if err := fn.writeList(gone, "2.json", []byte("y")); err != nil { // the folder is made again
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(gone, "2.json")); err != nil || string(b) != "y" {
		t.Fatalf("after the folder was removed: %q, %v", b, err)
	}
}
