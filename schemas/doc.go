// Package schemas holds topk's wire formats: the view event and its
// validation rules, the beacon (many events in one Pub/Sub message, in a
// compact versioned binary form and a JSON form for the ingest API), and the
// published list (the JSON every consumer reads). It is the only code that
// knows a byte layout; everything else passes these types around.
//
// Every decoder here accepts arbitrary bytes: it returns an error and never
// panics (see the fuzz tests).
package schemas
