package catalogue

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/topk-dev/topk/internal/svctest"
)

// testStore returns a Store on REDIS_ADDR (the real Redis, as in CI) or on
// a miniredis, under a prefix unique to the test, cleaned up at the end.
func testStore(t *testing.T) *Store {
	t.Helper()
	addr := os.Getenv("REDIS_ADDR")
	svctest.Report(t, "redis", addr != "", "REDIS_ADDR is not set: miniredis")
	if addr == "" {
		addr = miniredis.RunT(t).Addr()
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	prefix := fmt.Sprintf("topktest:%s:%d", t.Name(), time.Now().UnixNano())
	t.Cleanup(func() {
		ctx := context.Background()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
		c.Close()
	})
	return New(c, Options{Prefix: prefix})
}

// Property: what Load reads is what Get returns, items never loaded are
// absent, an empty field clears it, a change is announced per type, and a
// bad line stops the load naming its line number.
func TestLoadGet(t *testing.T) {
	st := testStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changes, err := st.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	in := `{"type":"video","item":"v_1","title":"Cat plays piano","thumbnail":"https://img.example/v_1.jpg"}

{"type":"video","item":"v_2","title":"Rain in Mumbai"}
{"type":"hashtag","item":"#ipl","title":"IPL final"}
`
	n, err := st.Load(ctx, strings.NewReader(in))
	if err != nil || n != 3 {
		t.Fatalf("Load = %d, %v; want 3", n, err)
	}
	got, err := st.Get(ctx, "video", []string{"v_1", "v_2", "v_3"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Entry{
		"v_1": {Title: "Cat plays piano", Thumbnail: "https://img.example/v_1.jpg"},
		"v_2": {Title: "Rain in Mumbai"},
	}
	if len(got) != len(want) || got["v_1"] != want["v_1"] || got["v_2"] != want["v_2"] {
		t.Fatalf("Get = %v, want %v", got, want)
	}
	seen := map[string]bool{}
	for len(seen) < 2 {
		select {
		case typ := <-changes:
			seen[typ] = true
		case <-time.After(3 * time.Second):
			t.Fatalf("announced %v, want video and hashtag", seen)
		}
	}
	// Clearing the thumbnail keeps the title.
	if err := st.Put(ctx, []Record{{Type: "video", Item: "v_1", Entry: Entry{Title: "Cat plays piano"}}}); err != nil {
		t.Fatal(err)
	}
	got, _ = st.Get(ctx, "video", []string{"v_1"})
	if got["v_1"] != (Entry{Title: "Cat plays piano"}) {
		t.Fatalf("after clearing the thumbnail: %+v", got["v_1"])
	}
	// A bad line: the error names it; nothing of its batch is written.
	bad := `{"type":"video","item":"v_9","title":"ok"}
{"type":"video","item":"v_10","thumbnail":"javascript:alert(1)"}
`
	if _, err := st.Load(ctx, strings.NewReader(bad)); !errors.Is(err, ErrBadRecord) || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("bad line: %v, want ErrBadRecord naming line 2", err)
	}
	if got, _ := st.Get(ctx, "video", []string{"v_9"}); len(got) != 0 {
		t.Fatalf("a rejected batch was partly written: %v", got)
	}
}

func TestValidate(t *testing.T) {
	long := strings.Repeat("x", MaxTitleLen+1)
	for _, tc := range []struct {
		r  Record
		ok bool
	}{
		{Record{Type: "video", Item: "v_1", Entry: Entry{Title: "Ok ✓", Thumbnail: "https://x/y.jpg"}}, true},
		{Record{Type: "video", Item: "v_1", Entry: Entry{Thumbnail: "data:image/png;base64,AAAA"}}, true},
		{Record{Type: "Video", Item: "v_1"}, false},
		{Record{Type: "video", Item: ""}, false},
		{Record{Type: "video", Item: "v 1"}, false},
		{Record{Type: "video", Item: "v_1", Entry: Entry{Title: long}}, false},
		{Record{Type: "video", Item: "v_1", Entry: Entry{Title: "a\nb"}}, false},
		{Record{Type: "video", Item: "v_1", Entry: Entry{Thumbnail: "javascript:alert(1)"}}, false},
		{Record{Type: "video", Item: "v_1", Entry: Entry{Thumbnail: `https://x/"onerror="alert(1)`}}, false},
	} {
		if err := Validate(tc.r); (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v, want ok=%v", tc.r, err, tc.ok)
		}
	}
}

// Property: the synthetic records are valid, deterministic, and name the
// synthetic source's items.
func TestSyntheticRecords(t *testing.T) {
	a, b := SyntheticRecords("video", 50), SyntheticRecords("video", 50)
	for i := range a {
		if err := Validate(a[i]); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if a[i] != b[i] {
			t.Fatalf("record %d differs between calls", i)
		}
		if a[i].Item != fmt.Sprintf("v_%d", i+1) {
			t.Fatalf("record %d names %s", i, a[i].Item)
		}
	}
	st := testStore(t)
	if err := FillSynthetic(context.Background(), st, []string{"video"}, 50); err != nil {
		t.Fatal(err)
	}
	got, _ := st.Get(context.Background(), "video", []string{"v_50", "v_51"})
	if len(got) != 1 || got["v_50"] != a[49].Entry {
		t.Fatalf("after FillSynthetic: %v", got)
	}
}
