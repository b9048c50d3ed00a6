// Command genreplay writes a synthetic NDJSON stream for the fast path's
// replay benchmark (BENCHMARKS.md): three types, countries with their ISO
// 3166-2 regions, a Zipf background spread evenly over a span of event
// time, and optionally a wave of distinct junk hashtags. The stream is a
// function of its flags; it is not committed.
//
//	go run ./scripts/genreplay --out /tmp/replay.ndjson.gz                 # 4M events over 80 minutes
//	go run ./scripts/genreplay --spam 1000000 --out /tmp/spam.ndjson.gz    # with the spam wave in minutes 40-43
//	go run ./scripts/genreplay --events 60000000 --span 60s --items 10000000 --countries 20 --out /tmp/r60.ndjson.gz   # the scale issue's 1M events/s
package main

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"

	"github.com/topk-dev/topk/internal/streams"
	"github.com/topk-dev/topk/schemas"
)

func main() {
	var spec streams.ScopedSpec
	out := flag.String("out", "", "output file (.gz: gzipped)")
	start := flag.String("start", "2026-11-30T10:00:00Z", "event time of the first event")
	flag.IntVar(&spec.Events, "events", 4_000_000, "background events")
	flag.DurationVar(&spec.Span, "span", 80*time.Minute, "event time the background spans")
	flag.Uint64Var(&spec.Items, "items", 1_000_000, "video and search items (Zipf)")
	flag.Float64Var(&spec.Zipf, "zipf", 1.1, "Zipf exponent")
	flag.Uint64Var(&spec.HashtagItems, "hashtag_items", 500_000, "hashtags (Zipf)")
	flag.Float64Var(&spec.HashtagShare, "hashtag_share", 0.15, "share of hashtag events")
	flag.Float64Var(&spec.SearchShare, "search_share", 0.15, "share of search events")
	flag.IntVar(&spec.Countries, "countries", 8, fmt.Sprintf("countries (at most %d), three regions each", streams.MaxScopedCountries))
	flag.IntVar(&spec.SpamItems, "spam", 0, "distinct junk hashtags in the spam wave (0: none)")
	flag.DurationVar(&spec.SpamFrom, "spam_from", 40*time.Minute, "spam wave start, from the first event")
	flag.DurationVar(&spec.SpamFor, "spam_for", 3*time.Minute, "spam wave length")
	flag.Uint64Var(&spec.Seed, "seed", 1, "seed")
	flag.Parse()
	if *out == "" {
		log.Fatal("genreplay: --out is required")
	}
	if spec.Countries < 0 || spec.Countries > streams.MaxScopedCountries {
		log.Fatalf("genreplay: --countries %d: want 0 to %d", spec.Countries, streams.MaxScopedCountries)
	}
	t, err := time.Parse(time.RFC3339, *start)
	if err != nil {
		log.Fatalf("genreplay: --start: %v", err)
	}
	spec.Start = t
	if err := write(*out, spec); err != nil {
		log.Fatalf("genreplay: %v", err)
	}
}

func write(path string, spec streams.ScopedSpec) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var w io.Writer = f
	var gz *gzip.Writer
	if strings.HasSuffix(path, ".gz") {
		gz, _ = gzip.NewWriterLevel(f, gzip.BestSpeed)
		w = gz
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	enc := json.NewEncoder(bw)
	n := 0
	var werr error
	streams.GenScoped(spec, func(e *schemas.Event) {
		if werr == nil {
			werr = enc.Encode(e)
			n++
		}
	})
	if werr != nil {
		return werr
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if gz != nil {
		if err := gz.Close(); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "genreplay: %d events to %s\n", n, path)
	return f.Close()
}
