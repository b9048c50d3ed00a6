package recount

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/parquet-go/parquet-go"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/archive"
	"github.com/topk-dev/topk/transforms/rules"
)

// BenchmarkBuildHour runs only the recount's Beam job (Build on the default
// runner, Prism in-process) on one archive hour, without the Bigtable phase:
//
//	go test -c -o /tmp/exact.test ./pipelines/recount
//	TOPK_RECOUNT_ARCHIVE=/tmp/topk-recount-bench/20000000 /usr/bin/time -v \
//	  /tmp/exact.test -test.run='^$' -test.bench=BuildHour -test.benchtime=1x
//
// Environment: TOPK_RECOUNT_ARCHIVE (archive root; the benchmark is skipped
// without it), TOPK_RECOUNT_HOUR (default 2026-11-30T10), TOPK_RECOUNT_SHARDS
// and TOPK_RECOUNT_PARTS (default: the command's defaults),
// TOPK_RECOUNT_READERS and TOPK_RECOUNT_WAVES (default 0: HourJob's
// defaults), TOPK_RECOUNT_RULES (all: rules.DefaultConfig; default: no
// rules), TOPK_RECOUNT_HEAPPROF (a heap profile written near the peak of
// RSS). It reports the job's wall time, events/s and the process's peak RSS
// (VmHWM) at the end of the job, then checks that every part file is sorted
// and logs the rows and the sum of the counts (compare with
// scripts/mapcount's rows and scope_counts).
func BenchmarkBuildHour(b *testing.B) {
	root := os.Getenv("TOPK_RECOUNT_ARCHIVE")
	if root == "" {
		b.Skip("TOPK_RECOUNT_ARCHIVE (an archive root) not set")
	}
	hourS := cmp(os.Getenv("TOPK_RECOUNT_HOUR"), "2026-11-30T10")
	hour, err := time.Parse("2006-01-02T15", hourS)
	if err != nil {
		b.Fatal(err)
	}
	shards, parts := envInt(b, "TOPK_RECOUNT_SHARDS", DefaultShards), envInt(b, "TOPK_RECOUNT_PARTS", DefaultParts)
	files, closed, err := archive.ListHour(root, hour)
	if err != nil || !closed || len(files) == 0 {
		b.Fatalf("archive hour %s in %s: %d files, closed %v, err %v", hourS, root, len(files), closed, err)
	}
	if path := os.Getenv("TOPK_RECOUNT_HEAPPROF"); path != "" {
		stop := heapAtPeak(path)
		defer stop()
	}
	var rc *rules.Config
	if os.Getenv("TOPK_RECOUNT_RULES") == "all" {
		c := rules.DefaultConfig()
		rc = &c
	}
	for range b.N {
		staging := b.TempDir()
		start := time.Now()
		p, s := beam.NewPipelineWithRoot()
		Build(s, HourJob{Hour: hour, Files: files, Staging: staging, Shards: shards, Parts: parts,
			Readers: envInt(b, "TOPK_RECOUNT_READERS", 0), Waves: envInt(b, "TOPK_RECOUNT_WAVES", 0), Rules: rc})
		m, err := BeamRunner(context.Background(), p)
		if err != nil {
			b.Fatal(err)
		}
		wall := time.Since(start).Seconds()
		hwm := vmHWM()
		b.ReportMetric(wall, "wall_s")
		b.ReportMetric(float64(m["exact_events_read"])/wall, "events/s")
		b.ReportMetric(float64(hwm)/1024, "peak_rss_MB")
		b.Logf("shards %d parts %d: %.1f s, peak RSS %d MB, metrics %v", shards, parts, wall, hwm/1024, m)
		rows, sum := checkParts(b, staging)
		b.Logf("count rows %d, scope counts %d", rows, sum)
	}
}

// checkParts reads the part files one at a time, checks each is in
// sortCounts order, and returns the rows and the sum of the counts.
func checkParts(b *testing.B, dir string) (rows, sum int64) {
	paths, err := filepath.Glob(filepath.Join(dir, "part-*.parquet"))
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range paths {
		rs, err := parquet.ReadFile[schemas.ExactCount](p)
		if err != nil {
			b.Fatal(err)
		}
		for i := 1; i < len(rs); i++ {
			x, y := &rs[i-1], &rs[i]
			if [2]string{x.Type, x.Scope} == [2]string{y.Type, y.Scope} && (x.Count < y.Count || x.Count == y.Count && x.Item >= y.Item) ||
				x.Type > y.Type || x.Type == y.Type && x.Scope > y.Scope {
				b.Fatalf("%s: rows %d and %d out of order: %+v %+v", p, i-1, i, *x, *y)
			}
		}
		for _, r := range rs {
			sum += r.Count
		}
		rows += int64(len(rs))
	}
	return rows, sum
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		b.Fatalf("%s=%q: want a non-negative integer", name, v)
	}
	return n
}

func cmp(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// heapAtPeak writes a heap profile to path every time the process's RSS
// passes its previous maximum by 256 MB (checked every 500 ms), so the last
// profile written is from near the peak.
func heapAtPeak(path string) (stop func()) {
	done := make(chan struct{})
	go func() {
		var max int64
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if rss := vmRSS(); rss > max+256<<10 {
				max = rss
				if f, err := os.Create(path); err == nil {
					pprof.Lookup("heap").WriteTo(f, 0)
					f.Close()
				}
			}
		}
	}()
	return func() { close(done) }
}

func vmRSS() int64 { return procStatus("VmRSS:") }

// vmHWM is the process's peak resident set size in KB.
func vmHWM() int64 { return procStatus("VmHWM:") }

func procStatus(field string) int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(l, field); ok {
			var n int64
			fmt.Sscanf(strings.TrimSpace(rest), "%d", &n)
			return n
		}
	}
	return -1
}
