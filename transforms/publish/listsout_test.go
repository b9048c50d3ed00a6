package publish

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/topk-dev/topk/schemas"
)

// TestEachTopList: in a --lists_out folder, EachTopList decodes the top
// list files and nothing else (trending lists, dead letters, a write's
// temporary file), and reports a list file that does not decode, with its
// path.
func TestEachTopList(t *testing.T) {
	dir := t.TempDir()
	write := func(rel string, data []byte) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	asOf := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	l := &schemas.List{Type: "video", Scope: "global", Window: schemas.Window1m, AsOf: asOf, Complete: true, CertifiedK: 1,
		Items: []schemas.Entry{{Rank: 1, Item: "v1", Count: 3, Lower: 3}}}
	b, err := schemas.MarshalList(l)
	if err != nil {
		t.Fatal(err)
	}
	write("video/global/1m/1796551200000.json", b)
	write("video/global/1m/.1796551210000.json.123", b)                           // a write in progress
	write("video/global/trending/1796551200000.json", []byte(`{"not":"a list"}`)) // another schema
	write("deadletter/dead-1.json", []byte(`{}`))
	var got []*schemas.List
	if err := EachTopList(dir, func(l *schemas.List) error { got = append(got, l); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Key() != l.Key() || !got[0].AsOf.Equal(asOf) || len(got[0].Items) != 1 || got[0].Items[0].Item != "v1" {
		t.Fatalf("read %d lists (%+v), want the one top list", len(got), got)
	}
	write("video/IN/5m/1796551200000.json", []byte(`{"type":`))
	err = EachTopList(dir, func(*schemas.List) error { return nil })
	if err == nil || !strings.Contains(err.Error(), filepath.Join("video", "IN", "5m")) {
		t.Fatalf("a truncated list file: error %v, want one naming its path", err)
	}
}
