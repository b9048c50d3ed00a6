// Package stitch builds the long-window lists (24h and all) of the streaming
// job: exact closed hours from the exact tables (transforms/exact/store) plus
// the open hours' minute summaries of the fast path.
//
// # Definition
//
// Let E be exact_until (every hour before E is recounted) and T the list's
// as_of, a minute boundary. The 24h list covers [E-24h, T): the store's 24
// recounted hours before E (its 24-hour totals, whose window end must equal
// E; when the store's 24h window ends elsewhere, the list is not published and
// the counter stitch_skipped moves) plus the open part [E, T), counted by the
// streaming job's own minute summaries. The tail drops an hour at a time
// (when E moves); the head is minute-fresh, so the window spans 24 to 25
// hours. The "all" list is the all-time exact totals (every hour before E)
// plus the same open part. max_overcount is the open part's bound (the
// largest count - lower of a listed entry), and exact_until = E.
//
// # Scoring
//
// For each list, the candidates are the store's exact top 3K of the window
// (with their exact base) and the items the open part tracks; an open item
// that is not a candidate has its base point-read (store.Totals). An item's
// count = base + (its open hi if the open part tracks it, else the open
// part's Theta), lower = base + (its open lo, or 0). An item that is neither
// a candidate nor tracked has base <= the smallest candidate base and an open
// count <= Theta, which bounds everything outside the list for certified_k
// (the rule of summary.Answer).
//
// # Steps
//
// OpenParts keeps, per (list, partition) in MapState, the summaries of the
// open hours: each minute summary goes to a "minutes" entry (one read and one
// write per minute and key); an event-time timer at the minute's end folds the
// minutes before it into their hour entry, deletes hours before E (so the
// state holds a few hours), and emits the open hours, each hour's summary
// separately, timestamped at the minute's end - 1 ms. The timer re-arms for
// the next minute while open hours remain (bounded by Config.IdleLimit after
// the last hour with data), so a partition without new data still reports
// its open hours every minute. Lists groups a minute's open parts per list,
// drops the hours before the E it reads from the store (the store may have
// moved since OpenParts read it) and stitches.
package stitch

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/exact/store"
	"github.com/topk-dev/topk/transforms/merge"
	"github.com/topk-dev/topk/transforms/summary"
)

// StoreConfig names the Bigtable instance of the exact tables.
type StoreConfig struct {
	Project, Instance string
	// EmulatorAddr, when set, connects to an emulator (bttest) without
	// credentials; otherwise BIGTABLE_EMULATOR_HOST or real credentials.
	EmulatorAddr string
}

// Validate reports a configuration that cannot work.
func (c StoreConfig) Validate() error {
	if c.Project == "" || c.Instance == "" {
		return errors.New("exact store: project and instance are required")
	}
	return nil
}

// Open connects to the store.
func (c StoreConfig) Open(ctx context.Context) (*store.Store, error) {
	if c.EmulatorAddr != "" {
		return store.Open(ctx, c.Project, c.Instance, store.EmulatorOptions(c.EmulatorAddr)...)
	}
	return store.Open(ctx, c.Project, c.Instance)
}

// Config configures the long windows.
type Config struct {
	Store StoreConfig
	// K and Margin as in merge.Config.
	K, Margin int
	// IdleLimit is how long after the end of a key's last hour with data its
	// timer keeps re-arming every minute (0: 26h).
	IdleLimit time.Duration
	// ExactUntilTTL is how long OpenParts reuses an exact_until it read (wall
	// clock); 0 reads it at every timer.
	ExactUntilTTL time.Duration
}

// DefaultConfig is merge's depth, 26 h of idle re-arming, exact_until cached
// 10 s.
func DefaultConfig() Config {
	m := merge.DefaultConfig()
	return Config{K: m.K, Margin: m.Margin, IdleLimit: 26 * time.Hour, ExactUntilTTL: 10 * time.Second}
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if err := c.Store.Validate(); err != nil {
		return err
	}
	if err := (merge.Config{K: c.K, Margin: c.Margin}).Validate(); err != nil {
		return err
	}
	if c.IdleLimit < 0 || c.ExactUntilTTL < 0 {
		return errors.New("negative idle limit or exact_until ttl")
	}
	return nil
}

// ---- open hours ----

// Hour is one open hour's summary of one (list, partition).
type Hour struct {
	Start   time.Time
	Summary []byte // encoded summary.Summary
}

// EncodeHours encodes hours (sorted by start) as the open part's value:
// uvarint count, then per hour varint start (Unix ms), uvarint length, bytes.
func EncodeHours(hours []Hour) []byte {
	b := binary.AppendUvarint(nil, uint64(len(hours)))
	for _, h := range hours {
		b = binary.AppendVarint(b, h.Start.UnixMilli())
		b = binary.AppendUvarint(b, uint64(len(h.Summary)))
		b = append(b, h.Summary...)
	}
	return b
}

// DecodeHours decodes EncodeHours.
func DecodeHours(b []byte) ([]Hour, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, errors.New("stitch: bad open part")
	}
	b = b[k:]
	out := make([]Hour, 0, n)
	for range n {
		ms, k := binary.Varint(b)
		if k <= 0 {
			return nil, errors.New("stitch: bad open hour start")
		}
		b = b[k:]
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return nil, errors.New("stitch: bad open hour length")
		}
		b = b[k:]
		out = append(out, Hour{Start: time.UnixMilli(ms).UTC(), Summary: b[:l:l]})
		b = b[l:]
	}
	if len(b) != 0 {
		return nil, errors.New("stitch: trailing bytes in open part")
	}
	return out, nil
}

// Fold is what a timer at minute end t does to one key's state, as a pure
// function: minutes (start Unix ms -> summary) before t are merged into their
// hours (start Unix ms -> summary); hours before e are dropped. It returns the
// new hour entries to write (changed), the hour keys to delete, the minute
// keys folded (to delete) and the open hours before t, sorted.
func Fold(hours, minutes map[int64][]byte, t, e time.Time) (changed map[int64][]byte, delHours, delMinutes []int64, open []Hour, err error) {
	tm, em := t.UnixMilli(), e.UnixMilli()
	cur := make(map[int64][]byte, len(hours))
	for h, v := range hours {
		cur[h] = v
	}
	changed = map[int64][]byte{}
	mins := make([]int64, 0, len(minutes))
	for m := range minutes {
		if m < tm {
			mins = append(mins, m)
		}
	}
	slices.Sort(mins)
	for _, m := range mins {
		delMinutes = append(delMinutes, m)
		h := floor(m, time.Hour.Milliseconds())
		if h < em {
			continue // already exact
		}
		var mg summary.Merger
		if old, ok := cur[h]; ok {
			if err := mg.AddEncoded(old); err != nil {
				return nil, nil, nil, nil, fmt.Errorf("hour %d: %w", h, err)
			}
		}
		if err := mg.AddEncoded(minutes[m]); err != nil {
			return nil, nil, nil, nil, fmt.Errorf("minute %d: %w", m, err)
		}
		b, err := mg.Result().MarshalBinary()
		if err != nil {
			return nil, nil, nil, nil, err
		}
		cur[h] = b
		changed[h] = b
	}
	keys := make([]int64, 0, len(cur))
	for h := range cur {
		keys = append(keys, h)
	}
	slices.Sort(keys)
	for _, h := range keys {
		if h < em {
			if _, ok := hours[h]; ok {
				delHours = append(delHours, h)
			}
			delete(changed, h)
			continue
		}
		if h < tm {
			open = append(open, Hour{Start: time.UnixMilli(h).UTC(), Summary: cur[h]})
		}
	}
	return changed, delHours, delMinutes, open, nil
}

func floor(ms, d int64) int64 {
	r := ms % d
	if r < 0 {
		r += d
	}
	return ms - r
}

// ---- stitching ----

// Part is one partition's open hours in a list's minute.
type Part struct {
	Partition int
	Hours     []Hour
}

// Exact is the exact side of one long window of one list.
type Exact struct {
	Until      time.Time // E
	Candidates []schemas.ExactCount
	// All: the candidates are every item with a base (an item outside them
	// has base 0, not up to the smallest candidate's).
	All bool
	// Totals point-reads the bases of items that are not candidates.
	Totals func(items []string) (map[string]int64, error)
}

// OpenSummary merges the parts' hours at or after e (each partition's hours
// with MergeEvents, then the partitions with MergeKeys, keeping all
// entries); nil when no hour remains.
func OpenSummary(parts []Part, e time.Time) (*summary.Summary, error) {
	var vals [][]byte
	for _, p := range parts {
		for _, h := range p.Hours {
			if h.Start.Before(e) {
				continue
			}
			v := binary.AppendUvarint(make([]byte, 0, len(h.Summary)+3), uint64(p.Partition))
			vals = append(vals, append(v, h.Summary...))
		}
	}
	i := 0
	return merge.MergePartitions(func(b *[]byte) bool {
		if i >= len(vals) {
			return false
		}
		*b = vals[i]
		i++
		return true
	}, 0)
}

// Stitch scores a list from its exact side and its open summary (nil: an
// empty open part) and ranks it: the first k+margin entries, certified_k,
// max_overcount, as_of = asOf, version = its Unix second, exact_until.
func Stitch(key schemas.ListKey, asOf time.Time, ex Exact, open *summary.Summary, k, margin int) (*schemas.List, error) {
	if open == nil {
		open = &summary.Summary{}
	}
	base := make(map[string]int64, len(ex.Candidates)+len(open.Entries))
	var minCand int64
	for i, c := range ex.Candidates {
		base[c.Item] = c.Count
		if i == 0 || c.Count < minCand {
			minCand = c.Count
		}
	}
	var missing []string
	for _, e := range open.Entries {
		if _, ok := base[e.Item]; !ok {
			missing = append(missing, e.Item)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		tot, err := ex.Totals(missing)
		if err != nil {
			return nil, err
		}
		for _, it := range missing {
			base[it] = tot[it] // 0 when absent
		}
	}
	type scored struct {
		item      string
		hi, lo    uint64
		count, lw uint64
	}
	ranked := make([]scored, 0, len(base))
	tracked := make(map[string]*summary.Entry, len(open.Entries))
	for i := range open.Entries {
		tracked[open.Entries[i].Item] = &open.Entries[i]
	}
	for it, b := range base {
		s := scored{item: it, count: uint64(b), lw: uint64(b)}
		if e := tracked[it]; e != nil {
			s.count += e.Hi
			s.lw += e.Lo
		} else {
			s.count += open.Bound(summary.Hash(it))
		}
		if s.count == 0 {
			continue
		}
		ranked = append(ranked, s)
	}
	sort.Slice(ranked, func(i, j int) bool {
		if ranked[i].count != ranked[j].count {
			return ranked[i].count > ranked[j].count
		}
		return ranked[i].item < ranked[j].item
	})
	n := min(k+margin, len(ranked))
	outsideAll := uint64(minCand) + open.Theta
	if ex.All {
		outsideAll = open.Theta
	}
	until := ex.Until.UTC()
	l := &schemas.List{
		Type: key.Type, Scope: key.Scope, Window: key.Window,
		AsOf: asOf.UTC(), ExactUntil: &until, Version: asOf.Unix(),
		Items: make([]schemas.Entry, n),
	}
	minLo := ^uint64(0)
	for i := 0; i < n; i++ {
		s := ranked[i]
		l.Items[i] = schemas.Entry{Rank: i + 1, Item: s.item, Count: s.count, Lower: s.lw}
		l.MaxOvercount = max(l.MaxOvercount, s.count-s.lw)
		minLo = min(minLo, s.lw)
		outside := outsideAll
		if i+1 < len(ranked) {
			outside = max(outside, ranked[i+1].count)
		}
		if minLo >= outside {
			l.CertifiedK = i + 1
		}
	}
	l.Complete = l.CertifiedK >= k || (l.CertifiedK == len(ranked) && outsideAll == 0)
	return l, nil
}
