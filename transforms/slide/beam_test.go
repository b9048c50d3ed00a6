package slide

import (
	"reflect"
	"testing"
	"time"

	"github.com/topk-dev/topk/schemas"
)

// TestWindowsFnConfig: the State a worker builds (windowsFn.config) has
// the configuration the pipeline was built with, every field of it: the
// DoFn's fields are all that reaches a worker, and a Config field the DoFn
// does not carry is silently 0 there (the aggregates' N was, once). The
// configuration sets every field, so a new field left unset fails here.
func TestWindowsFnConfig(t *testing.T) {
	cfg := BeamConfig{
		Config: Config{
			Bucket: 10 * time.Second,
			Windows: []Window{
				{Name: "1m", Length: time.Minute, Period: 10 * time.Second, MinCount: 3},
				{Name: "1h", Length: time.Hour, Period: time.Minute, MinCount: 10},
			},
			Limit:  1100,
			Parts:  schemas.Partitions{P: 16, Region: 4, Country: 8},
			UpperN: 1024,
			AggN:   512,
		},
		Shards: 4, Minutes: true, Durable: true,
	}
	v := reflect.ValueOf(cfg.Config)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("the test leaves Config.%s unset: set it", v.Type().Field(i).Name)
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := newWindowsFn(cfg).config(); !reflect.DeepEqual(got, cfg.Config) {
		t.Fatalf("the worker's config %+v, want %+v", got, cfg.Config)
	}
}
