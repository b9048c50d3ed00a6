// Package liststore keeps topk's published lists in Redis: every version of a
// list is an immutable blob and one pointer names the current version, moved
// by a single Lua script so that a reader never sees half a list. The
// streaming pipeline's publish step writes through it; the serving binary
// reads through it. It imports go-redis and schemas only (no Beam).
//
// # Redis layout
//
// With the default key prefix "topk" (Options.Prefix):
//
//	topk:{type}:{scope}:{window}:v{n}  string  schemas.MarshalList JSON of version n
//	topk:{type}:{scope}:{window}:cur   string  n, in decimal: the current version
//	topk:{type}:{scope}:{window}:prev  string  the version current before it
//	topk:removed                       hash    "{type}\x00{item}" -> Removal JSON
//	topk:removed:filled                string  set when the hash was filled from the durable deny set
//	channel topk:lists                 pub/sub "{type}:{scope}:{window}" (ListKey.String) per pointer move
//	channel topk:removals              pub/sub RemovalEvent JSON per deny-set change
//
// The braces above are placeholders, not Redis Cluster hash tags: the publish
// script touches the old blob, whose name it only learns from the pointer, so
// the layout assumes a single Redis (or a replica set), not a cluster.
//
// # Publishing
//
// Publish runs one script: if the pointer already names version n or a later
// one, nothing changes (a replayed bundle is idempotent and a publish never
// moves a list backwards); otherwise it writes the blob of version n, records
// the version that was current in the `prev` pointer, gives the blob that
// was previous before an expiry of Options.OldVersionTTL (so that a reader
// that read a pointer just before the move still finds it, and an operator
// can roll back to it meanwhile), moves the pointer and publishes the list
// key on Options.Channel. The current and previous blobs never expire: the
// previous one is what a reader derives rank changes from, across restarts.
// Only Rollback (history.go) moves a pointer backwards, and the next publish
// moves it forward again.
// The pipeline sets Version to as_of in Unix seconds, which makes versions
// deterministic across replays and monotone in event time.
//
// # Reading
//
// Current reads the pointer and the blob it names in one script (one round
// trip, one atomic step). Subscribe reports pointer moves; Keys lists every
// list that has a pointer. Readers that miss a message (a reconnect) should
// poll Pointers as a fallback.
//
// # Removals
//
// The deny set holds items taken down (AddRemoval, DeleteRemoval, Removals).
// Lists are not rewritten: readers filter removed items out, which is why the
// pipeline publishes a margin of entries beyond K.
//
// Where the deny set is kept durably (serving keeps it in Bigtable), the
// hash is a cache of it: FillRemovals adds the durable set to the hash and
// sets the marker key topk:removed:filled in one MULTI/EXEC; a Redis that
// lost its data (restarted empty, flushed) has no marker, which
// RemovalsState reports, and the reader refills it before trusting the
// hash again.
package liststore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/topk-dev/topk/schemas"
)

// Defaults for Options' zero values.
const (
	DefaultPrefix        = "topk"
	DefaultOldVersionTTL = 2 * time.Minute
	// MaxReasonLen bounds the bytes of a removal's reason.
	MaxReasonLen = 1024
)

// ErrNotFound is returned by Current when the list has no version yet.
var ErrNotFound = errors.New("list not found")

// ErrBadRemoval wraps every validation error of a removal's type, item or
// reason.
var ErrBadRemoval = errors.New("bad removal")

// Options configures a Store. The zero value is the production layout.
type Options struct {
	// Prefix starts every key and channel name. Zero: "topk". Tests use a
	// unique prefix so that they can share a Redis.
	Prefix string
	// OldVersionTTL is the expiry given to the previous current blob when the
	// pointer moves. Zero: 2 minutes.
	OldVersionTTL time.Duration
	// Channel carries a ListKey.String() per pointer move. Zero: Prefix +
	// ":lists" ("topk:lists").
	Channel string
	// RemovalsChannel carries a RemovalEvent JSON per deny-set change. Zero:
	// Prefix + ":removals" ("topk:removals").
	RemovalsChannel string
	// Now stamps removals. Zero: time.Now.
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.OldVersionTTL <= 0 {
		o.OldVersionTTL = DefaultOldVersionTTL
	}
	if o.Channel == "" {
		o.Channel = o.Prefix + ":lists"
	}
	if o.RemovalsChannel == "" {
		o.RemovalsChannel = o.Prefix + ":removals"
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Store reads and writes lists and removals in one Redis. It is safe for
// concurrent use.
type Store struct {
	c    redis.UniversalClient
	opts Options
}

// New returns a Store on c. Options' zero fields take their defaults.
func New(c redis.UniversalClient, opts Options) *Store {
	return &Store{c: c, opts: opts.withDefaults()}
}

// Options returns the options in effect (defaults filled in).
func (st *Store) Options() Options { return st.opts }

// Client returns the Redis client the store uses.
func (st *Store) Client() redis.UniversalClient { return st.c }

// base is "{prefix}:{type}:{scope}:{window}:".
func (st *Store) base(k schemas.ListKey) string {
	return st.opts.Prefix + ":" + k.Type + ":" + k.Scope + ":" + string(k.Window) + ":"
}

// PointerKey is the Redis key of k's pointer.
func (st *Store) PointerKey(k schemas.ListKey) string { return st.base(k) + "cur" }

// BlobKey is the Redis key of version n of k.
func (st *Store) BlobKey(k schemas.ListKey, n int64) string {
	return st.base(k) + "v" + strconv.FormatInt(n, 10)
}

// RemovalsKey is the Redis hash holding the deny set.
func (st *Store) RemovalsKey() string { return st.opts.Prefix + ":removed" }

// RemovalsFilledKey marks the deny set hash as filled from the durable set.
func (st *Store) RemovalsFilledKey() string { return st.opts.Prefix + ":removed:filled" }

// publishScript moves the pointer. KEYS[1] pointer, KEYS[2] new blob,
// KEYS[3] previous-version pointer; ARGV[1] n, ARGV[2] blob, ARGV[3]
// old-version TTL (ms), ARGV[4] blob key base (without the version number),
// ARGV[5] channel, ARGV[6] message. Returns 1 when the pointer moved, 0 when
// it already named n or later. The version that was current becomes the
// previous one (kept, for `change` and rollback: history.go); the one that
// was previous gets the old-version TTL.
//
// Versions are compared as decimal strings (length, then bytes), not as Lua
// numbers, which are doubles.
var publishScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
local n = ARGV[1]
if cur and (#cur > #n or (#cur == #n and cur >= n)) then
  return 0
end
redis.call('SET', KEYS[2], ARGV[2])
if cur then
  local prev = redis.call('GET', KEYS[3])
  if prev and prev ~= cur and prev ~= n then
    redis.call('PEXPIRE', ARGV[4] .. prev, ARGV[3])
  end
  redis.call('SET', KEYS[3], cur)
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('PUBLISH', ARGV[5], ARGV[6])
return 1
`)

// currentScript reads the pointer and its blob, or the blob's first
// ARGV[2] bytes (GETRANGE) when ARGV[2] is not 0. KEYS[1] pointer;
// ARGV[1] blob key base. Returns nil without a pointer, else {n, blob or
// false}.
var currentScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if not cur then
  return nil
end
local key = ARGV[1] .. cur
if ARGV[2] == '0' then
  return {cur, redis.call('GET', key)}
end
if redis.call('EXISTS', key) == 0 then
  return {cur, false}
end
return {cur, redis.call('GETRANGE', key, 0, tonumber(ARGV[2]) - 1)}
`)

// Publish writes l as a new version and moves its pointer, atomically (see
// the package doc). moved is false when the pointer already named
// l.Version or a later version: a replay, or a late duplicate.
func (st *Store) Publish(ctx context.Context, l *schemas.List) (moved bool, err error) {
	if l.Version <= 0 {
		return false, fmt.Errorf("publish %s: version %d must be > 0", l.Key(), l.Version)
	}
	if err := l.Check(); err != nil {
		return false, fmt.Errorf("publish %s: %w", l.Key(), err)
	}
	blob, err := schemas.MarshalList(l)
	if err != nil {
		return false, fmt.Errorf("publish %s: marshal: %w", l.Key(), err)
	}
	return st.PublishRaw(ctx, l.Key(), l.Version, blob)
}

// PublishRaw is Publish for a blob already encoded with schemas.MarshalList
// (the caller vouches that it decodes to a checked list of key k and version
// n). It exists so that a publisher that keeps encoded lists does not encode
// twice.
func (st *Store) PublishRaw(ctx context.Context, k schemas.ListKey, n int64, blob []byte) (moved bool, err error) {
	if n <= 0 {
		return false, fmt.Errorf("publish %s: version %d must be > 0", k, n)
	}
	if err := k.Validate(); err != nil {
		return false, fmt.Errorf("publish: %w", err)
	}
	keys := []string{st.PointerKey(k), st.BlobKey(k, n), st.PrevKey(k)}
	res, err := publishScript.Run(ctx, st.c, keys,
		strconv.FormatInt(n, 10), blob, st.opts.OldVersionTTL.Milliseconds(), st.base(k)+"v", st.opts.Channel, k.String()).Int64()
	if err != nil {
		return false, fmt.Errorf("publish %s v%d: %w", k, n, err)
	}
	return res == 1, nil
}

// Current returns the current blob of k and its version, read atomically, or
// ErrNotFound when k has no version yet.
func (st *Store) Current(ctx context.Context, k schemas.ListKey) (raw []byte, version int64, err error) {
	blob, version, err := st.current(ctx, k, 0)
	if err != nil {
		return nil, 0, err
	}
	return []byte(blob), version, nil
}

// current is Current reading at most max bytes of the blob (0: all).
func (st *Store) current(ctx context.Context, k schemas.ListKey, max int) (blob string, version int64, err error) {
	if err := k.Validate(); err != nil {
		return "", 0, fmt.Errorf("current: %w", err)
	}
	res, err := currentScript.Run(ctx, st.c, []string{st.PointerKey(k)}, st.base(k)+"v", max).Slice()
	if errors.Is(err, redis.Nil) {
		return "", 0, fmt.Errorf("current %s: %w", k, ErrNotFound)
	}
	if err != nil {
		return "", 0, fmt.Errorf("current %s: %w", k, err)
	}
	if len(res) != 2 {
		return "", 0, fmt.Errorf("current %s: script returned %d values", k, len(res))
	}
	ns, _ := res[0].(string)
	version, err = strconv.ParseInt(ns, 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("current %s: pointer %q: %w", k, ns, err)
	}
	blob, ok := res[1].(string)
	if !ok {
		return "", 0, fmt.Errorf("current %s: pointer names v%d but its blob is missing", k, version)
	}
	return blob, version, nil
}

// CurrentList is Current decoded and checked with schemas.UnmarshalList.
func (st *Store) CurrentList(ctx context.Context, k schemas.ListKey) (*schemas.List, error) {
	raw, _, err := st.Current(ctx, k)
	if err != nil {
		return nil, err
	}
	l, err := schemas.UnmarshalList(raw)
	if err != nil {
		return nil, fmt.Errorf("current %s: %w", k, err)
	}
	return l, nil
}

// headerBytes is how much of a blob CurrentHeader reads: the fields before
// "items" take about 300 bytes in every list the encoders write (a long
// list's exact_until and a rules version included).
const headerBytes = 1024

// CurrentHeader returns the version and as_of of k's current list (a top
// or trending list) from the first KB of its blob (schemas.ListHeader),
// read atomically with the pointer, or ErrNotFound when k has no version
// yet. It is what a reader that follows pointer moves for their timing
// needs (publishobs, the lag observer): CurrentList copies the whole blob
// out of Redis and decodes every entry, which for a job's every publish was
// 6% of the streaming job's CPU at 100k events/s (BENCHMARKS.md), and
// refuses a trending list. A header longer than the prefix falls back to
// the whole blob.
func (st *Store) CurrentHeader(ctx context.Context, k schemas.ListKey) (version int64, asOf time.Time, err error) {
	prefix, version, err := st.current(ctx, k, headerBytes)
	if err != nil {
		return 0, time.Time{}, err
	}
	hk, hv, asOf, err := schemas.ListHeader([]byte(prefix))
	if err != nil && len(prefix) == headerBytes {
		// Cut inside the header: read the whole blob.
		if prefix, version, err = st.current(ctx, k, 0); err != nil {
			return 0, time.Time{}, err
		}
		hk, hv, asOf, err = schemas.ListHeader([]byte(prefix))
	}
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("current header %s v%d: %w", k, version, err)
	}
	if hk != k || hv != version {
		return 0, time.Time{}, fmt.Errorf("current header %s v%d: the blob is %s v%d", k, version, hk, hv)
	}
	return version, asOf, nil
}

// Pointers returns the current version of each key in one round trip (MGET);
// 0 where a list has no version.
func (st *Store) Pointers(ctx context.Context, keys []schemas.ListKey) ([]int64, error) {
	out := make([]int64, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = st.PointerKey(k)
	}
	vals, err := st.c.MGet(ctx, names...).Result()
	if err != nil {
		return nil, fmt.Errorf("pointers: %w", err)
	}
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("pointers: %s holds %q: %w", names[i], s, err)
		}
		out[i] = n
	}
	return out, nil
}

// Keys lists every list that has a pointer, by SCAN (never KEYS), sorted.
// Keys under the prefix that do not parse as a list key are skipped.
func (st *Store) Keys(ctx context.Context) ([]schemas.ListKey, error) {
	var out []schemas.ListKey
	seen := make(map[schemas.ListKey]bool)
	pattern := escapeGlob(st.opts.Prefix) + ":*:cur"
	iter := st.c.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		name := iter.Val()
		rest, ok := strings.CutPrefix(name, st.opts.Prefix+":")
		if !ok {
			continue
		}
		rest, ok = strings.CutSuffix(rest, ":cur")
		if !ok {
			continue
		}
		k, err := ParseListKey(rest)
		if err != nil || seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, k)
	}
	if err := iter.Err(); err != nil {
		return nil, fmt.Errorf("keys: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}

// escapeGlob escapes the glob metacharacters of a SCAN MATCH pattern.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// ParseListKey parses ListKey.String()'s form "type:scope:window" and
// validates it.
func ParseListKey(s string) (schemas.ListKey, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return schemas.ListKey{}, fmt.Errorf("list key %q is not type:scope:window", s)
	}
	k := schemas.ListKey{Type: parts[0], Scope: parts[1], Window: schemas.Window(parts[2])}
	if err := k.Validate(); err != nil {
		return schemas.ListKey{}, fmt.Errorf("list key %q: %w", s, err)
	}
	return k, nil
}

// Subscribe reports the key of every list whose pointer moves, until ctx is
// done, when the channel is closed. The subscription is confirmed before
// Subscribe returns, so a move published after it returns is not missed
// while the connection holds; across a reconnect messages can be lost, which
// is why readers also poll. A slow reader drops messages after a short wait
// rather than blocking the connection.
func (st *Store) Subscribe(ctx context.Context) (<-chan schemas.ListKey, error) {
	return subscribe(ctx, st.c, st.opts.Channel, 256, ParseListKey)
}

// subscribe relays a Redis channel's messages, decoded by parse (messages
// that do not decode are skipped), until ctx is done, then closes the
// channel it returns.
func subscribe[T any](ctx context.Context, c redis.UniversalClient, channel string, size int, parse func(string) (T, error)) (<-chan T, error) {
	ps := c.Subscribe(ctx, channel)
	if _, err := ps.Receive(ctx); err != nil {
		ps.Close()
		return nil, fmt.Errorf("subscribe %s: %w", channel, err)
	}
	out := make(chan T, size)
	in := ps.Channel(redis.WithChannelSize(size))
	go func() {
		defer close(out)
		defer ps.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case m, ok := <-in:
				if !ok {
					return
				}
				v, err := parse(m.Payload)
				if err != nil {
					continue
				}
				select {
				case out <- v:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}

// Removal is one item taken down from every list of its type.
type Removal struct {
	Type   string    `json:"type"`
	Item   string    `json:"item"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// RemovalEvent is the status event published on Options.RemovalsChannel.
type RemovalEvent struct {
	// Op is "add" or "delete".
	Op string `json:"op"`
	Removal
}

// Removal event ops.
const (
	OpAdd    = "add"
	OpDelete = "delete"
	// OpRefill: the hash was refilled from the durable deny set (Removal
	// is empty); readers reload the whole set.
	OpRefill = "refill"
)

func removalField(typ, item string) string { return typ + "\x00" + item }

// ValidateRemoval checks a removal's type, item and reason with the same
// rules events follow (schemas.Validator): the type is an item type, the item
// a printable-ASCII token of at most schemas.MaxItemLen bytes; the reason is
// UTF-8 of at most MaxReasonLen bytes.
func ValidateRemoval(typ, item, reason string) error {
	if !schemas.IsType(typ) {
		return fmt.Errorf("%w: type %q must match [a-z][a-z0-9_]{0,31}", ErrBadRemoval, typ)
	}
	probe := schemas.Event{EventID: "x", Type: typ, Item: item, TS: time.Unix(1, 0)}
	if err := (schemas.Validator{}).Validate(&probe, time.Unix(1, 0)); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRemoval, err)
	}
	if len(reason) > MaxReasonLen {
		return fmt.Errorf("%w: reason is %d bytes, more than %d", ErrBadRemoval, len(reason), MaxReasonLen)
	}
	if !utf8.ValidString(reason) {
		return fmt.Errorf("%w: reason is not valid UTF-8", ErrBadRemoval)
	}
	return nil
}

// NewRemoval validates a removal and stamps it with the store's clock.
func (st *Store) NewRemoval(typ, item, reason string) (Removal, error) {
	if err := ValidateRemoval(typ, item, reason); err != nil {
		return Removal{}, err
	}
	return Removal{Type: typ, Item: item, Reason: reason, At: st.opts.Now().UTC()}, nil
}

// AddRemoval adds (type, item) to the deny set, or updates its reason, and
// publishes an "add" event, in one MULTI/EXEC.
func (st *Store) AddRemoval(ctx context.Context, typ, item, reason string) (Removal, error) {
	r, err := st.NewRemoval(typ, item, reason)
	if err != nil {
		return Removal{}, err
	}
	return r, st.PutRemoval(ctx, r)
}

// PutRemoval adds a removal made by NewRemoval (or read back from the
// durable set) to the deny set and publishes an "add" event, in one
// MULTI/EXEC.
func (st *Store) PutRemoval(ctx context.Context, r Removal) error {
	typ, item := r.Type, r.Item
	if err := ValidateRemoval(typ, item, r.Reason); err != nil {
		return err
	}
	val, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("add removal: %w", err)
	}
	ev, err := json.Marshal(RemovalEvent{Op: OpAdd, Removal: r})
	if err != nil {
		return fmt.Errorf("add removal: %w", err)
	}
	_, err = st.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, st.RemovalsKey(), removalField(typ, item), val)
		p.Publish(ctx, st.opts.RemovalsChannel, ev)
		return nil
	})
	if err != nil {
		return fmt.Errorf("add removal %s/%s: %w", typ, item, err)
	}
	return nil
}

// FillRemovals adds every removal of all (the durable deny set) to the
// hash, sets the filled marker and publishes a "refill" event, in one
// MULTI/EXEC. Entries of the hash that all lacks are left alone (a refill
// racing an admin write never drops a removal).
func (st *Store) FillRemovals(ctx context.Context, all []Removal) error {
	vals := make([]any, 0, 2*len(all))
	for _, r := range all {
		v, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("fill removals: %w", err)
		}
		vals = append(vals, removalField(r.Type, r.Item), v)
	}
	ev, err := json.Marshal(RemovalEvent{Op: OpRefill})
	if err != nil {
		return fmt.Errorf("fill removals: %w", err)
	}
	_, err = st.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		if len(vals) > 0 {
			p.HSet(ctx, st.RemovalsKey(), vals...)
		}
		p.Set(ctx, st.RemovalsFilledKey(), st.opts.Now().UTC().Format(time.RFC3339Nano), 0)
		p.Publish(ctx, st.opts.RemovalsChannel, ev)
		return nil
	})
	if err != nil {
		return fmt.Errorf("fill removals: %w", err)
	}
	return nil
}

// RemovalsState returns the deny set as Removals does, and whether the
// filled marker is set, read in one MULTI/EXEC.
func (st *Store) RemovalsState(ctx context.Context) (all []Removal, filled bool, err error) {
	var hget *redis.MapStringStringCmd
	var exists *redis.IntCmd
	_, err = st.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		hget = p.HGetAll(ctx, st.RemovalsKey())
		exists = p.Exists(ctx, st.RemovalsFilledKey())
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("removals: %w", err)
	}
	return decodeRemovals(hget.Val()), exists.Val() == 1, nil
}

// DeleteRemoval restores (type, item) and publishes a "delete" event. existed
// is false (and nothing is published) when it was not removed.
func (st *Store) DeleteRemoval(ctx context.Context, typ, item string) (existed bool, err error) {
	if err := ValidateRemoval(typ, item, ""); err != nil {
		return false, err
	}
	ev, err := json.Marshal(RemovalEvent{Op: OpDelete, Removal: Removal{Type: typ, Item: item, At: st.opts.Now().UTC()}})
	if err != nil {
		return false, fmt.Errorf("delete removal: %w", err)
	}
	n, err := deleteRemovalScript.Run(ctx, st.c, []string{st.RemovalsKey()},
		removalField(typ, item), st.opts.RemovalsChannel, ev).Int64()
	if err != nil {
		return false, fmt.Errorf("delete removal %s/%s: %w", typ, item, err)
	}
	return n == 1, nil
}

// deleteRemovalScript: KEYS[1] hash; ARGV[1] field, ARGV[2] channel, ARGV[3]
// event. Publishes only when the field existed.
var deleteRemovalScript = redis.NewScript(`
local n = redis.call('HDEL', KEYS[1], ARGV[1])
if n == 1 then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return n
`)

// Removals returns the deny set, sorted by type then item. Entries that do
// not decode are skipped.
func (st *Store) Removals(ctx context.Context) ([]Removal, error) {
	m, err := st.c.HGetAll(ctx, st.RemovalsKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("removals: %w", err)
	}
	return decodeRemovals(m), nil
}

// decodeRemovals decodes the hash's values, skipping entries that do not
// decode, sorted by type then item.
func decodeRemovals(m map[string]string) []Removal {
	out := make([]Removal, 0, len(m))
	for _, v := range m {
		var r Removal
		if err := json.Unmarshal([]byte(v), &r); err != nil || r.Type == "" || r.Item == "" {
			continue
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Type != out[j].Type {
			return out[i].Type < out[j].Type
		}
		return out[i].Item < out[j].Item
	})
	return out
}

// SubscribeRemovals reports deny-set changes until ctx is done, when the
// channel is closed. Like Subscribe, it can miss events across a reconnect:
// readers also reload Removals periodically.
func (st *Store) SubscribeRemovals(ctx context.Context) (<-chan RemovalEvent, error) {
	return subscribe(ctx, st.c, st.opts.RemovalsChannel, 64, func(p string) (RemovalEvent, error) {
		var ev RemovalEvent
		err := json.Unmarshal([]byte(p), &ev)
		return ev, err
	})
}
