// Package source reads the fast path's input (DESIGN.md section 2, step 1):
// Read adds a source, chosen by a Spec parsed from the --source flag, and
// returns a PCollection<[]byte> of binary beacons (schemas.AppendBeacon
// format), each timestamped with an event time, and a
// PCollection<schemas.DeadLetter> of input the source itself could not parse.
// Beacons are passed on undecoded: decoding and validation are downstream.
//
// # Sources
//
// pubsub:projects/P/subscriptions/S — unbounded. One message is one beacon,
// passed through unchanged. On Dataflow (Options.Runner "dataflow") this is
// Dataflow's native read (the transform Beam's pubsubio.Read adds; see
// dataflowRead) with timestamp attribute "ts" and id attribute
// "beacon_id" (Dataflow delivers a beacon published twice once). On every other
// runner (Prism, Flink, any portable job server) it is this package's
// splittable DoFn, modelled on Beam's io/natsio: an unbounded restriction per
// reader, unary Pull (not StreamingPull, which the in-process fake serves at
// ~90 msg/s) of up to Options.MaxMessages messages, each element stamped with
// the message's "ts" attribute (Unix ms: the earliest event time in the
// beacon) or, without it, its publish time, but never earlier than the
// watermark the reader has already reported (a late beacon carries the
// reader's clock, so the pre-aggregator counts its late events in
// late_dropped instead of the runner dropping them unseen). A call pulls until
// its end and then self-checkpoints (ResumeProcessingIn(0)), because output
// and the watermark reach the runner only at a checkpoint: Options.BundleTime
// when the checkpoint may move the watermark past a bucket boundary, else
// until it can (callEnd, calls.go); an empty pull checkpoints with a short
// delay, except in a call that emitted and cannot close a bucket yet. Option
// idle_stop=D returns sdf.StopProcessing after D without a message, which is
// how a finite run on Prism ends cleanly (windows and timers flush).
//
// Watermark (see pullEstimator): the minimum event time pulled in the last
// bundle minus slack (default 2 s), never moving back; when a pull comes back
// empty it idles forward to wall-clock now minus slack, so windows keep
// firing when traffic stops.
//
// Delivery semantics: a message is acknowledged when the bundle that emitted
// it has committed. The Go SDK loses bundle finalization callbacks after the
// first bundle of a reused plan (PLATFORM.md), so they are not used; instead
// the ack ids of a bundle's messages travel in the residual restriction of
// its checkpoint, and the resumed call acks them before it pulls again. A
// runner starts a residual only after the bundle that returned it committed
// (Prism fails the job on a bundle failure, and never retries it), so:
//
//   - a bundle that fails leaves its messages unacked: they are redelivered
//     after the subscription's ack deadline, to this or the next run
//     (at-least-once, never a silent loss);
//   - a message can be delivered twice: when its ack is late (the residual
//     resumes after the ack deadline: keep it at 60 s), when an Acknowledge
//     call fails (logged and counted, not fatal), or when the job stops after
//     emitting but before the next resume (a job cancelled mid-bundle);
//   - on Flink, a restore from a checkpoint taken before the ack can replay
//     nothing for messages acked since: those are lost to the fast path.
//
// That is without a recovery log. Acknowledged is not counted: on Prism
// "downstream" is window state in the process, so a kill -9 loses every
// acknowledged event its windows still covered. With Options.RecoveryLog
// (the streaming command's default, --recovery_log) the reader writes each
// pulled batch to a durable log in Bigtable (internal/recoverylog) and
// acknowledges it as soon as the write returns; restriction shard 0 of a new
// run first replays, in publish-time order, the messages an earlier run
// logged in the Horizon before this run started (the longest window plus
// the allowed lateness and a bucket), then reads the subscription like the
// others. A pulled message the log already holds is only acknowledged: it
// was emitted by this run (a lost acknowledgement) or is replayed (logged by
// the crashed run, which died before its acknowledgement). So a restart
// after a crash at any moment counts every message of the horizon exactly
// once, and the windows are rebuilt by the same pipeline that built them
// (pubsublog.go; internal/faults TestFastPathKilled kills the job with
// SIGKILL and checks the lists against a recount). While the log cannot be
// written, nothing is acknowledged or emitted: the batch is handed back and
// the reader retries. Replay output is older than the live readers'; the
// stage's watermark is the minimum over the readers, so it waits for the
// replay, and the publisher skips list versions older than what Redis
// already serves, so readers see the pre-crash lists until the replay
// catches up.
//
// Duplicates and losses are the exact path's to repair: it reads the archive
// subscription, deduplicates by event_id and recounts closed hours. On
// Dataflow, the native read's own exactly-once semantics and the runner's
// durable state apply, and the recovery log is refused.
//
// file:PATH — NDJSON events (gzip when PATH ends in ".gz"), read in order
// by one splittable DoFn (fileFn) whose restriction is the reader's cursor;
// consecutive valid lines are grouped into beacons of up to `beacon` events
// (default 500; fewer when the lines would exceed the beacon size limit).
// A malformed line goes to the dead letters (stage "source", the line
// number and error as reason, the line as payload) and the beacon
// continues. A beacon's element timestamp is the data clock as it stood
// when the beacon's first event arrived: the largest event ts of all the
// beacons before it (the first beacon: its own earliest ts). It is
// monotone, so downstream can judge an event's lateness as its own ts
// against its element's timestamp, and a beacon spanning a long stretch of
// a sparse file does not make its own first events late. Events are kept
// as they are; an event without ts does not move the clock (validation
// rejects it downstream). The read checkpoints every Options.BundleTime,
// and the watermark follows the data clock minus `slack` (default
// DefaultFileSlack, the fast path's allowed lateness plus a bucket, which
// the fast path keeps it above): windows fire as the replay goes, as they
// do live, and the job's state holds what its windows cover, not the
// whole file's span (see fileFn). The job ends when the file is read and
// every window has flushed.
//
// synthetic:rate=R,duration=D,... — unbounded: a seeded generator (see
// Generator) of beacons at R events/s for D, Zipf over N items, for
// benchmarks and the local run. Element timestamp and event time are the wall
// clock when the beacon is built; the watermark is the wall clock. A call
// ends at the next bucket boundary (Options.Bucket; callEnd), or once it
// has run BundleTime and holds maxCallBytes.
//
// Wall clock: the generator is the only source that stamps data with it.
// The Pub/Sub reader reads it only for processing-time decisions (bundle
// length, idle_stop, the idle watermark); the file source never does. There
// is no injectable clock: element timestamps come from the data everywhere
// else, and tests assert on data, never on timing.
//
// Every source registers its DoFns with register.*, so no reflection is used
// on workers.
package source

import (
	"fmt"
	"strings"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/util/protox"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/util/reflectx"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/topk-dev/topk/internal/pubsubx"
	"github.com/topk-dev/topk/schemas"
)

func init() {
	register.Function2x0(noDeadLetters)
}

// Options are the settings of a run that are not part of the source's
// identity. The zero value is valid: every zero means the default below.
type Options struct {
	// Runner is the Beam runner's name. "dataflow" selects Dataflow's native
	// Pub/Sub read; anything else this package's reader.
	Runner string
	// PubsubEndpoint is the host:port of a Pub/Sub emulator or in-process
	// fake, reached without credentials (runners/local passes its pstest
	// address). "" means PUBSUB_EMULATOR_HOST as Read sees it (read on the
	// submitting machine, shipped to workers); when that is empty too,
	// Google Cloud with default credentials.
	PubsubEndpoint string
	// MaxMessages is the most messages one Pull asks for. 0 means 1000.
	MaxMessages int
	// BundleTime is how long an unbounded source emits before it
	// checkpoints when its checkpoint may close a bucket (with Bucket set;
	// every call without it), and how long the file source's calls are.
	// Output and the watermark move downstream at checkpoints, so it
	// bounds the source's share of latency; shorter costs more per-bundle
	// overhead. 0 means 1 s.
	BundleTime time.Duration
	// Bucket is the pre-aggregation's event-time bucket (the fast path
	// sets it): the synthetic and Pub/Sub readers end their calls where a
	// checkpoint can close one rather than every BundleTime (see callEnd).
	// 0: every call is BundleTime long.
	Bucket time.Duration
	// BundleBeacons, when > 0, also ends a file source's call after that
	// many beacons: bundle boundaries at fixed places in the file, not at
	// wall-clock moments, for tests and benchmarks whose results depend
	// on where a bucket's events are split between bundles (live, a 10 s
	// bucket spans many bundles). 0: no limit. Other sources ignore it.
	BundleBeacons int
	// RecoveryLog makes the Pub/Sub reader log every message before it
	// acknowledges it and replay the log's last Horizon when the job
	// starts (see the package doc, Delivery semantics). Not on Dataflow,
	// whose native read and durable state already survive a worker's
	// loss.
	RecoveryLog RecoveryLog
}

const (
	defaultMaxMessages = 1000
	maxMaxMessages     = 10_000
	defaultBundleTime  = time.Second
	maxBundleTime      = 10 * time.Minute
)

// RunnerDataflow is the Options.Runner value of Dataflow.
const RunnerDataflow = "dataflow"

func (o Options) withDefaults() Options {
	if o.PubsubEndpoint == "" {
		o.PubsubEndpoint = pubsubx.EmulatorAddr()
	}
	if o.MaxMessages == 0 {
		o.MaxMessages = defaultMaxMessages
	}
	if o.BundleTime == 0 {
		o.BundleTime = defaultBundleTime
	}
	return o
}

// Validate reports what is wrong with o (after defaults).
func (o Options) Validate() error {
	o = o.withDefaults()
	if o.MaxMessages < 1 || o.MaxMessages > maxMaxMessages {
		return fmt.Errorf("source options: max messages %d is not in [1, %d]", o.MaxMessages, maxMaxMessages)
	}
	if o.BundleTime < 0 || o.BundleTime > maxBundleTime {
		return fmt.Errorf("source options: bundle time %s is not in [0, %s]", o.BundleTime, maxBundleTime)
	}
	if o.Bucket < 0 {
		return fmt.Errorf("source options: bucket %s < 0", o.Bucket)
	}
	if o.BundleBeacons < 0 {
		return fmt.Errorf("source options: bundle beacons %d < 0", o.BundleBeacons)
	}
	if o.RecoveryLog.Enabled() && o.dataflow() {
		return fmt.Errorf("%w: the recovery log is for runners whose state dies with a worker (Prism, Flink); Dataflow's native Pub/Sub read and durable state survive it: leave the log off there", ErrBadSpec)
	}
	return o.RecoveryLog.validate()
}

func (o Options) dataflow() bool { return strings.EqualFold(o.Runner, RunnerDataflow) }

// BeaconsOnce reports whether the source spec with opts delivers each
// beacon_id at most once, except when a runner retries a bundle it
// discarded: a Pub/Sub subscription read by Dataflow's native read (which
// deduplicates messages by their beacon_id attribute: dataflowRead) or
// with the recovery log (which does the same). The pre-aggregation then
// tells a retried event from a duplicate by its beacon
// (preagg.Config.BeaconsOnce). Both key on the attribute and the counting
// on the beacon's own id: they must be the same, as ingest makes them.
func BeaconsOnce(spec Spec, opts Options) bool {
	return spec.Kind == KindPubsub && (opts.dataflow() || opts.RecoveryLog.Enabled())
}

// Validate reports what Read would reject: spec.Validate, opts.Validate, and
// their combination (idle_stop cannot be honoured by Dataflow's native read).
func Validate(spec Spec, opts Options) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	if spec.Kind == KindPubsub && opts.dataflow() && spec.Pubsub.IdleStop > 0 {
		return fmt.Errorf("%w: pubsub: idle_stop is not supported by Dataflow's native Pub/Sub read (drain the job instead)", ErrBadSpec)
	}
	return nil
}

// Read adds the source spec describes. beacons is a PCollection<[]byte>, one
// binary beacon per element, timestamped with its event time (as the package
// doc says per source); deadLetters is a PCollection<schemas.DeadLetter> of
// input the source could not parse (only the file source has any). Both are
// in the global window, and unbounded (the file source too: it
// checkpoints, so its output is a stream that ends).
//
// Read panics when Validate(spec, opts) fails (call it first for an error
// instead): a bad configuration fails at construction, never on a worker.
func Read(s beam.Scope, spec Spec, opts Options) (beacons, deadLetters beam.PCollection) {
	s = s.Scope("source.Read")
	if err := Validate(spec, opts); err != nil {
		panic(fmt.Sprintf("source.Read: %v", err))
	}
	spec, opts = spec.withDefaults(), opts.withDefaults()
	switch spec.Kind {
	case KindFile:
		imp := beam.Impulse(s)
		return beam.ParDo2(s, &fileFn{Path: spec.File.Path, Beacon: spec.File.Beacon, Slack: spec.File.Slack, BundleTime: opts.BundleTime, BundleBeacons: opts.BundleBeacons}, imp)
	case KindSynthetic:
		imp := beam.Impulse(s)
		beacons = beam.ParDo(s, &syntheticFn{Spec: spec.Synthetic, BundleTime: opts.BundleTime, Bucket: opts.Bucket}, imp)
		return beacons, emptyDeadLetters(s)
	case KindPubsub:
		p := spec.Pubsub
		if opts.dataflow() {
			return dataflowRead(s, p.Subscription), emptyDeadLetters(s)
		}
		imp := beam.Impulse(s)
		fn := &pullFn{
			Subscription: p.Subscription,
			Endpoint:     opts.PubsubEndpoint,
			MaxMessages:  int32(opts.MaxMessages),
			BundleTime:   opts.BundleTime,
			Bucket:       opts.Bucket,
			IdleStop:     p.IdleStop,
			Slack:        p.Slack,
			Readers:      p.Readers,
		}
		if rl := opts.RecoveryLog; rl.Enabled() {
			if rl.Start.IsZero() {
				rl.Start = time.Now()
			}
			if rl.Run == "" {
				rl.Run = newRun(rl.Start)
			}
			fn.Log, fn.Run = rl.Config, rl.Run
			fn.ReplayFrom, fn.ReplayTo = rl.Start.Add(-rl.Horizon).UnixMilli(), rl.Start.UnixMilli()
		}
		beacons = beam.ParDo(s, fn, imp)
		return beacons, emptyDeadLetters(s)
	}
	panic(fmt.Sprintf("source.Read: unknown kind %q", spec.Kind)) // Validate rejects it
}

// pubsubReadURN is Dataflow's native Pub/Sub read.
const pubsubReadURN = "beam:transform:pubsub_read:v1"

// dataflowRead is Beam's io/pubsubio.Read(s, project, ReadOptions{
// Subscription, TimestampAttribute: "ts", IDAttribute: "beacon_id"}): the
// same external transform, which only Dataflow implements, giving a
// PCollection<[]byte> of payloads stamped from the "ts" attribute (Unix
// ms) or the publish time, a beacon published twice (ingest's retry after
// an ambiguous publish) delivered once (Dataflow deduplicates messages by
// the id attribute). pubsubio
// itself cannot be imported here: it imports
// google.golang.org/genproto/googleapis/pubsub/v1, which the genproto this
// module pins no longer has (apache/beam#40018).
func dataflowRead(s beam.Scope, subscription string) beam.PCollection {
	s = s.Scope("pubsubio.Read")
	payload := &pipepb.PubSubReadPayload{
		Subscription:       subscription,
		TimestampAttribute: TSAttribute,
		IdAttribute:        BeaconAttribute,
	}
	out := beam.External(s, pubsubReadURN, protox.MustEncode(payload), nil,
		[]beam.FullType{typex.New(reflectx.ByteSlice)}, false)
	return out[0]
}

// emptyDeadLetters is a typed empty PCollection<schemas.DeadLetter>, for the
// sources that never produce one.
func emptyDeadLetters(s beam.Scope) beam.PCollection {
	return beam.ParDo(s.Scope("noDeadLetters"), noDeadLetters, beam.Impulse(s))
}

func noDeadLetters(_ []byte, _ func(schemas.DeadLetter)) {}
