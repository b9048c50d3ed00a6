// Command convert turns the public click and view data sets in
// /work/shared/data (see its README.md) into the gzipped NDJSON event streams
// embedded by package streams: one schemas.Event JSON object per line, in the
// source's order (arrival order), gzip at best compression.
//
//	go run ./internal/streams/convert -data /work/shared/data -out internal/streams/testdata
//
// It writes <name>.ndjson.gz for each stream and movielens-LICENSE.txt (the
// usage license and citation sections of MovieLens' README), checks every
// event with the zero schemas.Validator, and prints events, distinct items,
// distinct users and the ts range of each stream for testdata/README.md.
// The output is deterministic: the same input gives the same bytes.
//
// Conversions:
//   - bms-webview-2: each line is a session of product-page views, items
//     separated by "-1" (a session ends at "-2" or at the end of the line).
//     One event per item: type "product", item the product id, user
//     "s<line>", event_id "bms-<n>".
//   - kosarak10k: each line is a session; the items are the tokens before the
//     first ':' other than "-1", "-2" and "SUtility", with their "[utility]"
//     suffix removed. type "article", user "s<line>", event_id "kosarak-<n>".
//   - ml-latest-small: one event per ratings.csv row: type "movie", item
//     "m<movieId>", user "u<userId>", ts the row's Unix timestamp,
//     event_id "ml-<n>". Rows are ordered by user, not time, so arrival order
//     is not event-time order.
//   - nasa-http: one event per Common Log Format line: type "path", item the
//     request path (query string included), user the client host, ts the
//     request time in UTC, event_id "nasa-<n>".
//
// n counts events from 1 in arrival order; <line> counts lines (sessions)
// from 1. The first two have no timestamps, so ts is synthetic: event n is at
// 2026-11-30T00:00:00Z + (n-1) x 10 ms, a steady 100 events per second.
// Country and region are left empty.
package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/topk-dev/topk/schemas"
)

// SyntheticStart and SyntheticStep give the ts of streams without real time:
// event n (from 1) is at SyntheticStart + (n-1)*SyntheticStep.
var SyntheticStart = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

// SyntheticStep is 10 ms: 100 events per second.
const SyntheticStep = 10 * time.Millisecond

func main() {
	data := flag.String("data", "/work/shared/data", "directory holding the source data sets")
	out := flag.String("out", "internal/streams/testdata", "directory to write the streams to")
	flag.Parse()
	if err := run(*data, *out, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// stream is one conversion: a source file and how to read events from it.
type stream struct {
	name, source string
	convert      func(r io.Reader, emit func(schemas.Event) error) error
}

var streams = []stream{
	{"bms-webview-2", "bms-webview-2.spmf.txt", convertBMS},
	{"kosarak10k", "kosarak10k.utility.txt", convertKosarak},
	{"ml-latest-small", "ml-latest-small-ratings.csv", convertMovieLens},
	{"nasa-http", "nasa-access-log-small.gz", convertNASA},
}

func run(dataDir, outDir string, report io.Writer) error {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	fmt.Fprintln(report, "| name | events | distinct items | distinct users | first ts | last ts | min ts | max ts |")
	for _, s := range streams {
		st, err := convertFile(s, dataDir, outDir)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		fmt.Fprintf(report, "| %s | %d | %d | %d | %s | %s | %s | %s |\n", s.name, st.events, len(st.items), len(st.users),
			st.first.Format(time.RFC3339), st.last.Format(time.RFC3339), st.min.Format(time.RFC3339), st.max.Format(time.RFC3339))
	}
	return writeMovieLensLicense(filepath.Join(dataDir, "ml-latest-small-README.txt"), filepath.Join(outDir, "movielens-LICENSE.txt"))
}

type stats struct {
	events                int
	items, users          map[string]bool
	first, last, min, max time.Time
}

func convertFile(s stream, dataDir, outDir string) (*stats, error) {
	in, err := os.Open(filepath.Join(dataDir, s.source))
	if err != nil {
		return nil, err
	}
	defer in.Close()
	var src io.Reader = in
	if strings.HasSuffix(s.source, ".gz") {
		zr, err := gzip.NewReader(in)
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		src = zr
	}

	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	w := bufio.NewWriter(zw)
	st := &stats{items: map[string]bool{}, users: map[string]bool{}}
	var v schemas.Validator // zero: structure only, any ts
	emit := func(e schemas.Event) error {
		if err := v.Validate(&e, time.Time{}); err != nil {
			return fmt.Errorf("event %d: %w", st.events+1, err)
		}
		line, err := json.Marshal(&e)
		if err != nil {
			return err
		}
		w.Write(line)
		w.WriteByte('\n')
		st.events++
		st.items[e.Type+"\x00"+e.Item] = true
		st.users[e.User] = true
		if st.events == 1 {
			st.first, st.min, st.max = e.TS, e.TS, e.TS
		}
		st.last = e.TS
		if e.TS.Before(st.min) {
			st.min = e.TS
		}
		if e.TS.After(st.max) {
			st.max = e.TS
		}
		return nil
	}
	if err := s.convert(src, emit); err != nil {
		return nil, err
	}
	if err := w.Flush(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return st, os.WriteFile(filepath.Join(outDir, s.name+".ndjson.gz"), buf.Bytes(), 0o644)
}

// forEachLine calls fn with each line of r (1-based number, CR/LF trimmed).
func forEachLine(r io.Reader, fn func(n int, line string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		if err := fn(n, strings.TrimRight(sc.Text(), "\r")); err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
	}
	return sc.Err()
}

func synthetic(prefix string, n int) (string, time.Time) {
	return prefix + strconv.Itoa(n), SyntheticStart.Add(time.Duration(n-1) * SyntheticStep)
}

func convertBMS(r io.Reader, emit func(schemas.Event) error) error {
	n := 0
	return forEachLine(r, func(line int, text string) error {
		for _, tok := range strings.Fields(text) {
			switch tok {
			case "-1":
				continue
			case "-2":
				return nil
			}
			if _, err := strconv.ParseUint(tok, 10, 64); err != nil {
				return fmt.Errorf("item %q is not a product id", tok)
			}
			n++
			id, ts := synthetic("bms-", n)
			if err := emit(schemas.Event{EventID: id, Type: "product", Item: tok, User: "s" + strconv.Itoa(line), TS: ts}); err != nil {
				return err
			}
		}
		return nil
	})
}

var kosarakItem = regexp.MustCompile(`^([0-9]+)\[[0-9]+\]$`)

func convertKosarak(r io.Reader, emit func(schemas.Event) error) error {
	n := 0
	return forEachLine(r, func(line int, text string) error {
		items, _, ok := strings.Cut(text, ":")
		if !ok {
			return errors.New("no ':'")
		}
		for _, tok := range strings.Fields(items) {
			switch tok {
			case "-1", "-2", "SUtility":
				continue
			}
			m := kosarakItem.FindStringSubmatch(tok)
			if m == nil {
				return fmt.Errorf("token %q is not item[utility]", tok)
			}
			n++
			id, ts := synthetic("kosarak-", n)
			if err := emit(schemas.Event{EventID: id, Type: "article", Item: m[1], User: "s" + strconv.Itoa(line), TS: ts}); err != nil {
				return err
			}
		}
		return nil
	})
}

func convertMovieLens(r io.Reader, emit func(schemas.Event) error) error {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 4
	head, err := cr.Read()
	if err != nil {
		return err
	}
	if strings.Join(head, ",") != "userId,movieId,rating,timestamp" {
		return fmt.Errorf("unexpected header %v", head)
	}
	for n := 1; ; n++ {
		rec, err := cr.Read()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		for _, f := range []string{rec[0], rec[1]} {
			if _, err := strconv.ParseUint(f, 10, 64); err != nil {
				return fmt.Errorf("row %d: id %q: %w", n, f, err)
			}
		}
		sec, err := strconv.ParseInt(rec[3], 10, 64)
		if err != nil {
			return fmt.Errorf("row %d: timestamp: %w", n, err)
		}
		e := schemas.Event{EventID: "ml-" + strconv.Itoa(n), Type: "movie", Item: "m" + rec[1], User: "u" + rec[0], TS: time.Unix(sec, 0).UTC()}
		if err := emit(e); err != nil {
			return fmt.Errorf("row %d: %w", n, err)
		}
	}
}

// clf matches a Common Log Format line: host ident user [time] "request"
// status bytes.
var clf = regexp.MustCompile(`^(\S+) \S+ \S+ \[([^\]]+)\] "([^"]*)" \S+ \S+$`)

func convertNASA(r io.Reader, emit func(schemas.Event) error) error {
	n := 0
	return forEachLine(r, func(line int, text string) error {
		m := clf.FindStringSubmatch(text)
		if m == nil {
			return fmt.Errorf("not Common Log Format: %q", text)
		}
		ts, err := time.Parse("02/Jan/2006:15:04:05 -0700", m[2])
		if err != nil {
			return err
		}
		req := strings.Fields(m[3]) // method path [protocol]
		if len(req) < 2 || len(req) > 3 {
			return fmt.Errorf("request %q is not 'METHOD path [protocol]'", m[3])
		}
		n++
		return emit(schemas.Event{EventID: "nasa-" + strconv.Itoa(n), Type: "path", Item: req[1], User: m[1], TS: ts.UTC()})
	})
}

// writeMovieLensLicense copies the "Usage License" and "Citation" sections of
// MovieLens' README: its terms require that redistributed transformations
// carry them.
func writeMovieLensLicense(readme, out string) error {
	data, err := os.ReadFile(readme)
	if err != nil {
		return err
	}
	text := string(data)
	start := strings.Index(text, "Usage License\n")
	end := strings.Index(text, "Further Information About GroupLens")
	if start < 0 || end < start {
		return errors.New("license section not found in the MovieLens README")
	}
	header := "MovieLens ml-latest-small (GroupLens Research, University of Minnesota):\n" +
		"the usage license and citation from the data set's README.txt, which apply to\n" +
		"ml-latest-small.ndjson.gz (a transformation of ratings.csv).\n" +
		"Source: https://grouplens.org/datasets/movielens/\n\n"
	return os.WriteFile(out, []byte(header+strings.TrimSpace(text[start:end])+"\n"), 0o644)
}
