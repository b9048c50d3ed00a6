package streams

import (
	"strconv"
	"time"

	"github.com/topk-dev/topk/internal/zipf"
	"github.com/topk-dev/topk/schemas"
)

// ZipfStream returns n events of type typ whose items are Zipf(s) draws over
// items ranks (internal/zipf), named "i<rank>": "i1" is the most frequent.
// Event i (from 0) has event_id "z<seed>-<i>" and ts start + i/rate seconds,
// a steady rate events per second, so the stream is in event-time order.
// User, country and region are empty. The same arguments give the same
// stream.
//
// It panics unless s > 0, items >= 1, n >= 0 and rate > 0 (programmer
// errors in a test).
func ZipfStream(seed uint64, s float64, items uint64, n int, start time.Time, rate float64, typ string) []schemas.Event {
	if n < 0 || !(rate > 0) {
		panic("streams: ZipfStream needs n >= 0 and rate > 0")
	}
	z := zipf.New(seed, s, items)
	prefix := "z" + strconv.FormatUint(seed, 10) + "-"
	step := float64(time.Second) / rate
	events := make([]schemas.Event, n)
	for i := range events {
		events[i] = schemas.Event{
			EventID: prefix + strconv.Itoa(i),
			Type:    typ,
			Item:    "i" + strconv.FormatUint(z.Next(), 10),
			TS:      start.Add(time.Duration(float64(i) * step)),
		}
	}
	return events
}
