package liststore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/topk-dev/topk/schemas"
)

// TestTrendingKey: a trending list is published, listed and read under its
// key (type, scope, "trending") with the same pointer rules as a top list.
func TestTrendingKey(t *testing.T) {
	st, _ := testStore(t, Options{})
	ctx := context.Background()
	k := schemas.ListKey{Type: "hashtag", Scope: "IN-MH", Window: schemas.WindowTrending}
	if moved, err := st.PublishRaw(ctx, k, 2, []byte(`v2`)); err != nil || !moved {
		t.Fatalf("publish: %v %v", moved, err)
	}
	if moved, _ := st.PublishRaw(ctx, k, 1, []byte(`v1`)); moved {
		t.Fatal("pointer moved backwards")
	}
	raw, v, err := st.Current(ctx, k)
	if err != nil || v != 2 || string(raw) != "v2" {
		t.Fatalf("current: %q v%d %v", raw, v, err)
	}
	keys, err := st.Keys(ctx)
	if err != nil || len(keys) != 1 || keys[0] != k {
		t.Fatalf("keys: %v %v", keys, err)
	}
	if got, err := ParseListKey("hashtag:IN-MH:trending"); err != nil || got != k {
		t.Fatalf("ParseListKey: %v %v", got, err)
	}
}

// TestCurrentHeader: CurrentHeader reads a top list's and a trending list's
// version and as_of from the first KB of the current blob, as the whole
// decode does; a header longer than that KB (a padded rules version) is
// read from the whole blob; a blob whose header names another list or
// version is an error, and no pointer is ErrNotFound.
func TestCurrentHeader(t *testing.T) {
	st, _ := testStore(t, Options{})
	ctx := context.Background()
	asOf := time.Date(2026, 12, 4, 10, 0, 10, 0, time.UTC)

	top := mkList(key1h, 7, 200) // entries well past the first KB
	top.AsOf = asOf
	if _, err := st.Publish(ctx, top); err != nil {
		t.Fatal(err)
	}
	tk := schemas.ListKey{Type: "hashtag", Scope: "IN-MH", Window: schemas.WindowTrending}
	tr := &schemas.Trending{Type: tk.Type, Scope: tk.Scope, Window: tk.Window, AsOf: asOf.Add(time.Minute),
		Counts: schemas.CountsUsers, Version: 3}
	for i := range 50 {
		tr.Items = append(tr.Items, schemas.TrendEntry{Rank: i + 1, Item: fmt.Sprintf("#tag%d", i), Score: float64(100 - i), Count5m: uint64(500 - i), PeakScore: float64(100 - i), PeakAt: asOf})
	}
	tb, err := schemas.MarshalTrending(tr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PublishRaw(ctx, tk, tr.Version, tb); err != nil {
		t.Fatal(err)
	}
	long := mkList(schemas.ListKey{Type: "video", Scope: "global", Window: schemas.Window5m}, 9, 20)
	long.AsOf = asOf.Add(2 * time.Minute)
	long.Rules = strings.Repeat("r", 2*headerBytes)
	if _, err := st.Publish(ctx, long); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		k       schemas.ListKey
		version int64
		asOf    time.Time
	}{{key1h, 7, asOf}, {tk, 3, tr.AsOf}, {long.Key(), 9, long.AsOf}} {
		v, at, err := st.CurrentHeader(ctx, c.k)
		if err != nil || v != c.version || !at.Equal(c.asOf) {
			t.Errorf("%s: CurrentHeader = v%d %s %v, want v%d %s", c.k, v, at, err, c.version, c.asOf)
		}
	}

	// A blob that is not the list its pointer names.
	other := mkList(key1h, 8, 3)
	raw, err := schemas.MarshalList(other)
	if err != nil {
		t.Fatal(err)
	}
	k5 := schemas.ListKey{Type: "search", Scope: "global", Window: schemas.Window5m}
	if _, err := st.PublishRaw(ctx, k5, 8, raw); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.CurrentHeader(ctx, k5); err == nil {
		t.Errorf("%s holding %s's blob: no error", k5, key1h)
	}
	missing := schemas.ListKey{Type: "video", Scope: "FR", Window: schemas.Window1m}
	if _, _, err := st.CurrentHeader(ctx, missing); !errors.Is(err, ErrNotFound) {
		t.Errorf("no pointer: err %v, want ErrNotFound", err)
	}
}
