// Package merge builds published lists: it merges one window's partition
// summaries of a list (summary.MergeKeys: each item lives in one partition,
// so the global top K is inside the union of the partitions' top lists) and
// ranks the result into a schemas.List with its bounds, max_overcount and
// certified depth. The GroupByKey fires when the watermark passes the
// window's end, so a list never misses a partition.
package merge

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/preagg"
	"github.com/topk-dev/topk/transforms/summary"
)

// Config is the published depth of a list.
type Config struct {
	// K is the depth a list promises (complete means certified_k >= K).
	K int
	// Margin entries are published beyond K so that takedowns, filtered at
	// read time, leave a full K.
	Margin int
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

// Lists turns windowed partition summaries (KV<"type\x00scope\x00part",
// []byte>) into published lists of window w: a PCollection<KV<string,
// []byte>> of list key (schemas.ListKey.String()) and the list's JSON, one per
// list and window pane. as_of is the window's end and version its Unix second,
// so a replay republishes the same version.
func Lists(s beam.Scope, windowed beam.PCollection, w schemas.Window, cfg Config) beam.PCollection {
	s = s.Scope("merge.Lists")
	if err := cfg.Validate(); err != nil {
		panic(fmt.Sprintf("merge: %v", err))
	}
	if !w.Valid() {
		panic(fmt.Sprintf("merge: window %q", w))
	}
	byList := beam.ParDo(s, dropPartitionFn, windowed)
	return beam.ParDo(s, &buildListFn{Window: string(w), K: cfg.K, Margin: cfg.Margin}, beam.GroupByKey(s, byList))
}

func init() {
	register.Function3x1[string, []byte, func(string, []byte), error](dropPartitionFn)
	register.DoFn4x1[typex.Window, string, func(*[]byte) bool, func(string, []byte), error](&buildListFn{})
	register.Iter1[[]byte]()
	register.Emitter2[string, []byte]()
}

// dropPartitionFn re-keys a partition summary by its list, "type\x00scope",
// and prefixes the value with its partition (a uvarint) so that the list
// step can tell two outputs of one partition (disjoint events: a late pane)
// from two partitions (disjoint keys).
func dropPartitionFn(key string, sm []byte, emit func(string, []byte)) error {
	typ, scope, part, err := preagg.SplitKey(key)
	if err != nil {
		return err
	}
	v := binary.AppendUvarint(make([]byte, 0, len(sm)+3), uint64(part))
	emit(typ+"\x00"+scope, append(v, sm...))
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

type buildListFn struct {
	Window    string
	K, Margin int
}

func (fn *buildListFn) ProcessElement(w typex.Window, key string, values func(*[]byte) bool, emit func(string, []byte)) error {
	iw, ok := w.(window.IntervalWindow)
	if !ok {
		return fmt.Errorf("merge: list %q in a %T, want an interval window", key, w)
	}
	typ, scope, found := cut(key)
	if !found {
		return fmt.Errorf("merge: list key %q", key)
	}
	limit := fn.K + fn.Margin
	acc, err := MergePartitions(values, limit)
	if err != nil {
		return fmt.Errorf("merge %q: %w", key, err)
	}
	if acc == nil {
		return nil
	}
	asOf := iw.End.ToTime().UTC()
	l := Build(acc, schemas.ListKey{Type: typ, Scope: scope, Window: schemas.Window(fn.Window)}, asOf, fn.K, limit)
	out, err := schemas.MarshalList(l)
	if err != nil {
		return fmt.Errorf("merge %q: %w", key, err)
	}
	emit(l.Key().String(), out)
	return nil
}

// Build ranks a merged summary into a list of up to n entries. It is
// complete when its first k are certified, or when every item of the window
// is listed and certified (fewer than k exist: Theta is 0 and nothing was
// dropped).
func Build(sm *summary.Summary, key schemas.ListKey, asOf time.Time, k, n int) *schemas.List {
	ans := sm.Answer(n)
	l := &schemas.List{
		Type: key.Type, Scope: key.Scope, Window: key.Window,
		AsOf:         asOf,
		MaxOvercount: ans.MaxOvercount,
		CertifiedK:   ans.CertifiedK,
		Complete:     ans.CertifiedK >= k || (ans.CertifiedK == len(sm.Entries) && sm.Theta == 0),
		Version:      asOf.Unix(),
		Total:        sm.Total,
		Items:        make([]schemas.Entry, len(ans.Entries)),
	}
	for i, e := range ans.Entries {
		l.Items[i] = schemas.Entry{Rank: i + 1, Item: e.Item, Count: e.Hi, Lower: e.Lo}
	}
	return l
}

func cut(key string) (typ, scope string, ok bool) {
	for i := 0; i < len(key); i++ {
		if key[i] == 0 {
			return key[:i], key[i+1:], true
		}
	}
	return "", "", false
}
