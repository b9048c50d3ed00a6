package archive

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2"
	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/topk-dev/topk/internal/retry"
	"github.com/topk-dev/topk/schemas"
)

// Defaults for the zero fields of a Config.
const (
	DefaultGrace       = 10 * time.Minute
	DefaultFlushEvery  = 10 * time.Second
	DefaultMaxRows     = 500_000
	DefaultMaxMessages = 1000
	DefaultIdleWait    = 200 * time.Millisecond
	DefaultPullWait    = 5 * time.Second
)

const (
	// maxAckIDsPerRequest keeps Acknowledge requests well under Pub/Sub's
	// 512 KB request limit (ack ids are up to ~200 bytes).
	maxAckIDsPerRequest = 1000
	// maxPendingAcks flushes early when many small messages are buffered.
	maxPendingAcks = 50_000
	// maxErrorWait caps the backoff after failed Pulls and file writes: a
	// service that returns is noticed within it.
	maxErrorWait = 5 * time.Second
	// stopTimeout bounds the final flush and ack once the context has ended.
	stopTimeout = time.Minute
	// immediatePullTimeout bounds a return-immediately Pull.
	immediatePullTimeout = 30 * time.Second
)

// TSAttribute is the message attribute holding the beacon's earliest event
// time in Unix milliseconds; the archive only uses it to date a dead letter.
const TSAttribute = "ts"

// Config is one archiver.
type Config struct {
	// Root is the archive root: a local folder, or gs://bucket/prefix in
	// Google Cloud Storage (credentials: Application Default Credentials;
	// STORAGE_EMULATOR_HOST selects an emulator or fake).
	Root string
	// Subscription is the full name, projects/P/subscriptions/S.
	Subscription string
	// Grace is how long after its end an event hour closes (default 10m).
	Grace time.Duration
	// FlushEvery is the longest a pulled message waits for its files (and
	// its ack); default 10s, and never more than half the subscription's
	// ack deadline.
	FlushEvery time.Duration
	// MaxRows flushes early once this many rows are buffered (default
	// 500,000): the bound on the archiver's memory.
	MaxRows int
	// MaxMessages per Pull (default 1000).
	MaxMessages int32
	// ReturnImmediately makes every Pull return at once even when empty:
	// set it for the emulator and pstest (the emulator otherwise holds an
	// empty Pull until the client's deadline). Google Cloud long-polls for up
	// to PullWait.
	ReturnImmediately bool
	// PullWait bounds a long-polling Pull (default 5s).
	PullWait time.Duration
	// IdleWait is the pause after an empty Pull (default 200ms).
	IdleWait time.Duration
	// IdleStop, when positive, makes Run flush, ack and return after this
	// long without a message (tests, batch drains). Zero: run until ctx ends.
	IdleStop time.Duration
	// Validator checks each event; a rejected event is dead-lettered. The
	// zero value checks fields only and accepts any timestamp.
	Validator schemas.Validator
	// WriterID names this archiver's files (part-<WriterID>-<seq>); default
	// a random id, so no two runs ever write the same name.
	WriterID string
	// Now is the wall clock that closes hours (default time.Now). Flush
	// pacing (FlushEvery, IdleStop) uses the process's monotonic clock.
	Now func() time.Time
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Progress, when set, is called after every flush and once more when Run
	// returns, with the totals so far.
	Progress func(Stats)
	// Recreate, when set, is called when the subscription is not found
	// after Run started: an emulator that restarted has lost its topics and
	// subscriptions, and the command recreates them there. Nil: Run keeps
	// retrying (with backoff, logging each failure) until someone does.
	Recreate func(ctx context.Context) error

	// beforeAck, when set (tests), runs after a flush's files are durable
	// and before its messages are acked; an error ends Run with that error
	// and without acking, as a crash there would.
	beforeAck func(ackIDs []string) error
}

// Stats are an archiver's totals since Run started.
type Stats struct {
	Messages    int64 // messages pulled
	Events      int64 // events archived (rows written)
	LateEvents  int64 // of which into late/ folders
	DeadLetters int64 // dead letters written (beacons and events)
	Files       int64 // Parquet files written
	Acked       int64 // messages acknowledged
	AckErrors   int64 // messages whose ack failed (they will be redelivered)
	Closed      int64 // hours this run closed
}

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	if c.FlushEvery == 0 {
		c.FlushEvery = DefaultFlushEvery
	}
	if c.MaxRows == 0 {
		c.MaxRows = DefaultMaxRows
	}
	if c.MaxMessages == 0 {
		c.MaxMessages = DefaultMaxMessages
	}
	if c.PullWait == 0 {
		c.PullWait = DefaultPullWait
	}
	if c.IdleWait == 0 {
		c.IdleWait = DefaultIdleWait
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports the first problem with the configuration (after
// defaults, so zero durations and sizes are fine).
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Grace < 0:
		return fmt.Errorf("archive: grace %v is negative", c.Grace)
	case c.FlushEvery < 0:
		return fmt.Errorf("archive: flush period %v is negative", c.FlushEvery)
	case c.MaxRows < 0:
		return fmt.Errorf("archive: max rows %d is negative", c.MaxRows)
	case c.MaxMessages < 0:
		return fmt.Errorf("archive: max messages %d is negative", c.MaxMessages)
	case c.PullWait < 0 || c.IdleWait < 0 || c.IdleStop < 0:
		return errors.New("archive: pull wait, idle wait and idle stop must not be negative")
	case strings.ContainsAny(c.WriterID, "/\\. "):
		return fmt.Errorf("archive: writer id %q must not contain '/', '\\', '.' or spaces", c.WriterID)
	}
	if _, err := openRoot(c.Root); err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	if err := checkSubscription(c.Subscription); err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	return nil
}

func checkSubscription(name string) error {
	parts := strings.Split(name, "/")
	if len(parts) != 4 || parts[0] != "projects" || parts[2] != "subscriptions" || parts[1] == "" || parts[3] == "" {
		return fmt.Errorf("subscription %q is not projects/P/subscriptions/S", name)
	}
	return nil
}

// Run archives the subscription until ctx ends (or IdleStop passes), then
// flushes, acknowledges and returns nil. Outages are waited out, never
// returned: an unavailable Pub/Sub (at start or later) and a subscription
// that disappears after the start (Config.Recreate) are retried with
// backoff, and so are transient failures to write files; nothing is acked
// before its files are durable. It returns an error when the subscription
// is unusable at start (missing, permission denied) or a flush fails for
// good (a full disk); the messages of a failed flush stay unacknowledged and
// are redelivered.
func Run(ctx context.Context, client *pubsub.Client, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg = cfg.withDefaults()
	if client == nil || client.SubscriptionAdminClient == nil {
		return errors.New("archive: nil Pub/Sub client")
	}
	if cfg.WriterID == "" {
		var b [6]byte
		if _, err := rand.Read(b[:]); err != nil {
			return fmt.Errorf("archive: writer id: %w", err)
		}
		cfg.WriterID = hex.EncodeToString(b[:])
	}
	root, err := openRoot(cfg.Root)
	if err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	a := &archiver{
		cfg:    cfg,
		root:   root,
		subs:   client.SubscriptionAdminClient,
		log:    cfg.Logger.With("subscription", cfg.Subscription, "writer", cfg.WriterID),
		rows:   make(map[time.Time][]schemas.ArchiveEvent),
		hours:  make(map[time.Time]struct{}),
		closed: make(map[time.Time]struct{}),
	}
	var sub *pb.Subscription
	_, err = retry.Policy{Max: maxErrorWait, Log: a.log, What: "archive: get subscription"}.Do(ctx, func(ctx context.Context) error {
		var err error
		sub, err = a.subs.GetSubscription(ctx, &pb.GetSubscriptionRequest{Subscription: cfg.Subscription})
		return err
	})
	if err != nil {
		return fmt.Errorf("archive: subscription %s: %w", cfg.Subscription, err)
	}
	if d := time.Duration(sub.GetAckDeadlineSeconds()) * time.Second / 2; d > 0 && d < a.cfg.FlushEvery {
		a.log.Warn("archive: flush period shortened to half the ack deadline", "flush_every", a.cfg.FlushEvery, "ack_deadline", 2*d)
		a.cfg.FlushEvery = d
	}
	open, err := openHours(ctx, a.root)
	if err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	for _, h := range open {
		a.hours[h] = struct{}{}
	}
	a.log.Info("archive: started", "root", cfg.Root, "grace", cfg.Grace, "flush_every", a.cfg.FlushEvery, "open_hours", len(a.hours))
	err = a.loop(ctx)
	if cfg.Progress != nil {
		cfg.Progress(a.stats)
	}
	a.log.Info("archive: stopped", "messages", a.stats.Messages, "events", a.stats.Events,
		"late", a.stats.LateEvents, "dead_letters", a.stats.DeadLetters, "files", a.stats.Files,
		"acked", a.stats.Acked, "closed_hours", a.stats.Closed, "err", err)
	return err
}

// archiver is one Run's state. One goroutine: no locks.
type archiver struct {
	cfg  Config
	root store
	subs *vkit.SubscriptionAdminClient
	log  *slog.Logger

	rows      map[time.Time][]schemas.ArchiveEvent // buffered rows by event hour
	nrows     int
	dead      []schemas.DeadLetter
	acks      []string
	hours     map[time.Time]struct{} // hours known open, to close when due
	closed    map[time.Time]struct{} // hours known closed (marker written)
	seq       int
	reader    schemas.BeaconReader
	scratch   []schemas.Event
	stats     Stats
	lastFlush time.Time
}

// loop is Run's body after setup.
func (a *archiver) loop(ctx context.Context) error {
	a.lastFlush = time.Now()
	lastMsg := time.Now()
	var pullBackoff backoff
	for {
		if ctx.Err() != nil {
			return a.stop(ctx)
		}
		if err := a.closeDue(ctx); err != nil {
			return err
		}
		if a.nrows >= a.cfg.MaxRows || len(a.acks) >= maxPendingAcks ||
			(len(a.acks) > 0 && time.Since(a.lastFlush) >= a.cfg.FlushEvery) {
			if err := a.flush(ctx); err != nil {
				return err
			}
		}
		msgs, err := a.pull(ctx)
		if err != nil {
			if ctx.Err() != nil {
				continue
			}
			switch status.Code(err) {
			case codes.PermissionDenied, codes.InvalidArgument, codes.Unauthenticated:
				return fmt.Errorf("archive: pull %s: %w", a.cfg.Subscription, err)
			case codes.NotFound:
				// It existed at start: an emulator restarted, or someone
				// deleted it. Recreate it where we may, else wait.
				if a.cfg.Recreate != nil {
					if rerr := a.cfg.Recreate(ctx); rerr != nil {
						a.log.Warn("archive: recreating the subscription failed", "err", rerr)
					} else {
						a.log.Warn("archive: subscription was gone; recreated it")
					}
				}
			}
			wait := pullBackoff.next()
			if pullBackoff.failures == 1 || pullBackoff.failures%12 == 0 { // then about once a minute
				a.log.Warn("archive: pull failed; retrying with backoff until Pub/Sub answers (buffered messages stay unacknowledged)",
					"failed_pulls", pullBackoff.failures, "err", err)
			}
			retry.Sleep(ctx, wait)
			continue
		}
		if pullBackoff.failures > 0 {
			a.log.Info("archive: pull works again", "failed_pulls", pullBackoff.failures)
			pullBackoff = backoff{}
		}
		if len(msgs) == 0 {
			if a.cfg.IdleStop > 0 && time.Since(lastMsg) >= a.cfg.IdleStop {
				return a.stop(ctx)
			}
			retry.Sleep(ctx, a.cfg.IdleWait)
			continue
		}
		lastMsg = time.Now()
		now := a.cfg.Now()
		for _, m := range msgs {
			a.add(m, now)
		}
	}
}

// stop flushes and acks what is buffered, on a context that outlives ctx.
func (a *archiver) stop(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	if err := a.closeDue(sctx); err != nil {
		return err
	}
	return a.flush(sctx)
}

// pull makes one Pull call; a long poll that times out is an empty pull.
func (a *archiver) pull(ctx context.Context) ([]*pb.ReceivedMessage, error) {
	wait := a.cfg.PullWait
	if a.cfg.ReturnImmediately {
		wait = immediatePullTimeout
	}
	pctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	resp, err := a.subs.Pull(pctx, &pb.PullRequest{
		Subscription:      a.cfg.Subscription,
		MaxMessages:       a.cfg.MaxMessages,
		ReturnImmediately: a.cfg.ReturnImmediately,
	})
	if err != nil {
		if !a.cfg.ReturnImmediately && ctx.Err() == nil && pctx.Err() != nil {
			return nil, nil
		}
		return nil, err
	}
	return resp.GetReceivedMessages(), nil
}

// add decodes one message and buffers its events (or its dead letters).
// Its ack id is kept for the next flush either way.
func (a *archiver) add(m *pb.ReceivedMessage, now time.Time) {
	a.stats.Messages++
	a.acks = append(a.acks, m.GetAckId())
	data := m.GetMessage().GetData()
	r := &a.reader
	if err := r.Reset(data); err != nil {
		a.deadBeacon(m, err)
		return
	}
	// Decode the whole beacon first: a structural error anywhere sends it
	// to the dead letters whole, as the fast path does.
	start := len(a.scratch)
	var e schemas.Event
	for r.Next(&e) {
		a.scratch = append(a.scratch, e)
	}
	if err := r.Err(); err != nil {
		a.scratch = a.scratch[:start]
		a.deadBeacon(m, err)
		return
	}
	for i := range a.scratch[start:] {
		e := &a.scratch[start+i]
		if err := a.cfg.Validator.Validate(e, now); err != nil {
			payload, _ := json.Marshal(e)
			a.dead = append(a.dead, schemas.DeadLetter{Stage: "validate", Reason: err.Error(),
				Payload: payload, EventID: strings.Clone(e.EventID), At: e.TS})
			continue
		}
		// The row's strings point into the message's data, which the
		// buffer keeps alive until the flush.
		row := schemas.ArchiveEventOf(e)
		hour := row.TS.Truncate(time.Hour)
		a.rows[hour] = append(a.rows[hour], row)
		a.nrows++
		if _, ok := a.closed[hour]; !ok {
			a.hours[hour] = struct{}{}
		}
	}
	clear(a.scratch[start:])
	a.scratch = a.scratch[:start]
}

// deadBeacon dead-letters a whole message.
func (a *archiver) deadBeacon(m *pb.ReceivedMessage, err error) {
	data := m.GetMessage().GetData()
	if len(data) > schemas.MaxDeadLetterPayload {
		data = data[:schemas.MaxDeadLetterPayload]
	}
	var at time.Time
	if ms, perr := strconv.ParseInt(m.GetMessage().GetAttributes()[TSAttribute], 10, 64); perr == nil && ms > 0 {
		at = time.UnixMilli(ms).UTC()
	}
	a.dead = append(a.dead, schemas.DeadLetter{Stage: "decode", Reason: err.Error(), Payload: slices.Clone(data), At: at})
}

// closeDue closes every known open hour whose end plus grace has passed:
// flush first (the hour's buffered rows go to its own folder), then the
// marker.
func (a *archiver) closeDue(ctx context.Context) error {
	now := a.cfg.Now()
	var due []time.Time
	for h := range a.hours {
		if !now.Before(closeTime(h, a.cfg.Grace)) {
			due = append(due, h)
		}
	}
	if len(due) == 0 {
		return nil
	}
	if err := a.flush(ctx); err != nil {
		return err
	}
	slices.SortFunc(due, func(x, y time.Time) int { return x.Compare(y) })
	for _, h := range due {
		var wrote bool
		err := a.retryWrite(ctx, "archive: close hour "+schemas.HourDir(h), func(ctx context.Context) error {
			var err error
			wrote, err = closeHour(ctx, a.root, h, a.cfg.WriterID, now)
			return err
		})
		if err != nil {
			return fmt.Errorf("archive: close hour %s: %w", schemas.HourDir(h), err)
		}
		if wrote {
			a.stats.Closed++
			a.log.Info("archive: hour closed", "hour", schemas.HourDir(h))
		}
		delete(a.hours, h)
		a.closed[h] = struct{}{}
	}
	return nil
}

// closeTime is when an event hour closes.
func closeTime(hour time.Time, grace time.Duration) time.Time {
	return hour.Add(time.Hour + grace)
}

// flush makes every buffered row and dead letter durable, then acks the
// messages they came from.
func (a *archiver) flush(ctx context.Context) error {
	a.lastFlush = time.Now()
	if len(a.acks) == 0 && a.nrows == 0 && len(a.dead) == 0 {
		return nil
	}
	hours := make([]time.Time, 0, len(a.rows))
	for h := range a.rows {
		hours = append(hours, h)
	}
	slices.SortFunc(hours, func(x, y time.Time) int { return x.Compare(y) })
	for _, h := range hours {
		rows := a.rows[h]
		var late bool
		err := a.retryWrite(ctx, "archive: write hour "+schemas.HourDir(h), func(ctx context.Context) error {
			var err error
			late, err = writeHourFile(ctx, a.root, h, a.nextName("parquet"), rows)
			return err
		})
		if err != nil {
			return fmt.Errorf("archive: flush hour %s: %w", schemas.HourDir(h), err)
		}
		a.stats.Files++
		a.stats.Events += int64(len(rows))
		if late {
			a.stats.LateEvents += int64(len(rows))
		}
		clear(rows) // drop the references into message data
		delete(a.rows, h)
	}
	a.nrows = 0
	if len(a.dead) > 0 {
		if err := a.retryWrite(ctx, "archive: write dead letters", func(ctx context.Context) error {
			return writeDeadLetters(ctx, a.root, a.nextName("ndjson"), a.dead)
		}); err != nil {
			return fmt.Errorf("archive: flush dead letters: %w", err)
		}
		a.stats.DeadLetters += int64(len(a.dead))
		clear(a.dead)
		a.dead = a.dead[:0]
	}
	if a.cfg.beforeAck != nil {
		if err := a.cfg.beforeAck(slices.Clone(a.acks)); err != nil {
			return fmt.Errorf("archive: before ack: %w", err)
		}
	}
	a.ack(ctx)
	if a.cfg.Progress != nil {
		a.cfg.Progress(a.stats)
	}
	return nil
}

// ack acknowledges the pending messages. A failure is logged and counted, not
// returned: the messages are redelivered after their ack deadline, and
// archived again (a duplicate, never a loss).
func (a *archiver) ack(ctx context.Context) {
	ids := a.acks
	for len(ids) > 0 {
		n := min(len(ids), maxAckIDsPerRequest)
		err := a.subs.Acknowledge(ctx, &pb.AcknowledgeRequest{Subscription: a.cfg.Subscription, AckIds: ids[:n]})
		if err != nil {
			a.stats.AckErrors += int64(n)
			a.log.Warn("archive: ack failed; the messages will be redelivered and archived again", "messages", n, "err", err)
		} else {
			a.stats.Acked += int64(n)
		}
		ids = ids[n:]
	}
	clear(a.acks)
	a.acks = a.acks[:0]
}

// retryWrite runs a file write (a local file, or an upload to Cloud
// Storage) until it works, waiting out transient failures (a storage
// outage) with backoff; nothing is acked meanwhile. Other errors (a full
// disk, a permission) are returned.
func (a *archiver) retryWrite(ctx context.Context, what string, write func(context.Context) error) error {
	_, err := retry.Policy{Max: maxErrorWait, Log: a.log, What: what}.Do(ctx, write)
	return err
}

// backoff is the pull loop's capped exponential wait.
type backoff struct {
	failures int
	wait     time.Duration
}

func (b *backoff) next() time.Duration {
	b.failures++
	if b.wait == 0 {
		b.wait = 100 * time.Millisecond
	} else {
		b.wait = min(2*b.wait, maxErrorWait)
	}
	return b.wait
}

// nextName is this archiver's next file name.
func (a *archiver) nextName(ext string) string {
	a.seq++
	return fmt.Sprintf("part-%s-%06d.%s", a.cfg.WriterID, a.seq, ext)
}
