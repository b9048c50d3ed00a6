package merge

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/summary"
)

// The fields AppendListJSON writes; a field added to schemas.List or
// schemas.Entry must be added there too.
var (
	listFields  = []string{"Type", "Scope", "Window", "AsOf", "ExactUntil", "MaxOvercount", "Complete", "CertifiedK", "Version", "Stale", "Rules", "MinCount", "Total", "Items"}
	entryFields = []string{"Rank", "Item", "Count", "Lower", "Users"}
)

func fieldNames(v any) []string {
	var out []string
	t := reflect.TypeOf(v)
	for i := range t.NumField() {
		out = append(out, t.Field(i).Name)
	}
	return out
}

func TestAppendListJSONEqualsMarshal(t *testing.T) {
	if got := fieldNames(schemas.List{}); !slices.Equal(got, listFields) {
		t.Fatalf("schemas.List fields %v, AppendListJSON writes %v: update it", got, listFields)
	}
	if got := fieldNames(schemas.Entry{}); !slices.Equal(got, entryFields) {
		t.Fatalf("schemas.Entry fields %v, AppendListJSON writes %v: update it", got, entryFields)
	}
	odd := []string{"v_1", "#tag", "a b", `q"uote`, `back\slash`, "<b>&amp;", "tab\there", "nl\n", "\x00\x01\x1f", "\x7f", "é€😀", "\u2028\u2029", "bad\xff\xfeutf8", ""}
	rng := rand.New(rand.NewPCG(1, 2))
	asOf := time.Date(2026, 11, 30, 10, 42, 10, 0, time.UTC)
	for trial := range 300 {
		l := &schemas.List{
			Type: "video", Scope: "IN-MH", Window: schemas.Window5m,
			AsOf: asOf.Add(time.Duration(trial) * 10 * time.Second), MaxOvercount: rng.Uint64N(50),
			Complete: trial%2 == 0, CertifiedK: rng.IntN(1000), Version: asOf.Unix() + int64(trial), Stale: trial%3 == 0,
		}
		if trial%4 == 1 {
			eu := asOf.Add(-time.Hour).In(time.FixedZone("x", 3600)).Add(123 * time.Nanosecond)
			l.ExactUntil = &eu
		}
		if trial%5 != 0 {
			l.Rules = "r" + odd[trial%len(odd)]
			l.MinCount = rng.Uint64N(3)
			l.Total = rng.Uint64N(1e9)
		}
		if trial%7 != 3 {
			l.Items = make([]schemas.Entry, rng.IntN(20))
		}
		for i := range l.Items {
			l.Items[i] = schemas.Entry{Rank: i + 1, Item: odd[rng.IntN(len(odd))] + fmt.Sprint(i), Count: rng.Uint64(), Lower: rng.Uint64N(100), Users: rng.Uint64N(2) * rng.Uint64()}
		}
		want, err := schemas.MarshalList(l)
		if err != nil {
			t.Fatal(err)
		}
		got, err := AppendListJSON([]byte("prefix"), l)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[len("prefix"):], want) {
			t.Fatalf("trial %d:\n got %s\nwant %s", trial, got[len("prefix"):], want)
		}
	}
}

// refLists is buildListsFn as it was before Union and AppendListJSON:
// decode every partition's summary, UnionKeys, BuildMin, MarshalList.
func refLists(t *testing.T, fn *buildListsFn, name string, asOf time.Time, sets [][]byte) map[string][]byte {
	t.Helper()
	parts := map[string][]*summary.Summary{}
	for _, b := range sets {
		err := summary.EachInSet(b, func(list string, smb []byte) error {
			sm, err := summary.Unmarshal(smb)
			parts[list] = append(parts[list], sm)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	limit := fn.K + fn.Margin
	wi := slices.Index(fn.Windows, name)
	out := map[string][]byte{}
	for list, ps := range parts {
		typ, scope, _ := strings.Cut(list, "\x00")
		minCount := fn.MinCounts[wi]
		if scope == schemas.ScopeGlobal {
			minCount = 0
		}
		l := BuildMin(summary.UnionKeys(ps, limit), schemas.ListKey{Type: typ, Scope: scope, Window: schemas.Window(name)}, asOf, fn.K, limit, minCount)
		l.Rules = fn.Rules
		b, err := schemas.MarshalList(l)
		if err != nil {
			t.Fatal(err)
		}
		out[l.Key().String()] = b
	}
	return out
}

// buildListsFn publishes, list by list, the bytes the decode, UnionKeys,
// BuildMin and MarshalList path published, over partitions with many tied
// counts at the cut, global and scoped lists, minimum counts, a partition's
// set delivered twice, repeatedly with the same DoFn (its Unions are
// reused).
func TestBuildListsEqualsUnionKeysPath(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	fn := &buildListsFn{Windows: []string{"1m", "5m"}, MinCounts: []uint64{3, 5}, K: 40, Margin: 5, Rules: "v1"}
	end := mtime.FromTime(time.Date(2026, 11, 30, 10, 42, 10, 0, time.UTC))
	w := window.IntervalWindow{Start: end - 10000, End: end}
	for trial := range 30 {
		name := fn.Windows[trial%2]
		var sets [][]byte
		for p := range 1 + rng.IntN(8) {
			var keys []string
			var sums []*summary.Summary
			for _, list := range []string{"video\x00global", "video\x00IN", "hashtag\x00IN-MH"} {
				if rng.IntN(4) == 0 {
					continue
				}
				c := summary.NewCounter(0)
				for i := range rng.IntN(120) {
					item := fmt.Sprintf("p%d-%d", p, i)
					c.Add(item, summary.Hash(item), 1+rng.Uint64N(6))
				}
				keys = append(keys, list)
				sums = append(sums, c.Summary(summary.Config{N: 30 + rng.IntN(60)}))
			}
			b, err := summary.AppendSet(nil, keys, sums)
			if err != nil {
				t.Fatal(err)
			}
			sets = append(sets, b)
		}
		if trial%3 == 0 {
			sets = append(sets, sets[0]) // a partition's result delivered twice
		}
		want := refLists(t, fn, name, w.End.ToTime().UTC(), sets)
		got := map[string][]byte{}
		var order []string
		err := fn.ProcessElement(w, name+"\x001", iter(sets), func(k string, b []byte) {
			got[k] = b
			order = append(order, k)
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) || !slices.IsSorted(order) {
			t.Fatalf("trial %d: lists %v, want %d", trial, order, len(want))
		}
		for k, b := range want {
			if !bytes.Equal(got[k], b) {
				t.Fatalf("trial %d list %s:\n got %s\nwant %s", trial, k, got[k], b)
			}
		}
	}
}
