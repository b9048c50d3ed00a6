package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/topk-dev/topk/schemas"
)

// ingestReply is the body of every POST /v1/events answer that got as far
// as the events.
type ingestReply struct {
	Error     string          `json:"error,omitempty"`
	BeaconID  string          `json:"beacon_id"`
	Accepted  int             `json:"accepted"`
	Rejected  []rejectedEvent `json:"rejected"`
	MessageID string          `json:"message_id,omitempty"`
	// Duplicate is set when the beacon_id was already published within the
	// dedupe window: nothing was published this time.
	Duplicate bool `json:"duplicate,omitempty"`
	// Dropped counts valid events that were not published because a rule
	// drops them at ingest (a known bot's user agent).
	Dropped int `json:"dropped,omitempty"`
}

// rejectedEvent names an event the beacon carried that was not accepted.
type rejectedEvent struct {
	Index   int    `json:"index"`
	EventID string `json:"event_id,omitempty"`
	Reason  string `json:"reason"`
}

// pendingTTL bounds how long a beacon_id stays claimed by an attempt that
// died before Pub/Sub answered (a crash): after it, a retry publishes.
const pendingTTL = 30 * time.Second

const pendingMark = "pending"

func (s *Server) dedupeKey(id string) string { return s.cfg.KeyPrefix + ":beacon:" + id }

// handleEvents serves POST /v1/events (see the package doc).
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodPost {
		return methodNotAllowed(r, "POST")
	}
	// The answer must be written before the server's write timeout cuts
	// the connection (it runs from the end of the headers): the publish
	// gets what is left after the margin, and at most PublishTimeout.
	deadline := time.Now().Add(s.cfg.WriteTimeout - IngestMargin)
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return errorf(http.StatusUnsupportedMediaType, "Content-Type must be application/json, got %s", quoteTrunc(ct))
	}
	if r.ContentLength > s.cfg.MaxBodyBytes {
		return errorf(http.StatusRequestEntityTooLarge, "body of %d bytes is over the limit of %d bytes", r.ContentLength, s.cfg.MaxBodyBytes)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errorf(http.StatusRequestEntityTooLarge, "body is over the limit of %d bytes", s.cfg.MaxBodyBytes)
		}
		return errorf(http.StatusBadRequest, "reading body: %v", err)
	}

	// The envelope first, events kept raw: a malformed event is rejected
	// alone, with its reason, instead of failing the whole beacon.
	var env struct {
		BeaconID *string           `json:"beacon_id"`
		Events   []json.RawMessage `json:"events"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		return errorf(http.StatusBadRequest, "body is not a beacon {\"beacon_id\":..,\"events\":[..]}: %v", err)
	}
	if dec.More() {
		return errorf(http.StatusBadRequest, "body has data after the beacon object")
	}
	if env.BeaconID == nil || *env.BeaconID == "" {
		return badParam("beacon_id", nil, "beacon_id is missing: every beacon needs a client-chosen id so that a retry is not counted twice")
	}
	id := *env.BeaconID
	if err := checkBeaconID(id); err != nil {
		return badParam("beacon_id", nil, "beacon_id %s", err)
	}
	if len(env.Events) == 0 {
		return badParam("events", nil, "events is missing or empty")
	}
	if len(env.Events) > s.cfg.MaxEvents {
		return errorf(http.StatusRequestEntityTooLarge, "%d events in one beacon, more than the limit of %d", len(env.Events), s.cfg.MaxEvents)
	}

	now := s.cfg.Now()
	val := schemas.DefaultValidator()
	reply := ingestReply{BeaconID: id, Rejected: []rejectedEvent{}}
	b := schemas.Beacon{BeaconID: id, Events: make([]schemas.Event, 0, len(env.Events))}
	var earliest time.Time
	gl := s.newGeoLookup(r)
	for i, raw := range env.Events {
		var e schemas.Event
		err := schemas.ParseEventJSON(raw, &e)
		if err == nil {
			gl.locate(&e)
			err = val.Validate(&e, now)
		}
		if err != nil {
			rej := rejectedEvent{Index: i, Reason: eventReason(err)}
			if len(e.EventID) <= schemas.MaxEventIDLen {
				rej.EventID = e.EventID
			}
			reply.Rejected = append(reply.Rejected, rej)
			continue
		}
		if earliest.IsZero() || e.TS.Before(earliest) {
			earliest = e.TS
		}
		b.Events = append(b.Events, e)
	}
	if s.cfg.Rules != nil && len(b.Events) > 0 && s.cfg.Rules.BotAgent(r.UserAgent()) {
		// A known bot: acknowledged, not published.
		reply.Dropped = len(b.Events)
		s.metrics.ingestEvents.WithLabelValues("bot").Add(float64(len(b.Events)))
		s.metrics.ingestEvents.WithLabelValues("rejected").Add(float64(len(reply.Rejected)))
		s.metrics.beacons.WithLabelValues("bot").Inc()
		writeJSON(w, http.StatusAccepted, reply)
		return nil
	}
	reply.Accepted = len(b.Events)
	s.metrics.ingestEvents.WithLabelValues("accepted").Add(float64(len(b.Events)))
	s.metrics.ingestEvents.WithLabelValues("rejected").Add(float64(len(reply.Rejected)))
	if len(b.Events) == 0 {
		s.metrics.beacons.WithLabelValues("invalid").Inc()
		reply.Error = "no valid event in the beacon; see rejected"
		writeJSON(w, http.StatusBadRequest, reply)
		return nil
	}
	data, err := schemas.MarshalBeacon(&b)
	if err != nil {
		s.metrics.beacons.WithLabelValues("invalid").Inc()
		return errorf(http.StatusRequestEntityTooLarge, "beacon too large to publish: %v", err)
	}

	// Claim the beacon_id. A failing Redis does not stop ingest: the beacon
	// is published without deduplication (at least once).
	key := s.dedupeKey(id)
	dctx, cancel := context.WithTimeout(r.Context(), time.Second)
	claimed, err := s.rc.SetNX(dctx, key, pendingMark, pendingTTL).Result()
	cancel()
	dedupe := err == nil
	if err != nil && r.Context().Err() != nil {
		// The client went away before its beacon was claimed: it has no
		// 202, so it sends the beacon again, and publishing this one
		// unclaimed would only hand the downstream dedupe a duplicate.
		// Not a Redis failure: nothing is counted against Redis or logged.
		s.metrics.beacons.WithLabelValues("abandoned").Inc()
		return fmt.Errorf("%w: the client went away before the beacon was claimed; nothing was published", errUnavailable)
	}
	if err != nil {
		s.redisError("dedupe", err)
		s.log.Warn("dedupe unavailable, publishing without it", "beacon_id", id, "err", err)
	} else if !claimed {
		return s.answerRetry(w, r, key, id)
	}

	// Wait for Pub/Sub's acknowledgement even if the client goes away, so
	// that the claim ends in a known state.
	if d := time.Now().Add(s.cfg.PublishTimeout); d.Before(deadline) {
		deadline = d
	}
	pctx, pcancel := context.WithDeadline(context.WithoutCancel(r.Context()), deadline)
	defer pcancel()
	start := time.Now()
	res := s.pub.Publish(pctx, &pubsub.Message{
		Data: data,
		Attributes: map[string]string{
			"ts":        strconv.FormatInt(earliest.UnixMilli(), 10),
			"beacon_id": id,
		},
	})
	msgID, err := res.Get(pctx)
	s.metrics.publishTime.Observe(time.Since(start).Seconds())
	if err != nil {
		s.metrics.beacons.WithLabelValues("failed").Inc()
		if dedupe {
			// pctx may have expired: release the claim on a context of its own.
			dctx, dcancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Second)
			if derr := s.rc.Del(dctx, key).Err(); derr != nil {
				s.redisError("dedupe", derr)
			}
			dcancel()
		}
		return fmt.Errorf("%w: publish to Pub/Sub failed, retry the beacon: %v", errUnavailable, err)
	}
	s.metrics.beacons.WithLabelValues("published").Inc()
	reply.MessageID = msgID
	out, _ := json.Marshal(reply)
	if dedupe {
		sctx, scancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Second)
		err := s.rc.Set(sctx, key, out, s.cfg.DedupeTTL).Err()
		scancel()
		if err != nil {
			s.redisError("dedupe", err)
			s.log.Warn("dedupe: could not record a published beacon", "beacon_id", id, "err", err)
		}
	}
	writeJSON(w, http.StatusAccepted, reply)
	return nil
}

// answerRetry answers a beacon whose id is already claimed: the first
// attempt's reply when it was published, 409 while it is in flight.
func (s *Server) answerRetry(w http.ResponseWriter, r *http.Request, key, id string) error {
	ctx, cancel := context.WithTimeout(r.Context(), time.Second)
	defer cancel()
	prev, err := s.rc.Get(ctx, key).Bytes()
	var reply ingestReply
	if err == nil && string(prev) != pendingMark && json.Unmarshal(prev, &reply) == nil {
		s.metrics.beacons.WithLabelValues("duplicate").Inc()
		reply.Duplicate = true
		writeJSON(w, http.StatusAccepted, reply)
		return nil
	}
	s.metrics.beacons.WithLabelValues("in_flight").Inc()
	e := errorf(http.StatusConflict, "beacon_id %q is being published by an earlier request; retry in a second", id)
	e.header = map[string]string{"Retry-After": "1"}
	return e
}

// checkBeaconID applies the event_id rules to a beacon_id: printable ASCII
// without space, quote or backslash, at most schemas.MaxBeaconIDLen bytes.
func checkBeaconID(id string) error {
	if len(id) > schemas.MaxBeaconIDLen {
		return fmt.Errorf("is %d bytes, more than %d", len(id), schemas.MaxBeaconIDLen)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return fmt.Errorf("has byte 0x%02x at %d (printable ASCII without space, quote or backslash only)", c, i)
		}
	}
	return nil
}

// eventReason words a rejection for the client; a timestamp that does not
// parse says so instead of quoting the JSON decoder.
func eventReason(err error) string {
	var pe *time.ParseError
	if errors.As(err, &pe) {
		return fmt.Sprintf("%v: ts %s is not an RFC 3339 time (like 2026-11-30T10:00:01.234Z)", schemas.ErrInvalidEvent, quoteTrunc(pe.Value))
	}
	return err.Error()
}
