// Command mapcount is the floor of the exact recount benchmark: a plain
// single-process, single-goroutine Go program that reads one archive hour's
// Parquet files (the hour folder and its late/ folder) with parquet-go,
// drops duplicate event_ids, and counts per (type, scope, item) in Go maps,
// with the recount's validation and hour-window checks and no framework.
//
//	go run ./scripts/mapcount --archive=/tmp/arch --hour=2026-11-30T10
//
// It prints one JSON line: events read, duplicates, count rows, events/s over
// the counting time, CPU seconds and peak RSS (VmHWM). Of the rows sharing an
// event_id it counts the first read; pipelines/exact keeps the smallest
// encoded record instead, which is the same event when the rows are
// redeliveries (as in scripts/genarchive's input).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/topk-dev/topk/schemas"
	archivefiles "github.com/topk-dev/topk/transforms/archive"
)

type key struct{ typ, scope, item string }

func main() {
	archive := flag.String("archive", "", "archive root (local folder)")
	hourFlag := flag.String("hour", "", "event hour, YYYY-MM-DDTHH")
	flag.Parse()
	hour, err := time.Parse("2006-01-02T15", *hourFlag)
	if err != nil || *archive == "" {
		log.Fatalf("mapcount: need --archive and --hour=YYYY-MM-DDTHH (%v)", err)
	}
	start := time.Now()
	files, _, err := archivefiles.ListHour(*archive, hour)
	if err != nil {
		log.Fatal(err)
	}
	seen := map[string]struct{}{}
	counts := map[key]int64{}
	// Interned type and scope strings (a handful), so map keys do not
	// retain the reader's buffers.
	intern := map[string]string{}
	in := func(s string) string {
		if v, ok := intern[s]; ok {
			return v
		}
		v := strings.Clone(s)
		intern[v] = v
		return v
	}
	var v schemas.Validator
	var events, invalid, outside, dups int64
	end := hour.Add(time.Hour)
	rows := make([]schemas.ArchiveEvent, 1024)
	var scopes []string
	for _, path := range files {
		fh, err := os.Open(path)
		if err != nil {
			log.Fatal(err)
		}
		r := parquet.NewGenericReader[schemas.ArchiveEvent](fh)
		for {
			n, err := r.Read(rows)
			for i := range rows[:n] {
				events++
				e := rows[i].Event()
				if v.Validate(&e, hour) != nil {
					invalid++
					continue
				}
				if e.TS.Before(hour) || !e.TS.Before(end) {
					outside++
					continue
				}
				if _, ok := seen[e.EventID]; ok {
					dups++
					continue
				}
				seen[strings.Clone(e.EventID)] = struct{}{}
				typ := in(e.Type)
				item := ""
				for _, sc := range e.Scopes(scopes) {
					k := key{typ, sc, e.Item}
					if c, ok := counts[k]; ok {
						counts[k] = c + 1
						continue
					}
					if item == "" {
						item = strings.Clone(e.Item)
					}
					counts[key{typ, in(sc), item}] = 1
				}
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				log.Fatalf("read %s: %v", path, err)
			}
		}
		r.Close()
		fh.Close()
	}
	elapsed := time.Since(start).Seconds()
	var sum int64
	for _, c := range counts {
		sum += c
	}
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	out := map[string]any{
		"tool": "mapcount", "files": len(files), "events": events, "invalid": invalid, "outside_hour": outside,
		"duplicates": dups, "counted": events - invalid - outside - dups, "rows": len(counts), "scope_counts": sum,
		"seconds": elapsed, "events_per_s": float64(events) / elapsed, "cpu_seconds": cpu, "vmhwm_kb": vmhwm(),
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		log.Fatal(err)
	}
}

// vmhwm is the process's peak resident set size in KB (/proc/self/status).
func vmhwm() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			var n int64
			fmt.Sscanf(strings.TrimSpace(rest), "%d", &n)
			return n
		}
	}
	return -1
}
