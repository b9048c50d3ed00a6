package main

import (
	"testing"
	"time"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/source"
)

// Property: a load message carries the attributes ingest sets: "ts" and
// "beacon_id" equal to the beacon's own id, and that id differs between
// runs (generators of different seeds) for the same beacon number. (The
// load once sent local-0, local-1, ... in every run: the recovery log,
// which deduplicates by the attribute, took a run's first beacons for an
// earlier run's and dropped them, and the pre-aggregation's retry rule
// keys on the beacon's own id.)
func TestLoadMessageBeaconID(t *testing.T) {
	now := time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)
	ids := map[string]bool{}
	for _, seed := range []uint64{1, 2} {
		g, err := source.NewGenerator(source.SyntheticSpec{Items: 1000, Zipf: 1.1, Beacon: 10, Types: []string{"video"}, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		for k := range int64(3) {
			msg, n, err := loadMessage(g, k, now)
			if err != nil {
				t.Fatal(err)
			}
			var b schemas.Beacon
			if err := schemas.UnmarshalBeacon(msg.Data, &b); err != nil {
				t.Fatal(err)
			}
			id := msg.Attributes[source.BeaconAttribute]
			if id == "" || id != b.BeaconID || n != len(b.Events) {
				t.Fatalf("seed %d beacon %d: attribute beacon_id %q, the beacon's id %q, %d events (said %d)", seed, k, id, b.BeaconID, len(b.Events), n)
			}
			if ids[id] {
				t.Fatalf("beacon_id %q sent twice (seed %d, beacon %d)", id, seed, k)
			}
			ids[id] = true
			if msg.Attributes[source.TSAttribute] != "1796540400000" {
				t.Errorf("ts attribute %q, want %d", msg.Attributes[source.TSAttribute], now.UnixMilli())
			}
		}
	}
}
