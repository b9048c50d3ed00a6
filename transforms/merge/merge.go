// Package merge builds published lists: it merges the partitions' window
// summaries of a list (summary.MergeKeys: each item lives in one partition,
// so the global top K is inside the union of the partitions' top lists) and
// ranks the result into a schemas.List with its bounds, max_overcount and
// certified depth. The GroupByKey fires when the watermark passes the
// slide's end, after every partition's timer for that slide has fired, so a
// list never misses a partition.
package merge

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/summary"
)

// Config is the published depth of a list.
type Config struct {
	// K is the depth a list promises (complete means certified_k >= K).
	K int
	// Margin entries are published beyond K so that takedowns, filtered at
	// read time, leave a full K.
	Margin int
	// Rules is the version of the countable-event rules the counts were
	// made with (preagg.RulesVersion), carried by every list as "rules";
	// "" when no rules were applied.
	Rules string
}

// DefaultConfig publishes 1,000 entries plus a margin of 100.
func DefaultConfig() Config { return Config{K: 1000, Margin: 100} }

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.K < 1 || c.K > 100_000 || c.Margin < 0 || c.Margin > 100_000 {
		return fmt.Errorf("k %d / margin %d out of range", c.K, c.Margin)
	}
	return nil
}

// Window is what Lists needs of one sliding window.
type Window struct {
	Name     string // a schemas.Window, the slide.Window name
	MinCount uint64 // the window's minimum count in non-global lists
}

// Lists turns the sliding windows' results (slide.Windows: KV<"window\x00
// shard", summary set of list -> partition window summary>, timestamped at
// the slide's end - 1 ms) into published lists: a PCollection<KV<string,
// []byte>> of list key (schemas.ListKey.String()) and the list's JSON, one
// per list and slide. as_of is the slide's end and version its Unix second,
// so a replay republishes the same version.
func Lists(s beam.Scope, results beam.PCollection, bucket time.Duration, windows []Window, cfg Config) beam.PCollection {
	s = s.Scope("merge.Lists")
	if err := cfg.Validate(); err != nil {
		panic(fmt.Sprintf("merge: %v", err))
	}
	if bucket <= 0 {
		panic(fmt.Sprintf("merge: bucket %v", bucket))
	}
	fn := &buildListsFn{K: cfg.K, Margin: cfg.Margin, Rules: cfg.Rules}
	for _, w := range windows {
		if !schemas.Window(w.Name).Valid() {
			panic(fmt.Sprintf("merge: window %q", w.Name))
		}
		fn.Windows = append(fn.Windows, w.Name)
		fn.MinCounts = append(fn.MinCounts, w.MinCount)
	}
	w := beam.WindowInto(s, window.NewFixedWindows(bucket), results)
	return beam.ParDo(s, fn, beam.GroupByKey(s, w))
}

func init() {
	register.DoFn4x1[typex.Window, string, func(*[]byte) bool, func(string, []byte), error](&buildListsFn{})
	register.Iter1[[]byte]()
	register.Emitter2[string, []byte]()
}

// buildListsFn merges one (window, shard)'s partition sets into lists.
type buildListsFn struct {
	Windows   []string
	MinCounts []uint64
	K, Margin int
	Rules     string

	free []*summary.Union // reused across elements
}

func (fn *buildListsFn) ProcessElement(w typex.Window, key string, values func(*[]byte) bool, emit func(string, []byte)) error {
	iw, ok := w.(window.IntervalWindow)
	if !ok {
		return fmt.Errorf("merge: %q in a %T, want an interval window", key, w)
	}
	name, _, found := strings.Cut(key, "\x00")
	wi := slices.Index(fn.Windows, name)
	if !found || wi < 0 {
		return fmt.Errorf("merge: result key %q", key)
	}
	limit := fn.K + fn.Margin
	// One Union per list: the partitions' entries are decoded straight into
	// it and ranked once (no merged summary in key order in between).
	unions := map[string]*summary.Union{}
	defer func() {
		for _, u := range unions {
			u.Reset()
			fn.free = append(fn.free, u)
		}
	}()
	var b []byte
	for values(&b) {
		err := summary.EachInSet(b, func(list string, smb []byte) error {
			u := unions[list]
			if u == nil {
				if n := len(fn.free); n > 0 {
					u, fn.free = fn.free[n-1], fn.free[:n-1]
				} else {
					u = new(summary.Union)
				}
				unions[list] = u
			}
			return u.AddEncoded(smb)
		})
		if err != nil {
			return fmt.Errorf("merge %q: %w", key, err)
		}
	}
	asOf := iw.End.ToTime().UTC()
	var out []byte
	for _, list := range slices.Sorted(maps.Keys(unions)) {
		typ, scope, _ := strings.Cut(list, "\x00")
		minCount := fn.MinCounts[wi]
		if scope == schemas.ScopeGlobal {
			minCount = 0
		}
		// Each item lives in one partition: the union of the partitions'
		// entries, one selection of the first limit.
		u := unions[list]
		ans := u.Answer(limit)
		l := fromAnswer(ans, len(ans.Entries), u.Theta, u.Total, schemas.ListKey{Type: typ, Scope: scope, Window: schemas.Window(name)}, asOf, fn.K, minCount)
		l.Rules = fn.Rules
		var err error
		if out, err = AppendListJSON(out[:0], l); err != nil {
			return fmt.Errorf("merge %q: %w", list, err)
		}
		emit(l.Key().String(), slices.Clone(out))
	}
	return nil
}

// MergePartitions merges the values of one list and window, each a
// partition number (uvarint) followed by an encoded summary: summaries of
// the same partition with MergeEvents (they count disjoint events), then the
// partitions with MergeKeys, keeping limit entries. Nil when there are none.
func MergePartitions(values func(*[]byte) bool, limit int) (*summary.Summary, error) {
	parts := map[uint64]*summary.Merger{}
	var b []byte
	for values(&b) {
		part, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, fmt.Errorf("partition prefix: bad uvarint")
		}
		m := parts[part]
		if m == nil {
			m = new(summary.Merger)
			parts[part] = m
		}
		if err := m.AddEncoded(b[n:]); err != nil {
			return nil, err
		}
	}
	keys := make([]uint64, 0, len(parts))
	for p := range parts {
		keys = append(keys, p)
	}
	slices.Sort(keys) // a deterministic merge order
	var acc *summary.Summary
	for _, p := range keys {
		sm := parts[p].Result()
		// A list is answered from entries and Theta; partition sketches
		// would only be added up and dropped.
		sm.Sketch = nil
		if acc == nil {
			acc = sm
			continue
		}
		var err error
		if acc, err = summary.MergeKeys(acc, sm, limit); err != nil {
			return nil, err
		}
	}
	return acc, nil
}

// Build ranks a merged summary into a list of up to n entries (BuildMin
// without a minimum count).
func Build(sm *summary.Summary, key schemas.ListKey, asOf time.Time, k, n int) *schemas.List {
	return BuildMin(sm, key, asOf, k, n, 0)
}

// BuildMin ranks a merged summary into a list of up to n entries whose
// entries were cut at minCount (slide.Window.MinCount). It is complete when
// its first k are certified, or when every item that can reach the minimum
// (at least 1) is listed and certified: the list is shorter than k because
// fewer items qualify, and Theta, the bound of everything left out, is below
// the minimum.
func BuildMin(sm *summary.Summary, key schemas.ListKey, asOf time.Time, k, n int, minCount uint64) *schemas.List {
	return fromAnswer(sm.Answer(n), len(sm.Entries), sm.Theta, sm.Total, key, asOf, k, minCount)
}

// fromAnswer is BuildMin from the ranked answer of a summary of tracked
// entries, bound theta on the rest and total.
func fromAnswer(ans summary.Answer, tracked int, theta, total uint64, key schemas.ListKey, asOf time.Time, k int, minCount uint64) *schemas.List {
	l := &schemas.List{
		Type: key.Type, Scope: key.Scope, Window: key.Window,
		AsOf:         asOf,
		MaxOvercount: ans.MaxOvercount,
		CertifiedK:   ans.CertifiedK,
		Complete:     ans.CertifiedK >= k || (ans.CertifiedK == tracked && theta < max(minCount, 1)),
		Version:      asOf.Unix(),
		MinCount:     minCount,
		Total:        total,
		Items:        make([]schemas.Entry, len(ans.Entries)),
	}
	for i, e := range ans.Entries {
		l.Items[i] = schemas.Entry{Rank: i + 1, Item: e.Item, Count: e.Hi, Lower: e.Lo}
	}
	return l
}
