// Command genarchive writes one closed event hour of synthetic events into an
// archive root, in the layout and file format of transforms/archive:
//
//	ROOT/events/hour=YYYY-MM-DDTHH/part-<writer>-<seq>.parquet  (zstd, parquet-go GenericWriter)
//	ROOT/events/hour=YYYY-MM-DDTHH/_CLOSED
//
// It is the input of the exact recount benchmark (scripts/bench-recount.sh):
//
//	go run ./scripts/genarchive --root=/tmp/arch --hour=2026-11-30T10 --n=20000000
//
// Items are Zipf(--zipf) over --items ranks; a fraction --dup of the rows are
// redeliveries (a copy of an earlier row of the same file, same event_id);
// types, countries and regions are drawn from small fixed sets so that the
// global, country and region scopes all exist. Timestamps rise through the
// hour. The output is a function of the flags only: file f is generated from
// its own seed (--seed, f), so the files are the same whatever --workers.
// The last line on stdout is a JSON summary with the exact totals.
package main

import (
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/topk-dev/topk/internal/zipf"
	"github.com/topk-dev/topk/schemas"
)

type weighted struct {
	v string
	w float64
}

var (
	types = []weighted{{"product", 0.6}, {"search", 0.25}, {"hashtag", 0.15}}
	// country "" is an event without a country (global scope only).
	countries = []weighted{{"US", 0.3}, {"IN", 0.2}, {"BR", 0.1}, {"DE", 0.08}, {"GB", 0.07}, {"JP", 0.06}, {"FR", 0.05}, {"MX", 0.04}, {"", 0.1}}
	// Four regions per country; a fifth of the events with a country have no region.
	regionSuffixes = []string{"R1", "R2", "R3", "R4"}
)

func pick(ws []weighted, u float64) string {
	for _, w := range ws {
		if u < w.w {
			return w.v
		}
		u -= w.w
	}
	return ws[len(ws)-1].v
}

type config struct {
	root            string
	hour            time.Time
	n, items, part  int
	s, dup          float64
	seed            uint64
	writer          string
	workers         int
	users, chunkLen int
}

type fileStats struct {
	rows, dups int
	bytes      int64
}

func main() {
	var c config
	var hour string
	flag.StringVar(&c.root, "root", "", "archive root (local folder; required)")
	flag.StringVar(&hour, "hour", "2026-11-30T10", "event hour, YYYY-MM-DDTHH (UTC)")
	flag.IntVar(&c.n, "n", 20_000_000, "rows in the hour (duplicates included)")
	flag.IntVar(&c.items, "items", 10_000_000, "distinct items (Zipf ranks)")
	flag.Float64Var(&c.s, "zipf", 1.1, "Zipf exponent")
	flag.Float64Var(&c.dup, "dup", 0.01, "fraction of rows that repeat an earlier event_id")
	flag.IntVar(&c.part, "part_rows", 1_000_000, "rows per part file")
	flag.Uint64Var(&c.seed, "seed", 1, "seed")
	flag.StringVar(&c.writer, "writer", "gen", "writer id in the file names (part-<writer>-<seq>.parquet)")
	flag.IntVar(&c.workers, "workers", 2, "files generated in parallel")
	flag.IntVar(&c.users, "users", 1_000_000, "distinct users")
	flag.Parse()
	if c.root == "" || c.n <= 0 || c.items <= 0 || c.part <= 0 || c.dup < 0 || c.dup >= 1 || c.workers <= 0 {
		log.Fatal("genarchive: need --root, and positive --n, --items, --part_rows, --workers, 0 <= --dup < 1")
	}
	h, err := time.Parse("2006-01-02T15", hour)
	if err != nil {
		log.Fatalf("genarchive: --hour=%q: %v", hour, err)
	}
	c.hour = h.UTC()
	dir := filepath.FromSlash(schemas.ArchiveHourPath(c.root, c.hour))
	if _, err := os.Stat(filepath.Join(dir, schemas.ArchiveClosed)); err == nil {
		log.Fatalf("genarchive: %s is already closed; remove it first", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		log.Fatal(err)
	}
	start := time.Now()
	nFiles := (c.n + c.part - 1) / c.part
	stats := make([]fileStats, nFiles)
	errs := make([]error, nFiles)
	next := make(chan int)
	var wg sync.WaitGroup
	for range c.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range next {
				stats[f], errs[f] = writeFile(&c, dir, f)
			}
		}()
	}
	for f := range nFiles {
		next <- f
	}
	close(next)
	wg.Wait()
	var total fileStats
	for f := range nFiles {
		if errs[f] != nil {
			log.Fatalf("genarchive: file %d: %v", f, errs[f])
		}
		total.rows += stats[f].rows
		total.dups += stats[f].dups
		total.bytes += stats[f].bytes
	}
	body := fmt.Sprintf("{\"hour\":%q,\"closed_at\":%q,\"writer\":%q}\n",
		c.hour.Format(time.RFC3339), time.Date(c.hour.Year(), c.hour.Month(), c.hour.Day(), c.hour.Hour()+1, 10, 0, 0, time.UTC).Format(time.RFC3339Nano), c.writer)
	if err := os.WriteFile(filepath.Join(dir, schemas.ArchiveClosed), []byte(body), 0o644); err != nil {
		log.Fatal(err)
	}
	out := map[string]any{
		"dir": dir, "hour": hour, "files": nFiles, "rows": total.rows, "duplicates": total.dups,
		"unique_events": total.rows - total.dups, "bytes": total.bytes, "items": c.items, "zipf": c.s,
		"seed": c.seed, "seconds": time.Since(start).Seconds(),
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		log.Fatal(err)
	}
}

// writeFile generates and writes part file f (rows [f*part, min(n, (f+1)*part))).
func writeFile(c *config, dir string, f int) (fileStats, error) {
	var st fileStats
	lo := f * c.part
	hi := min(c.n, lo+c.part)
	seed := c.seed*0x9e3779b97f4a7c15 + uint64(f)
	rng := rand.New(rand.NewPCG(seed, uint64(f)+1))
	z := zipf.New(seed^0xabcdef, c.s, uint64(c.items))
	// Row i's timestamp: spread evenly over the hour, in row order.
	hourMs := c.hour.UnixMilli()
	rows := make([]schemas.ArchiveEvent, 0, hi-lo)
	var idBuf [16]byte
	for i := lo; i < hi; i++ {
		ts := time.UnixMilli(hourMs + int64(i)*3_600_000/int64(c.n)).UTC()
		if len(rows) > 0 && rng.Float64() < c.dup {
			// A redelivery: the same event as an earlier row of this file
			// (up to 100k rows back), written again later.
			back := 1 + rng.IntN(min(len(rows), 100_000))
			rows = append(rows, rows[len(rows)-back])
			st.dups++
			continue
		}
		for j := 0; j < 16; j += 8 {
			v := rng.Uint64()
			for k := range 8 {
				idBuf[j+k] = byte(v >> (8 * k))
			}
		}
		country := pick(countries, rng.Float64())
		region := ""
		if country != "" && rng.Float64() < 0.8 {
			region = country + "-" + regionSuffixes[rng.IntN(len(regionSuffixes))]
		}
		user := ""
		if rng.Float64() < 0.9 {
			user = "u" + strconv.Itoa(rng.IntN(c.users))
		}
		rows = append(rows, schemas.ArchiveEvent{
			EventID: hex.EncodeToString(idBuf[:]),
			Type:    pick(types, rng.Float64()),
			Item:    "i" + strconv.FormatUint(z.Next(), 10),
			User:    user,
			TS:      ts,
			Country: country,
			Region:  region,
		})
	}
	st.rows = len(rows)
	name := fmt.Sprintf("part-%s-%06d.parquet", c.writer, f+1)
	tmp, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return st, err
	}
	defer os.Remove(tmp.Name())
	pw := parquet.NewGenericWriter[schemas.ArchiveEvent](tmp, parquet.Compression(&parquet.Zstd))
	if _, err := pw.Write(rows); err != nil {
		tmp.Close()
		return st, err
	}
	if err := pw.Close(); err != nil {
		tmp.Close()
		return st, err
	}
	fi, err := tmp.Stat()
	if err != nil {
		tmp.Close()
		return st, err
	}
	st.bytes = fi.Size()
	if err := tmp.Close(); err != nil {
		return st, err
	}
	return st, os.Rename(tmp.Name(), filepath.Join(dir, name))
}
