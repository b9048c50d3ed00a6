package schemas

import "time"

// DeadLetter is input the pipeline or the API could not use, kept with the
// reason: a malformed beacon, an invalid event, an unparsable NDJSON line.
// Its JSON form is what the dead-letter file and topic carry.
type DeadLetter struct {
	// Stage names where it was rejected: "source", "decode", "validate".
	Stage string `json:"stage"`
	// Reason is the error text.
	Reason string `json:"reason"`
	// Payload is the rejected bytes (a beacon, an NDJSON line), possibly
	// truncated to MaxDeadLetterPayload.
	Payload []byte `json:"payload,omitempty"`
	// EventID is set when one event of a beacon was rejected.
	EventID string `json:"event_id,omitempty"`
	// At is the event time of the input, when known.
	At time.Time `json:"at,omitzero"`
}

// MaxDeadLetterPayload bounds the bytes a dead letter keeps of its input.
const MaxDeadLetterPayload = 64 << 10
