package api

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/topk-dev/topk/schemas"
)

// expectedAfterRemovals computes the response for k from the published list
// and the removed items: entries not removed, first k, ranks renumbered,
// certified_k = min(k, certified entries left).
func expectedAfterRemovals(t *testing.T, l *schemas.List, removed map[string]bool, k int) []byte {
	t.Helper()
	out := *l
	out.Items = nil
	cert := 0
	for i, e := range l.Items {
		if removed[e.Item] {
			continue
		}
		if i < l.CertifiedK {
			cert++
		}
		if len(out.Items) < k {
			e.Rank = len(out.Items) + 1
			out.Items = append(out.Items, e)
		}
	}
	out.CertifiedK = min(k, cert)
	out.Complete = l.Complete && out.CertifiedK == len(out.Items)
	b, err := json.Marshal(&out)
	if err != nil {
		t.Fatal(err)
	}
	return withApproximate(b, true)
}

// Property: a takedown removes the item from every window and every k in the
// next response (this server at once, a replica within a second), k=1000
// stays full thanks to the lists' margin, other types keep their item of the
// same name, and a restore brings it back.
func TestTakedown(t *testing.T) {
	e := newEnv(t, nil)
	lists := map[schemas.Window]*schemas.List{}
	for i, w := range schemas.Windows {
		l := mkList(key("video", "global", w), 10, 1100, uint64(i))
		lists[w] = l
		e.publish(t, l)
	}
	other := mkList(key("hashtag", "global", schemas.Window1h), 10, 1100, 99)
	e.publish(t, other)
	e.start(t)
	replica := newEnv(t, func(c *Config) { c.Redis = e.rc; c.KeyPrefix = e.cfg.KeyPrefix; c.PollInterval = time.Hour }).start(t)
	ks := []int{1, 2, 3, 10, 100, 999, 1000}
	// Warm the render cache: it must not outlive the removal.
	for _, w := range schemas.Windows {
		for _, k := range ks {
			e.do(t, "GET", topPath(key("video", "global", w), k), nil, "")
		}
	}
	admin := map[string]string{"Authorization": "Bearer " + testToken, "Content-Type": "application/json"}
	for _, item := range []string{"v_2", "v_500"} {
		resp, b := e.do(t, "POST", "/v1/admin/removals", admin, `{"type":"video","item":"`+item+`","reason":"takedown request 42"}`)
		if resp.StatusCode != 201 {
			t.Fatalf("remove %s: %d %s", item, resp.StatusCode, b)
		}
	}
	removed := map[string]bool{"v_2": true, "v_500": true}
	check := func(env *testEnv, removed map[string]bool) {
		t.Helper()
		for _, w := range schemas.Windows {
			for _, k := range ks {
				resp, b := env.do(t, "GET", topPath(key("video", "global", w), k), nil, "")
				if resp.StatusCode != 200 {
					t.Fatalf("%s k=%d: %d %s", w, k, resp.StatusCode, b)
				}
				l := decodeList(t, b)
				if len(l.Items) != k {
					t.Fatalf("%s k=%d: %d items, want a full list", w, k, len(l.Items))
				}
				for i, it := range l.Items {
					if removed[it.Item] {
						t.Fatalf("%s k=%d: removed item %s at rank %d", w, k, it.Item, it.Rank)
					}
					if it.Rank != i+1 {
						t.Fatalf("%s k=%d: rank %d at %d", w, k, it.Rank, i)
					}
				}
				if err := l.Check(); err != nil {
					t.Fatalf("%s k=%d: response breaks list invariants: %v", w, k, err)
				}
				if want := expectedAfterRemovals(t, lists[w], removed, k); !bytes.Equal(b, want) {
					t.Fatalf("%s k=%d: body\n got %.400s\nwant %.400s", w, k, b, want)
				}
			}
		}
	}
	check(e, removed)
	eventually(t, 2*time.Second, "replica drops the removed items", func() bool {
		_, b := replica.do(t, "GET", topPath(key("video", "global", schemas.Window1h), 1000), nil, "")
		return !bytes.Contains(b, []byte(`"v_2"`)) && !bytes.Contains(b, []byte(`"v_500"`))
	})
	check(replica, removed)
	// Another type's item of the same name stays.
	_, b := e.do(t, "GET", topPath(key("hashtag", "global", schemas.Window1h), 10), nil, "")
	if !bytes.Contains(b, []byte(`"item":"v_2"`)) {
		t.Fatalf("hashtag v_2 removed by a video takedown: %s", b)
	}
	resp, b := e.do(t, "GET", "/v1/admin/removals", admin, "")
	var got struct {
		Removals []struct{ Type, Item, Reason string }
	}
	json.Unmarshal(b, &got)
	if resp.StatusCode != 200 || len(got.Removals) != 2 || got.Removals[0].Item != "v_2" || got.Removals[0].Reason != "takedown request 42" {
		t.Fatalf("GET removals: %d %s", resp.StatusCode, b)
	}
	if resp, b := e.do(t, "DELETE", "/v1/admin/removals?type=video&item=v_2", admin, ""); resp.StatusCode != 200 {
		t.Fatalf("restore: %d %s", resp.StatusCode, b)
	}
	check(e, map[string]bool{"v_500": true})
	_, b = e.do(t, "GET", topPath(key("video", "global", schemas.Window1m), 3), nil, "")
	if l := decodeList(t, b); l.Items[2].Item != "v_2" || l.Items[2].Rank != 3 {
		t.Fatalf("restored item not back at rank 3: %+v", l.Items)
	}
}
