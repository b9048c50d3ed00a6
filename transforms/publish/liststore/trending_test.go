package liststore

import (
	"context"
	"testing"

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
