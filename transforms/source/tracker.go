package source

import (
	"fmt"
	"math"
	"reflect"
	"sync"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

func init() {
	beam.RegisterType(reflect.TypeOf((*streamRestriction)(nil)).Elem())
}

// unbounded is the End of a restriction with no end.
const unbounded = math.MaxInt64

// streamRestriction is the restriction of the unbounded sources (Pub/Sub and
// synthetic): a range of positions [Next, End) claimed one at a time in
// order, plus what a resumed call must know. Positions are messages for
// Pub/Sub and beacons for the generator.
type streamRestriction struct {
	// Shard tells parallel restrictions of one source apart.
	Shard int64
	// Next is the first position not yet claimed.
	Next int64
	// End is the exclusive end; unbounded (MaxInt64) for an endless stream.
	End int64
	// Mark is a wall-clock instant (Unix ns) carried across checkpoints: the
	// generator's start (its schedule's origin), or the time the Pub/Sub
	// reader last received a message (for idle_stop). 0: not set yet.
	Mark int64
	// Acks are the Pub/Sub ack ids of the messages emitted by the bundle
	// that produced this restriction as its residual. The runner starts a
	// residual only after the bundle that returned it committed, so the
	// resumed call acks them first (see the package doc).
	Acks []string
	// Replayed: the reader has replayed the recovery log (only shard 0
	// replays; see pubsublog.go). ReplayAt and ReplayAfter are the replay's
	// cursor: the publish time (Unix ms) and message id of the last record
	// emitted ("": none at ReplayAt yet), so that a checkpoint anywhere
	// neither repeats nor skips one, whatever the log reads returned.
	Replayed    bool
	ReplayAt    int64
	ReplayAfter string
	// ReplayCount is how many records the replay has emitted so far.
	ReplayCount int64
}

// streamTracker claims the positions of a streamRestriction in order. It
// refuses every split but the checkpoint (fraction 0): one stream is read by
// one loop, and parallelism comes from Shards. All methods are safe for
// concurrent use (the runner may call TrySplit while ProcessElement claims).
type streamTracker struct {
	mu      sync.Mutex
	rest    streamRestriction
	claimed int64    // next position to claim
	acks    []string // ack ids of the messages claimed so far
	stopped bool     // checkpointed, or a claim was refused
}

func newStreamTracker(r streamRestriction) *streamTracker {
	return &streamTracker{rest: r, claimed: r.Next}
}

// TryClaim claims pos, which must be the next position (an int64).
func (t *streamTracker) TryClaim(pos any) bool {
	p, ok := pos.(int64)
	if !ok {
		panic(fmt.Sprintf("source: TryClaim(%T): want int64", pos))
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.claimLocked(p)
}

func (t *streamTracker) claimLocked(p int64) bool {
	if p != t.claimed {
		panic(fmt.Sprintf("source: claim of %d out of order (next %d)", p, t.claimed))
	}
	if t.stopped || p >= t.rest.End {
		t.stopped = true
		return false
	}
	t.claimed++
	return true
}

// claimMessage claims the next position for a Pub/Sub message and records its
// ack id in the same step, so that a checkpoint never separates the two.
func (t *streamTracker) claimMessage(ackID string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.claimLocked(t.claimed) {
		return false
	}
	t.acks = append(t.acks, ackID)
	return true
}

// claimNext claims the next position without recording an ack id (the
// logged reader acknowledges at once; a replayed record has none).
func (t *streamTracker) claimNext() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.claimLocked(t.claimed)
}

// setReplay records the replay's position (see streamRestriction); emitted
// is added to ReplayCount.
func (t *streamTracker) setReplay(at int64, after string, emitted int64, done bool) {
	t.mu.Lock()
	t.rest.ReplayAt, t.rest.ReplayAfter, t.rest.Replayed = at, after, done
	t.rest.ReplayCount += emitted
	t.mu.Unlock()
}

// takeAcks returns the ack ids the restriction arrived with and forgets
// them, so that the primary of this call does not carry them again.
func (t *streamTracker) takeAcks() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.rest.Acks
	t.rest.Acks = nil
	return a
}

// setMark sets the Mark a residual carries.
func (t *streamTracker) setMark(m int64) {
	t.mu.Lock()
	t.rest.Mark = m
	t.mu.Unlock()
}

// GetError never reports an error: misuse panics.
func (t *streamTracker) GetError() error { return nil }

// TrySplit at fraction 0 checkpoints: the primary keeps what was claimed and
// the residual the rest, with the ack ids of the claimed messages. Any other
// fraction is refused (nil residual).
func (t *streamTracker) TrySplit(fraction float64) (primary, residual any, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if fraction != 0 || t.stopped || t.claimed >= t.rest.End {
		return t.rest, nil, nil
	}
	res := t.rest
	res.Next = t.claimed
	res.Acks = t.acks
	t.rest.End = t.claimed
	t.rest.Acks = nil
	t.acks = nil
	t.stopped = true
	return t.rest, res, nil
}

// GetProgress reports claimed and remaining positions.
func (t *streamTracker) GetProgress() (done, remaining float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return float64(t.claimed - t.rest.Next), float64(t.rest.End - t.claimed)
}

// IsDone reports whether no position is left to claim.
func (t *streamTracker) IsDone() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stopped || t.claimed >= t.rest.End
}

// GetRestriction returns the current restriction (the primary after a split).
func (t *streamTracker) GetRestriction() any {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rest
}

// IsBounded reports whether the restriction has an end.
func (t *streamTracker) IsBounded() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rest.End != unbounded
}
