package liststore

// History: the versions of a list still held in Redis, the previous version
// (which readers derive rank changes from) and rollback.
//
// Which versions are held: the current one and the previous one (the `prev`
// pointer) never expire; every older version expires Options.OldVersionTTL
// after it stopped being the previous one. So memory per list is two blobs
// plus what was published within the TTL, and an operator can always roll
// back one version, and further back within the TTL.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/topk-dev/topk/schemas"
)

// Rollback errors callers branch on.
var (
	// ErrVersionNotHeld: the named version's blob is not in Redis (never
	// published, or expired).
	ErrVersionNotHeld = errors.New("version not held")
	// ErrNotEarlier: the named version is not earlier than the current one.
	ErrNotEarlier = errors.New("version is not earlier than the current one")
)

// PrevKey is the Redis key naming the version that was current before the
// current one.
func (st *Store) PrevKey(k schemas.ListKey) string { return st.base(k) + "prev" }

// Snapshot is a list's current blob and, when held, its previous one.
type Snapshot struct {
	Version int64
	Raw     []byte
	// PrevVersion is 0 when the list has no previous version held.
	PrevVersion int64
	// PrevRaw is nil when PrevVersion is 0 or equals the skip version
	// passed to CurrentWithPrevious (the caller holds it already).
	PrevRaw []byte
}

// currentPrevScript: KEYS[1] pointer, KEYS[2] prev pointer; ARGV[1] blob
// key base, ARGV[2] a version whose blob the caller holds ("" for none).
// Returns nil without a pointer, else {cur, blob or false, prev or false,
// prev blob or false}.
var currentPrevScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if not cur then
  return nil
end
local prev = redis.call('GET', KEYS[2])
local pblob = false
if prev and prev ~= ARGV[2] then
  pblob = redis.call('GET', ARGV[1] .. prev)
end
return {cur, redis.call('GET', ARGV[1] .. cur), prev or false, pblob}
`)

// CurrentWithPrevious reads, in one atomic step, the current blob of k and
// its previous version's blob. skip names a version the caller already holds
// (its blob is not sent again; 0 for none). ErrNotFound when k has no
// version yet.
func (st *Store) CurrentWithPrevious(ctx context.Context, k schemas.ListKey, skip int64) (Snapshot, error) {
	if err := k.Validate(); err != nil {
		return Snapshot{}, fmt.Errorf("current: %w", err)
	}
	skipArg := ""
	if skip > 0 {
		skipArg = strconv.FormatInt(skip, 10)
	}
	res, err := currentPrevScript.Run(ctx, st.c, []string{st.PointerKey(k), st.PrevKey(k)}, st.base(k)+"v", skipArg).Slice()
	if errors.Is(err, redis.Nil) {
		return Snapshot{}, fmt.Errorf("current %s: %w", k, ErrNotFound)
	}
	if err != nil {
		return Snapshot{}, fmt.Errorf("current %s: %w", k, err)
	}
	if len(res) != 4 {
		return Snapshot{}, fmt.Errorf("current %s: script returned %d values", k, len(res))
	}
	var snap Snapshot
	ns, _ := res[0].(string)
	if snap.Version, err = strconv.ParseInt(ns, 10, 64); err != nil {
		return Snapshot{}, fmt.Errorf("current %s: pointer %q: %w", k, ns, err)
	}
	blob, ok := res[1].(string)
	if !ok {
		return Snapshot{}, fmt.Errorf("current %s: pointer names v%d but its blob is missing", k, snap.Version)
	}
	snap.Raw = []byte(blob)
	if ps, ok := res[2].(string); ok {
		pv, err := strconv.ParseInt(ps, 10, 64)
		if err != nil {
			return Snapshot{}, fmt.Errorf("current %s: prev pointer %q: %w", k, ps, err)
		}
		if pb, ok := res[3].(string); ok {
			snap.PrevVersion, snap.PrevRaw = pv, []byte(pb)
		} else if pv == skip {
			snap.PrevVersion = pv
		}
	}
	return snap, nil
}

// Versions lists the versions of k whose blobs are held, ascending, by SCAN
// (never KEYS): a rollback's candidates. It costs a pass over the keyspace,
// which is fine for an operator's request, not for a read path.
func (st *Store) Versions(ctx context.Context, k schemas.ListKey) ([]int64, error) {
	if err := k.Validate(); err != nil {
		return nil, fmt.Errorf("versions: %w", err)
	}
	base := st.base(k) + "v"
	var out []int64
	iter := st.c.Scan(ctx, 0, escapeGlob(base)+"*", 1000).Iterator()
	for iter.Next(ctx) {
		rest, ok := strings.CutPrefix(iter.Val(), base)
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(rest, 10, 64)
		if err != nil || n <= 0 || strconv.FormatInt(n, 10) != rest {
			continue
		}
		out = append(out, n)
	}
	if err := iter.Err(); err != nil {
		return nil, fmt.Errorf("versions %s: %w", k, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// rollbackScript: KEYS[1] pointer, KEYS[2] prev pointer; ARGV[1] target
// version, ARGV[2] blob key base, ARGV[3] old-version TTL (ms), ARGV[4] the
// new previous version ("" for none), ARGV[5] channel, ARGV[6] message.
// Returns the version that was current, or the integer -1 (no pointer), -2
// (target not earlier), -3 (target blob not held).
var rollbackScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if not cur then
  return -1
end
local t = ARGV[1]
if not (#cur > #t or (#cur == #t and cur > t)) then
  return -2
end
if redis.call('EXISTS', ARGV[2] .. t) == 0 then
  return -3
end
redis.call('PERSIST', ARGV[2] .. t)
redis.call('PEXPIRE', ARGV[2] .. cur, ARGV[3])
local prev = redis.call('GET', KEYS[2])
local np = ARGV[4]
if np ~= '' and redis.call('EXISTS', ARGV[2] .. np) == 1 then
  redis.call('PERSIST', ARGV[2] .. np)
  redis.call('SET', KEYS[2], np)
else
  np = ''
  redis.call('DEL', KEYS[2])
end
if prev and prev ~= np and prev ~= t then
  redis.call('PEXPIRE', ARGV[2] .. prev, ARGV[3])
end
redis.call('SET', KEYS[1], t)
redis.call('PUBLISH', ARGV[5], ARGV[6])
return cur
`)

// Rollback moves k's pointer back to version to, which must be earlier than
// the current version and still held (Versions). In one script it keeps the
// target's blob (no expiry), gives the abandoned current blob the
// old-version TTL, makes the newest held version below the target the
// previous one, and publishes the move on Options.Channel like a publish.
// It returns the version that was current.
//
// Nothing is locked: the pipeline's next publish of a version above the
// target moves the pointer forward again, exactly as after any publish (a
// replay of the abandoned version included). ErrNotFound without a pointer,
// ErrNotEarlier, ErrVersionNotHeld.
func (st *Store) Rollback(ctx context.Context, k schemas.ListKey, to int64) (from int64, err error) {
	if err := k.Validate(); err != nil {
		return 0, fmt.Errorf("rollback: %w", err)
	}
	if to <= 0 {
		return 0, fmt.Errorf("rollback %s: version %d must be > 0: %w", k, to, ErrVersionNotHeld)
	}
	held, err := st.Versions(ctx, k)
	if err != nil {
		return 0, fmt.Errorf("rollback: %w", err)
	}
	newPrev := ""
	for _, v := range held {
		if v < to {
			newPrev = strconv.FormatInt(v, 10)
		}
	}
	res, err := rollbackScript.Run(ctx, st.c, []string{st.PointerKey(k), st.PrevKey(k)},
		strconv.FormatInt(to, 10), st.base(k)+"v", st.opts.OldVersionTTL.Milliseconds(), newPrev,
		st.opts.Channel, k.String()).Result()
	if err != nil {
		return 0, fmt.Errorf("rollback %s to v%d: %w", k, to, err)
	}
	switch v := res.(type) {
	case int64:
		switch v {
		case -1:
			return 0, fmt.Errorf("rollback %s: %w", k, ErrNotFound)
		case -2:
			return 0, fmt.Errorf("rollback %s to v%d: %w", k, to, ErrNotEarlier)
		default:
			return 0, fmt.Errorf("rollback %s to v%d: %w", k, to, ErrVersionNotHeld)
		}
	case string:
		from, err = strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("rollback %s: pointer held %q: %w", k, v, err)
		}
		return from, nil
	}
	return 0, fmt.Errorf("rollback %s: script returned %T", k, res)
}
