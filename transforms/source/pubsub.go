package source

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/sdf"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/log"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/topk-dev/topk/internal/recoverylog"
	"github.com/topk-dev/topk/internal/retry"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/topk-dev/topk/internal/stagemetrics"
)

func init() {
	register.DoFn5x2[context.Context, *pullEstimator, *streamTracker, []byte,
		func(beam.EventTime, []byte), sdf.ProcessContinuation, error](&pullFn{})
	register.Emitter2[beam.EventTime, []byte]()
}

// TSAttribute is the message attribute holding the beacon's earliest event
// time in Unix milliseconds (decimal). Without it a message is stamped with
// its publish time.
const TSAttribute = "ts"

// BeaconAttribute is the message attribute holding the beacon's id (ingest
// sets it): the recovery log's idempotency key (pubsublog.go).
const BeaconAttribute = "beacon_id"

const (
	// maxAckIDsPerRequest keeps Acknowledge requests well under Pub/Sub's
	// 512 KB request limit (ack ids are up to ~200 bytes).
	maxAckIDsPerRequest = 1000
	// idleResume is how long an idle reader waits before pulling again
	// (after an empty Pull, which may itself have waited: see pull).
	idleResume = 200 * time.Millisecond
	// errorResume is the wait after a failed Pull.
	errorResume = time.Second
	// maxPendingAcks bounds the ack ids one residual carries (~200 bytes
	// each on Google Cloud).
	maxPendingAcks = 20_000
	// minAckDeadline is Pub/Sub's shortest ack deadline.
	minAckDeadline = 10 * time.Second
	// minPullWait is the shortest deadline of a long-polling Pull.
	minPullWait = time.Second
	// pullTimeout bounds a return-immediately Pull.
	pullTimeout = 30 * time.Second
)

var (
	pubsubMessages   = beam.NewCounter("topk.source", "pubsub_messages")
	pubsubPulls      = beam.NewCounter("topk.source", "pubsub_pulls")
	pubsubEmptyPulls = beam.NewCounter("topk.source", "pubsub_empty_pulls")
	pubsubPullErrors = beam.NewCounter("topk.source", "pubsub_pull_errors")
	pubsubAcked      = beam.NewCounter("topk.source", "pubsub_acked")
	pubsubAckErrors  = beam.NewCounter("topk.source", "pubsub_ack_errors")
	pubsubBadTS      = beam.NewCounter("topk.source", "pubsub_bad_ts_attribute")
)

// pullFn reads a Pub/Sub subscription with unary Pull: an unbounded
// splittable DoFn over an Impulse, one restriction per reader.
type pullFn struct {
	Subscription string
	// Endpoint is an emulator or fake (host:port, no credentials); "" is
	// Google Cloud with default credentials.
	Endpoint    string
	MaxMessages int32
	BundleTime  time.Duration
	// Bucket: calls end where a checkpoint can close a bucket (callEnd).
	Bucket   time.Duration
	IdleStop time.Duration
	Slack    time.Duration
	Readers  int
	// Log, when enabled, is the recovery log (pubsublog.go); Run is this
	// run's id and [ReplayFrom, ReplayTo) the publish times (Unix ms) shard
	// 0 replays from it before reading the subscription.
	Log                  recoverylog.Config
	Run                  string
	ReplayFrom, ReplayTo int64

	conn        *grpc.ClientConn
	sub         *vkit.SubscriptionAdminClient
	ackDeadline time.Duration // the subscription's (Setup)
	log         *recoverylog.Log
	logReady    bool // the log's table exists
}

func (fn *pullFn) Setup(ctx context.Context) error {
	var opts []option.ClientOption
	if fn.Endpoint != "" {
		conn, err := grpc.NewClient(fn.Endpoint,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32)))
		if err != nil {
			return fmt.Errorf("pubsub dial %s: %w", fn.Endpoint, err)
		}
		fn.conn = conn
		opts = append(opts, option.WithGRPCConn(conn), option.WithoutAuthentication())
	}
	sub, err := vkit.NewSubscriptionAdminClient(ctx, opts...)
	if err != nil {
		if fn.conn != nil {
			fn.conn.Close()
			fn.conn = nil
		}
		return fmt.Errorf("pubsub client: %w", err)
	}
	fn.sub = sub
	// Read to bound calls that ack late (see ProcessElement); a reader
	// allowed to pull but not to read the subscription's settings assumes
	// Pub/Sub's shortest deadline.
	fn.ackDeadline = minAckDeadline
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if s, err := sub.GetSubscription(gctx, &pb.GetSubscriptionRequest{Subscription: fn.Subscription}); err == nil && s.GetAckDeadlineSeconds() > 0 {
		fn.ackDeadline = time.Duration(s.GetAckDeadlineSeconds()) * time.Second
	}
	cancel()
	return fn.setupLog(ctx)
}

func (fn *pullFn) Teardown() error {
	var errs []error
	if fn.log != nil {
		errs = append(errs, fn.log.Close())
		fn.log = nil
	}
	if fn.sub != nil {
		errs = append(errs, fn.sub.Close())
		fn.sub = nil
	}
	if fn.conn != nil {
		errs = append(errs, fn.conn.Close())
		fn.conn = nil
	}
	return errors.Join(errs...)
}

func (fn *pullFn) CreateInitialRestriction(_ []byte) streamRestriction {
	return streamRestriction{End: unbounded}
}

// SplitRestriction makes one restriction per reader.
func (fn *pullFn) SplitRestriction(_ []byte, r streamRestriction) []streamRestriction {
	out := make([]streamRestriction, max(fn.Readers, 1))
	for i := range out {
		out[i] = r
		out[i].Shard = int64(i)
	}
	return out
}

// RestrictionSize is unknown for a subscription: every reader weighs the same.
func (fn *pullFn) RestrictionSize(_ []byte, _ streamRestriction) float64 { return 1 }

func (fn *pullFn) CreateTracker(r streamRestriction) *streamTracker { return newStreamTracker(r) }

// TruncateRestriction (drain) keeps only the pending acks: the call that
// processes it acks them and stops.
func (fn *pullFn) TruncateRestriction(rt *streamTracker, _ []byte) streamRestriction {
	r := rt.GetRestriction().(streamRestriction)
	r.End = r.Next
	return r
}

func (fn *pullFn) InitialWatermarkEstimatorState(et beam.EventTime, _ streamRestriction, _ []byte) int64 {
	return int64(et)
}

func (fn *pullFn) CreateWatermarkEstimator(state int64) *pullEstimator {
	return &pullEstimator{wm: state, slack: fn.Slack.Milliseconds(), minTS: math.MaxInt64}
}

func (fn *pullFn) WatermarkEstimatorState(e *pullEstimator) int64 {
	e.advance()
	return e.wm
}

// ProcessElement acks what the previous bundle emitted, then pulls and emits
// until the call's end (callEnd: BundleTime when its checkpoint may close a
// bucket, else when one can), until it is full (maxCallBytes after
// BundleTime) or maxPendingAcks messages were emitted (checkpoint now, so
// that output and the watermark move on), a Pull comes back empty
// (checkpoint and resume after idleResume; a call that emitted and cannot
// close a bucket yet pulls again after idleResume instead), or, with
// IdleStop, nothing has arrived for that long (stop).
func (fn *pullFn) ProcessElement(ctx context.Context, we *pullEstimator, rt *streamTracker, _ []byte, emit func(beam.EventTime, []byte)) (sdf.ProcessContinuation, error) {
	// The runner runs a residual only once the bundle that returned it has
	// committed: the messages it carries ack ids for are safely downstream.
	if acks := rt.takeAcks(); len(acks) > 0 {
		fn.ack(ctx, acks)
	}
	if rt.IsDone() { // truncated on drain
		return sdf.StopProcessing(), nil
	}
	handle := fn.emitBatch
	if fn.log != nil {
		// The recovery log (pubsublog.go): its table first, then shard 0
		// replays it, then every batch is logged before it is emitted.
		if cont := fn.beforeLogged(ctx, we, rt, emit); cont != nil {
			return cont, nil
		}
		handle = fn.logAndEmit
	}
	start := time.Now()
	end, due := callEnd(start, we.wm, fn.Bucket, fn.Slack, fn.BundleTime)
	if limit := start.Add(fn.ackDeadline / 3); !due && fn.log == nil && limit.Before(end) {
		// Without the recovery log a call's messages are acked when the
		// next call starts: a long call ends well within their deadline.
		end = limit
	}
	last := rt.GetRestriction().(streamRestriction).Mark
	if last == 0 {
		last = start.UnixNano()
		rt.setMark(last)
	}
	emitted, bytes := 0, 0
	for {
		resp, err := fn.pull(ctx, end)
		now := time.Now()
		pubsubPulls.Inc(ctx, 1)
		if err != nil {
			return fn.pullFailed(ctx, err, emitted, now, last)
		}
		msgs := resp.GetReceivedMessages()
		if len(msgs) == 0 {
			pubsubEmptyPulls.Inc(ctx, 1)
			if emitted > 0 && !due {
				// A call that cannot close a bucket before its end waits
				// for more rather than checkpointing (callEnd).
				if wait := min(idleResume, time.Until(end)); wait > 0 {
					if err := retry.Sleep(ctx, wait); err != nil {
						return nil, fmt.Errorf("pubsub pull %s: %w", fn.Subscription, err)
					}
					continue
				}
				return sdf.ResumeProcessingIn(0), nil
			}
			we.idle(now)
			// Only a call that emitted nothing may stop: the ack ids of
			// emitted messages travel with the residual.
			if emitted == 0 && fn.IdleStop > 0 && now.Sub(time.Unix(0, last)) >= fn.IdleStop {
				return sdf.StopProcessing(), nil
			}
			return sdf.ResumeProcessingIn(idleResume), nil
		}
		n, stop, err := handle(ctx, we, rt, msgs, emit)
		if err != nil {
			pubsubLogErrors.Inc(ctx, 1)
			log.Warnf(ctx, "%v (%d messages handed back, retrying in %s)", err, len(msgs), errorResume)
			return sdf.ResumeProcessingIn(errorResume), nil
		}
		emitted += n
		for _, m := range msgs { // pulled, whether emitted or not: about
			bytes += len(m.GetMessage().GetData())
		}
		stagemetrics.SourceMessages("pubsub", n)
		if stop {
			return sdf.StopProcessing(), nil
		}
		rt.setMark(now.UnixNano())
		last = now.UnixNano()
		// Checkpoint at the call's end (callEnd), when full, or earlier
		// when the ack ids the residual must carry grow large (many small
		// messages).
		if !now.Before(end) || full(start, now, bytes, fn.BundleTime) || emitted >= maxPendingAcks {
			return sdf.ResumeProcessingIn(0), nil
		}
	}
}

// emitBatch claims and emits a pulled batch; the ack ids travel with the
// residual (see the package doc). stop: a claim was refused (split away by
// a runner checkpoint), and the rest was handed back.
func (fn *pullFn) emitBatch(ctx context.Context, we *pullEstimator, rt *streamTracker, msgs []*pb.ReceivedMessage, emit func(beam.EventTime, []byte)) (n int, stop bool, err error) {
	for i, m := range msgs {
		if !rt.claimMessage(m.GetAckId()) {
			fn.nack(ctx, msgs[i:])
			pubsubMessages.Inc(ctx, int64(n))
			return n, true, nil
		}
		ts, ok := messageTime(m.GetMessage())
		if !ok {
			pubsubBadTS.Inc(ctx, 1)
		}
		// Never emit behind the watermark already reported: a beacon
		// stamped earlier carries the reader's clock instead, so the
		// pre-aggregator judges (and counts) its events' lateness rather
		// than the runner dropping them silently.
		emit(fn.clamp(we, ts), m.GetMessage().GetData())
		n++
	}
	pubsubMessages.Inc(ctx, int64(n))
	return n, false, nil
}

// pullFailed decides what a failed Pull does: a configuration error (no
// such subscription, no permission) or a cancelled context fails the job, as
// does an error lasting past idle_stop; anything else resumes after
// errorResume.
func (fn *pullFn) pullFailed(ctx context.Context, err error, emitted int, now time.Time, last int64) (sdf.ProcessContinuation, error) {
	if ctx.Err() != nil {
		return nil, fmt.Errorf("pubsub pull %s: %w", fn.Subscription, ctx.Err())
	}
	switch status.Code(err) {
	case codes.NotFound, codes.PermissionDenied, codes.InvalidArgument, codes.Unauthenticated:
		return nil, fmt.Errorf("pubsub pull %s: %w", fn.Subscription, err)
	}
	pubsubPullErrors.Inc(ctx, 1)
	if emitted == 0 && fn.IdleStop > 0 && now.Sub(time.Unix(0, last)) >= fn.IdleStop {
		return nil, fmt.Errorf("pubsub pull %s: nothing received for %s, last error: %w", fn.Subscription, fn.IdleStop, err)
	}
	log.Warnf(ctx, "pubsub pull %s: %v (retrying in %s)", fn.Subscription, err, errorResume)
	return sdf.ResumeProcessingIn(errorResume), nil
}

// pull makes one Pull call. Against an emulator or fake (Endpoint set) it
// asks the server to return at once, even with nothing to return: the
// official emulator otherwise holds an empty Pull until the client's
// deadline, and a Pull cut short by a client deadline after the server
// handed it messages leaves them out until their ack deadline. Google Cloud
// discourages return-immediately, so there it long-polls, bounded so that the
// call ends near end (callEnd; emitted messages wait for the next call to
// be acked); a deadline that passes is an empty pull, not an error.
func (fn *pullFn) pull(ctx context.Context, end time.Time) (*pb.PullResponse, error) {
	immediate := fn.Endpoint != ""
	wait := pullTimeout
	if !immediate {
		// Never longer than BundleTime: an idle subscription is noticed
		// (and the watermark idles forward) as soon as it was before calls
		// followed buckets.
		wait = max(min(time.Until(end), fn.BundleTime), minPullWait)
	}
	pctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	resp, err := fn.sub.Pull(pctx, &pb.PullRequest{
		Subscription:      fn.Subscription,
		MaxMessages:       fn.MaxMessages,
		ReturnImmediately: immediate,
	})
	if err != nil && !immediate && ctx.Err() == nil && pctx.Err() != nil {
		return &pb.PullResponse{}, nil
	}
	return resp, err
}

// messageTime is the message's event time: the "ts" attribute (Unix ms), or
// its publish time when the attribute is absent or unparsable (ok = false
// for unparsable).
func messageTime(m *pb.PubsubMessage) (beam.EventTime, bool) {
	if v, has := m.GetAttributes()[TSAttribute]; has {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err == nil && ms >= int64(mtime.MinTimestamp) && ms <= int64(mtime.MaxTimestamp) {
			return mtime.Time(ms), true
		}
		return mtime.FromTime(m.GetPublishTime().AsTime()), false
	}
	return mtime.FromTime(m.GetPublishTime().AsTime()), true
}

// ack acknowledges ids. A failure is counted and logged, not returned: the
// messages are then redelivered after their ack deadline (a duplicate, never
// a loss), and failing the bundle would fail the whole job on Prism.
func (fn *pullFn) ack(ctx context.Context, ids []string) {
	for len(ids) > 0 {
		n := min(len(ids), maxAckIDsPerRequest)
		err := fn.sub.Acknowledge(ctx, &pb.AcknowledgeRequest{Subscription: fn.Subscription, AckIds: ids[:n]})
		if err != nil {
			pubsubAckErrors.Inc(ctx, int64(n))
			log.Warnf(ctx, "pubsub ack %d messages on %s: %v (they will be redelivered)", n, fn.Subscription, err)
		} else {
			pubsubAcked.Inc(ctx, int64(n))
		}
		ids = ids[n:]
	}
}

// nack hands messages back for immediate redelivery (ack deadline 0).
func (fn *pullFn) nack(ctx context.Context, msgs []*pb.ReceivedMessage) {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.GetAckId()
	}
	for len(ids) > 0 {
		n := min(len(ids), maxAckIDsPerRequest)
		err := fn.sub.ModifyAckDeadline(ctx, &pb.ModifyAckDeadlineRequest{Subscription: fn.Subscription, AckIds: ids[:n]})
		if err != nil {
			log.Warnf(ctx, "pubsub nack %d messages on %s: %v", n, fn.Subscription, err)
		}
		ids = ids[n:]
	}
}

// pullEstimator is the Pub/Sub reader's watermark estimator. Its state is the
// watermark in Unix ms; it never moves back. The SDK reports it to the runner
// at each checkpoint, so every estimate covers one call of ProcessElement
// (one bundle):
//
//   - messages were pulled: the minimum event time emitted in the call, minus
//     Slack. The reader drains the subscription's backlog roughly oldest
//     first, so the oldest message of the latest batch bounds what is still
//     to come; Slack absorbs the disorder between batches.
//   - nothing was pulled: the backlog is empty, so nothing older than now is
//     waiting; the watermark idles forward to wall-clock now minus Slack, so
//     windows keep closing when traffic stops. A message stamped earlier
//     that arrives later is late by that much (downstream's allowed
//     lateness, and the exact path, cover it).
//
// Messages and an empty pull in one call count as messages only: the call's
// own output must not fall behind the watermark it reports.
type pullEstimator struct {
	wm     int64 // ms, monotone
	slack  int64 // ms
	minTS  int64 // smallest event time observed in this call, ms; MaxInt64: none
	idleAt int64 // wall clock of an empty pull in this call, ms; 0: none
}

// ObserveTimestamp is called by the SDK for every emitted element.
func (e *pullEstimator) ObserveTimestamp(t time.Time) {
	if ms := t.UnixMilli(); ms < e.minTS {
		e.minTS = ms
	}
}

func (e *pullEstimator) idle(now time.Time) { e.idleAt = now.UnixMilli() }

func (e *pullEstimator) advance() {
	var cand int64
	switch {
	case e.minTS != math.MaxInt64:
		cand = e.minTS - e.slack
	case e.idleAt != 0:
		cand = e.idleAt - e.slack
	default:
		return
	}
	if cand > e.wm {
		e.wm = cand
	}
}

// CurrentWatermark is the estimate described on the type.
func (e *pullEstimator) CurrentWatermark() time.Time {
	e.advance()
	return time.UnixMilli(e.wm)
}
