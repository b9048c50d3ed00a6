package source

import (
	"context"
	"fmt"
	"strconv"
	"time"

	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/sdf"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/log"

	"github.com/topk-dev/topk/internal/recoverylog"
	"github.com/topk-dev/topk/internal/stagemetrics"
)

// RecoveryLog configures the Pub/Sub reader's recovery log
// (internal/recoverylog): every pulled message is written to a durable log
// before it is acknowledged, and a new run first replays the messages
// published in the Horizon before it started, so that a job killed at any
// moment and started again rebuilds its windows without losing or
// double-counting an acknowledged message.
type RecoveryLog struct {
	recoverylog.Config
	// Horizon is how much publish time before its start a run replays: the
	// longest window plus the allowed lateness and a bucket.
	Horizon time.Duration
	// Run identifies the job run; "" : Read makes one from the clock.
	Run string
	// Start is the run's start, the end of what it replays; zero: the
	// clock at Read.
	Start time.Time
}

// Enabled reports whether the reader logs.
func (r RecoveryLog) Enabled() bool { return r.Config.Enabled() }

// replayRows bounds the rows one replay read takes from each of the log's 16
// key ranges (recoverylog.Log.Next): the replay's memory.
const replayRows = 2000

var (
	pubsubLogged        = beam.NewCounter("topk.source", "pubsub_logged")
	pubsubLogErrors     = beam.NewCounter("topk.source", "pubsub_log_errors")
	pubsubReplayed      = beam.NewCounter("topk.source", "pubsub_replayed")
	pubsubAlreadyLogged = beam.NewCounter("topk.source", "pubsub_already_logged")
)

// setupLog connects the recovery log when one is configured.
func (fn *pullFn) setupLog(ctx context.Context) error {
	if !fn.Log.Enabled() {
		return nil
	}
	l, err := recoverylog.Open(ctx, fn.Log)
	if err != nil {
		return err
	}
	fn.log = l
	return nil
}

// beforeLogged readies the recovery log for a ProcessElement call: it
// creates the table when this worker has not yet, and on shard 0 replays the
// log until done. A non-nil continuation ends the call there. A Bigtable
// failure is retried after errorResume, never returned: nothing is
// acknowledged that is not logged.
func (fn *pullFn) beforeLogged(ctx context.Context, we *pullEstimator, rt *streamTracker, emit func(beam.EventTime, []byte)) sdf.ProcessContinuation {
	if !fn.logReady {
		if err := fn.log.Ensure(ctx); err != nil {
			pubsubLogErrors.Inc(ctx, 1)
			log.Warnf(ctx, "recovery log: %v (retrying in %s)", err, errorResume)
			return sdf.ResumeProcessingIn(errorResume)
		}
		fn.logReady = true
	}
	if r := rt.GetRestriction().(streamRestriction); r.Shard == 0 && !r.Replayed {
		return fn.replay(ctx, we, rt, emit)
	}
	return nil
}

// logAndEmit handles one pulled batch: messages the log already holds from
// this run (a redelivery) or from an earlier run inside the replayed range
// (the replay emits them) are only acknowledged; the others are claimed,
// logged, emitted and acknowledged. On an error nothing is emitted and every
// message is handed back. stop: a claim was refused (the restriction was
// split away); the unclaimed messages were handed back. The pulled messages
// are acknowledged at once, not through the residual.
func (fn *pullFn) logAndEmit(ctx context.Context, we *pullEstimator, rt *streamTracker, msgs []*pb.ReceivedMessage, emit func(beam.EventTime, []byte)) (n int, stop bool, err error) {
	recs := make([]recoverylog.Record, len(msgs))
	for i, m := range msgs {
		ts, ok := messageTime(m.GetMessage())
		if !ok {
			pubsubBadTS.Inc(ctx, 1)
		}
		recs[i] = recoverylog.Record{
			ID:      m.GetMessage().GetMessageId(),
			Publish: m.GetMessage().GetPublishTime().AsTime().UnixMilli(),
			TS:      int64(ts),
			Data:    m.GetMessage().GetData(),
			Beacon:  m.GetMessage().GetAttributes()[BeaconAttribute],
		}
	}
	seen, err := fn.log.Seen(ctx, recs)
	if err != nil {
		fn.nack(ctx, msgs)
		return 0, false, fmt.Errorf("recovery log: %w", err)
	}
	var fresh []recoverylog.Record
	var freshMsgs []*pb.ReceivedMessage
	var done []string // ack ids of messages already emitted
	batch := map[string]bool{}
	for i, r := range recs {
		lg, logged := seen[i]
		// Emitted by this run, or replayed by it; or a second copy (same
		// message, or same beacon) in this very batch.
		if (logged && (lg.Run == fn.Run || (lg.Publish >= fn.ReplayFrom && lg.Publish < fn.ReplayTo))) ||
			batch["m"+r.ID] || (r.Beacon != "" && batch["b"+r.Beacon]) {
			done = append(done, msgs[i].GetAckId())
			continue
		}
		if !rt.claimNext() {
			fn.nack(ctx, msgs[i:])
			stop = true
			break
		}
		batch["m"+r.ID] = true
		if r.Beacon != "" {
			batch["b"+r.Beacon] = true
		}
		fresh = append(fresh, r)
		freshMsgs = append(freshMsgs, msgs[i])
	}
	if len(done) > 0 {
		pubsubAlreadyLogged.Inc(ctx, int64(len(done)))
		stagemetrics.RecoveryLog("already_logged", len(done))
		fn.ack(ctx, done)
	}
	if len(fresh) == 0 {
		return 0, stop, nil
	}
	if err := fn.log.Append(ctx, fn.Run, fresh); err != nil {
		fn.nack(ctx, freshMsgs)
		return 0, false, fmt.Errorf("recovery log: %w", err)
	}
	acks := make([]string, len(freshMsgs))
	for i, r := range fresh {
		emit(fn.clamp(we, mtime.Time(r.TS)), r.Data)
		acks[i] = freshMsgs[i].GetAckId()
	}
	pubsubLogged.Inc(ctx, int64(len(fresh)))
	stagemetrics.RecoveryLog("logged", len(fresh))
	pubsubMessages.Inc(ctx, int64(len(fresh)))
	fn.ack(ctx, acks)
	return len(fresh), stop, nil
}

// replay emits the log's messages published in [ReplayFrom, ReplayTo) that
// an earlier run wrote, in publish-time order, one chunk at a time, and
// checkpoints after BundleTime; the restriction records the position.
func (fn *pullFn) replay(ctx context.Context, we *pullEstimator, rt *streamTracker, emit func(beam.EventTime, []byte)) sdf.ProcessContinuation {
	start := time.Now()
	r := rt.GetRestriction().(streamRestriction)
	at, after := r.ReplayAt, r.ReplayAfter
	if at == 0 {
		at = fn.ReplayFrom
		log.Infof(ctx, "recovery log: run %s replays messages published %s .. %s", fn.Run,
			time.UnixMilli(fn.ReplayFrom).UTC().Format(time.RFC3339), time.UnixMilli(fn.ReplayTo).UTC().Format(time.RFC3339))
	}
	for at < fn.ReplayTo {
		recs, next, err := fn.log.Next(ctx, at, fn.ReplayTo, fn.Run, replayRows)
		if err != nil {
			pubsubLogErrors.Inc(ctx, 1)
			log.Warnf(ctx, "recovery log: %v (retrying in %s)", err, errorResume)
			return sdf.ResumeProcessingIn(errorResume)
		}
		emitted, stopped := 0, false
		for _, rec := range recs {
			if rec.Publish == at && after != "" && rec.ID <= after {
				continue // emitted before a checkpoint
			}
			if !rt.claimNext() {
				stopped = true
				break
			}
			emit(fn.clamp(we, mtime.Time(rec.TS)), rec.Data)
			emitted++
			at, after = rec.Publish, rec.ID
			rt.setReplay(at, after, 1, false)
		}
		pubsubReplayed.Inc(ctx, int64(emitted))
		stagemetrics.RecoveryLog("replayed", emitted)
		if stopped {
			return sdf.StopProcessing()
		}
		at, after = next, ""
		rt.setReplay(at, after, 0, false)
		if time.Since(start) >= fn.BundleTime {
			return sdf.ResumeProcessingIn(0)
		}
	}
	rt.setReplay(at, "", 0, true)
	log.Infof(ctx, "recovery log: run %s replay done: %d messages", fn.Run, rt.GetRestriction().(streamRestriction).ReplayCount)
	return sdf.ResumeProcessingIn(0)
}

// clamp never emits behind the watermark already reported (see
// ProcessElement).
func (fn *pullFn) clamp(we *pullEstimator, ts beam.EventTime) beam.EventTime {
	if wm := mtime.Time(we.wm); ts < wm {
		return wm
	}
	return ts
}

// newRun is a run id: the start's Unix ns, unique per submission.
func newRun(start time.Time) string { return strconv.FormatInt(start.UnixNano(), 36) }

// validateLog reports a recovery log configuration that cannot work.
func (r RecoveryLog) validate() error {
	if !r.Enabled() {
		return nil
	}
	if r.Horizon <= 0 {
		return fmt.Errorf("%w: recovery log: horizon %s is not positive", ErrBadSpec, r.Horizon)
	}
	return nil
}
