package source

import (
	"context"
	"flag"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/dataflow"
	"google.golang.org/protobuf/proto"
)

// TestDataflowDryRun: with Runner "dataflow" the Pub/Sub source is Beam's
// native read, and the job translates for Dataflow offline (--dry_run, no
// credentials). environment_type is set because a Prism run earlier in
// the package sets the process-wide flag to loopback when it is empty.
func TestDataflowDryRun(t *testing.T) {
	for name, value := range map[string]string{
		"dry_run": "true", "project": "p", "region": "us-central1", "staging_location": "gs://b/s",
		"environment_type": "docker",
	} {
		old := flag.Lookup(name).Value.String()
		if err := flag.Set(name, value); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { flag.Set(name, old) })
	}
	spec, err := ParseSpec("pubsub:projects/p/subscriptions/views-fast")
	if err != nil {
		t.Fatal(err)
	}
	p, s := beam.NewPipelineWithRoot()
	beacons, dead := Read(s, spec, Options{Runner: RunnerDataflow})
	beam.ParDo0(s, &failOnFn{}, beacons)
	beam.ParDo(s, deadLetterKeyFn, dead)
	if _, err := dataflow.Execute(context.Background(), p); err != nil {
		t.Fatalf("dataflow dry run: %v", err)
	}
	// The native read deduplicates by the beacon_id attribute (what makes
	// BeaconsOnce true there) and stamps from "ts".
	edges, _, err := p.Build()
	if err != nil {
		t.Fatal(err)
	}
	var read *pipepb.PubSubReadPayload
	for _, e := range edges {
		if e.Op == graph.External && e.Payload != nil && e.Payload.URN == pubsubReadURN {
			read = &pipepb.PubSubReadPayload{}
			if err := proto.Unmarshal(e.Payload.Data, read); err != nil {
				t.Fatal(err)
			}
		}
	}
	if read == nil || read.GetIdAttribute() != BeaconAttribute || read.GetTimestampAttribute() != TSAttribute || read.GetSubscription() != "projects/p/subscriptions/views-fast" {
		t.Fatalf("native read payload %v, want the subscription, id attribute %q and timestamp attribute %q", read, BeaconAttribute, TSAttribute)
	}
	if !BeaconsOnce(spec, Options{Runner: RunnerDataflow}) || BeaconsOnce(spec, Options{Runner: "prism"}) {
		t.Error("BeaconsOnce: want true on Dataflow, false on Prism without the recovery log")
	}

	// idle_stop cannot be honoured by the native read: refused at construction.
	spec, _ = ParseSpec("pubsub:projects/p/subscriptions/views-fast?idle_stop=1s")
	if err := Validate(spec, Options{Runner: RunnerDataflow}); err == nil {
		t.Error("Validate accepts idle_stop on Dataflow")
	}
	if err := Validate(spec, Options{Runner: "prism"}); err != nil {
		t.Errorf("Validate on Prism: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("Read with idle_stop on Dataflow did not panic")
		}
	}()
	_, s = beam.NewPipelineWithRoot()
	Read(s, spec, Options{Runner: RunnerDataflow})
}
