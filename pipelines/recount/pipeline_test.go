package recount

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/parquet-go/parquet-go"

	"github.com/topk-dev/topk/pipelines/recount/recounttest"
	"github.com/topk-dev/topk/schemas"
)

// oldRecord is the encoding duplicates are ordered by, written here
// independently of the pipeline: the uvarint-length-prefixed event_id,
// type, item, country, region.
func oldRecord(e *schemas.Event) []byte {
	var b []byte
	for _, s := range []string{e.EventID, e.Type, e.Item, e.Country, e.Region} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

// Property: when the copies of an event_id differ (item, type, scope), in
// the same file or in different files (late/ included), Build counts the
// copy with the smallest record, whatever the file order, readers, waves,
// shards and partitions; ids that are lowercase hex, upper-case hex, odd
// length or not hex are all deduplicated exactly; every part file is in
// sortCounts order.
func TestBuildDuplicatesThatDiffer(t *testing.T) {
	base := recounttest.GenEvents(7, hour0, 3000)
	for i := range base {
		switch i % 4 {
		case 0:
			base[i].EventID = fmt.Sprintf("%032x", uint64(i)*0x9e3779b97f4a7c15) // packed hex
		case 1:
			base[i].EventID = fmt.Sprintf("%031X", i) // odd length, upper case: raw
		}
	}
	var copies []schemas.Event
	for i := 0; i < len(base); i += 5 {
		c := base[i]
		switch i % 3 {
		case 0:
			c.Item = "it_0" // a different item, usually smaller
		case 1:
			if c.Type == "video" {
				c.Type = "hashtag"
			} else {
				c.Type = "video"
			}
		case 2:
			c.Country, c.Region = "", ""
		}
		copies = append(copies, c, base[i]) // an exact redelivery too
	}
	// Files: base split over two files, copies in late/ and in the first file.
	dir := schemas.ArchiveHourPath(t.TempDir(), hour0)
	must(t, os.MkdirAll(filepath.Join(dir, schemas.ArchiveLateDir), 0o755))
	rows := func(evs []schemas.Event) []schemas.ArchiveEvent {
		out := make([]schemas.ArchiveEvent, len(evs))
		for i := range evs {
			out[i] = schemas.ArchiveEventOf(&evs[i])
		}
		return out
	}
	half := len(copies) / 2
	files := []string{filepath.Join(dir, "part-a.parquet"), filepath.Join(dir, "part-b.parquet"),
		filepath.Join(dir, schemas.ArchiveLateDir, "part-c.parquet")}
	must(t, parquet.WriteFile(files[0], rows(append(append([]schemas.Event{}, base[:1500]...), copies[:half]...))))
	must(t, parquet.WriteFile(files[1], rows(base[1500:])))
	must(t, parquet.WriteFile(files[2], rows(copies[half:])))

	// The oracle: per event_id the copy with the smallest record.
	kept := map[string]schemas.Event{}
	for _, e := range append(append([]schemas.Event{}, base...), copies...) {
		if k, ok := kept[e.EventID]; !ok || bytes.Compare(oldRecord(&e), oldRecord(&k)) < 0 {
			kept[e.EventID] = e
		}
	}
	want := recounttest.Oracle(func() []schemas.Event {
		var out []schemas.Event
		for _, e := range kept {
			out = append(out, e)
		}
		return out
	}())

	for _, c := range []struct{ shards, parts, readers, waves int }{
		{1, 1, 1, 1}, {4, 3, 2, 4}, {5, 2, 3, 2},
	} {
		t.Run(fmt.Sprintf("shards%d_parts%d_readers%d_waves%d", c.shards, c.parts, c.readers, c.waves), func(t *testing.T) {
			staging := t.TempDir()
			p, s := beam.NewPipelineWithRoot()
			// Reversed file order: the choice must not depend on it.
			Build(s, HourJob{Hour: hour0, Files: []string{files[2], files[1], files[0]}, Staging: staging,
				Shards: c.shards, Parts: c.parts, Readers: c.readers, Waves: c.waves})
			m, err := BeamRunner(context.Background(), p)
			must(t, err)
			got, err := readCounts(staging)
			must(t, err)
			if g := recounttest.AsMap(got); !maps.Equal(g, want) {
				t.Fatalf("counts differ from the oracle: %d keys, want %d", len(g), len(want))
			}
			if m["exact_events_counted"] != int64(len(kept)) || m["exact_duplicates_dropped"] != int64(len(copies)) {
				t.Errorf("metrics %v: want %d counted, %d duplicates", m, len(kept), len(copies))
			}
			parts, err := filepath.Glob(filepath.Join(staging, "part-*.parquet"))
			must(t, err)
			for _, path := range parts {
				rs, err := parquet.ReadFile[schemas.ExactCount](path)
				must(t, err)
				sorted := append([]schemas.ExactCount(nil), rs...)
				sortCounts(sorted)
				for i := range rs {
					if rs[i] != sorted[i] {
						t.Fatalf("%s: row %d out of order", path, i)
					}
				}
			}
		})
	}
}

// Property: a batch round-trips every kind of id and string, and a
// truncated batch is an error, not a panic.
func TestBatchRoundTrip(t *testing.T) {
	ids := []string{"", "a", "ab", "0f", "0F", "abc", "00ff00ff", "zz", "e-1-2"}
	var w batchWriter
	w.begin()
	for i, id := range ids {
		w.id(id)
		w.dictStr([]string{"video", "hashtag"}[i%2])
		w.raw(id + "_item")
		w.end()
	}
	b := w.take()
	var r batchReader
	r.reset(b)
	for i := 0; r.next(); i++ {
		enc := r.id()
		typ, item := r.dictStr(), string(r.raw())
		if got := string(appendID(nil, enc)); got != ids[i] || typ != []string{"video", "hashtag"}[i%2] || item != ids[i]+"_item" {
			t.Fatalf("record %d: id %q type %q item %q", i, got, typ, item)
		}
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	r.reset(b[:len(b)-3])
	for r.next() {
		r.id()
		r.dictStr()
		r.raw()
	}
	if r.err == nil {
		t.Error("a truncated batch read without an error")
	}
}
