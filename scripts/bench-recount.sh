#!/usr/bin/env bash
# bench-recount.sh: throughput of the exact recount (pipelines/exact) on one
# closed archive hour, next to its floor (scripts/mapcount: one Go process
# counting the same Parquet files in maps) and DuckDB's GROUP BY over the
# same files (issue 5).
#
#   scripts/bench-recount.sh                 # 20M events in /tmp/topk-recount-bench/20000000
#   N=5000000 scripts/bench-recount.sh       # 5M
#   scripts/bench-recount.sh /data/archive   # an existing (or new) archive root
#
# The hour is generated with scripts/genarchive unless its _CLOSED marker
# exists. Every command runs under /usr/bin/time -v; the table gives wall,
# CPU (user+sys) and peak RSS from it, and events/s = rows / wall.
#
# Bigtable: the recount runs with no BIGTABLE_EMULATOR_HOST, so it starts its
# embedded in-process bttest, whose CPU and memory are part of the recount's
# numbers. Export BIGTABLE_EMULATOR_HOST (scripts/emulators.sh start) to use
# the emulator instead; its CPU and memory are then not counted.
#
# Environment:
#   N                rows in the hour (default 20000000)
#   HOUR             event hour (default 2026-11-30T10)
#   SEED             genarchive seed (default 1)
#   WORK             binaries, logs and (by default) the archive (default /tmp/topk-recount-bench)
#   RECOUNT_TIMEOUT  seconds before the recount is killed (default 1800)
#   MAX_RSS_GB       a command whose RSS passes this is killed (default 18)
#   RECOUNT_ARGS     extra flags for the recount (e.g. --shards=4 --parts=4)
#   CPUPROFILE       when set, run the recount a second time with
#                    --cpuprofile writing a CPU profile of the whole run here
#   DUCKDB           auto (default): build github.com/duckdb/duckdb-go/v2 in a
#                    throwaway module under WORK/duckbench and run it; skip: don't
#
# The generated archive is kept for reruns: rm -rf WORK when done.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
N=${N:-20000000}
HOUR=${HOUR:-2026-11-30T10}
SEED=${SEED:-1}
WORK=${WORK:-/tmp/topk-recount-bench}
ROOT=${1:-$WORK/$N}
RECOUNT_TIMEOUT=${RECOUNT_TIMEOUT:-1800}
RECOUNT_ARGS=${RECOUNT_ARGS:-}
MAX_RSS_GB=${MAX_RSS_GB:-18}
DUCKDB=${DUCKDB:-auto}
DUCKDB_VERSION=v2.10506.0
BIN=$WORK/bin
LOGS=$WORK/logs-$N
mkdir -p "$BIN" "$LOGS"

log() { echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): $*" >&2; }

log "building (repo $(git -C "$REPO" rev-parse --short HEAD)$(git -C "$REPO" diff --quiet -- pipelines transforms schemas || echo ', uncommitted changes in pipelines/transforms/schemas'))"
(cd "$REPO" && go build -o "$BIN/genarchive" ./scripts/genarchive && go build -o "$BIN/mapcount" ./scripts/mapcount &&
	go build -o "$BIN/exact" ./pipelines/exact)

dir="$ROOT/events/hour=$HOUR"
if [[ ! -e $dir/_CLOSED ]]; then
	log "generating $N rows into $dir"
	rm -rf "$dir"
	"$BIN/genarchive" --root="$ROOT" --hour="$HOUR" --n="$N" --seed="$SEED" | tee "$LOGS/genarchive.json" >&2
fi
# timed NAME CMD...: runs CMD under /usr/bin/time -v with stdout/stderr in
# LOGS/NAME.{out,err}; appends "NAME wall cpu rss_kb rc load" to LOGS/results.
timed() {
	local name=$1 rc=0
	shift
	local load
	load=$(cut -d' ' -f1 /proc/loadavg)
	log "running $name: $*"
	/usr/bin/time -v "$@" >"$LOGS/$name.out" 2>"$LOGS/$name.err" &
	local tpid=$! peak=0
	# Memory guard: SIGKILL the biggest process under the command when its
	# RSS passes MAX_RSS_GB, so an out-of-memory run does not make the
	# kernel pick a victim on a shared machine.
	while kill -0 "$tpid" 2>/dev/null; do
		local big
		big=$(ps -o pid=,rss= --ppid "$(pgrep -d, -P "$tpid" || echo "$tpid"),$tpid" 2>/dev/null | sort -k2 -n | tail -1)
		if [[ -n $big ]] && ((${big##* } > peak)); then peak=${big##* }; fi
		if [[ -n $big ]] && ((${big##* } > MAX_RSS_GB * 1048576)); then
			log "$name: RSS ${big##* } KB > $MAX_RSS_GB GB: killing pid ${big%% *}"
			echo "killed by bench-recount.sh at RSS ${big##* } KB" >>"$LOGS/$name.killed"
			kill -9 "${big%% *}" 2>/dev/null || true
		fi
		sleep 1
	done
	wait "$tpid" || rc=$?
	local wall user sys rss
	wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {n=split($2,a,":"); s=0; for(i=1;i<=n;i++) s=s*60+a[i]; print s}' "$LOGS/$name.err")
	user=$(awk -F': ' '/User time/ {print $2}' "$LOGS/$name.err")
	sys=$(awk -F': ' '/System time/ {print $2}' "$LOGS/$name.err")
	rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$LOGS/$name.err")
	echo "$name ${wall:-0} $(echo "${user:-0} + ${sys:-0}" | bc) ${rss:-0} $rc $load" >>"$LOGS/results"
	log "$name: rc=$rc wall=${wall}s cpu=$(echo "${user:-0} + ${sys:-0}" | bc)s rss=${rss}KB"
}

: >"$LOGS/results"

# Floor.
timed mapcount "$BIN/mapcount" --archive="$ROOT" --hour="$HOUR"
# The rows actually in the hour (the archive may be an existing one).
rows=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["events"])' "$LOGS/mapcount.out" 2>/dev/null || echo "$N")

# Recount: a fresh run (the exact table is overwritten anyway).
rm -rf "$ROOT/exact"
# shellcheck disable=SC2086
(cd "$WORK" && timed recount timeout "$RECOUNT_TIMEOUT" "$BIN/exact" --hour="$HOUR" --archive="$ROOT" $RECOUNT_ARGS)
# Split the recount's wall into the Beam job (start to "pipeline done!") and
# what follows it (reading the staging files, the Parquet table, Bigtable).
python3 - "$LOGS/recount.err" >"$LOGS/recount.phases" <<'PY' || true
import re, sys, datetime
ts = lambda l: datetime.datetime.fromisoformat(re.search(r'time=(\S+)', l).group(1).replace('Z', '+00:00'))
lines = [l for l in open(sys.argv[1]) if l.startswith('time=')]
first = ts(lines[0]); done = [ts(l) for l in lines if 'pipeline done!' in l]
print("beam_job_s=%.1f" % ((done[0] - first).total_seconds() if done else -1))
PY

# DuckDB, in a throwaway module outside the repo.
if [[ $DUCKDB != skip ]]; then
	db=$WORK/duckbench
	mkdir -p "$db"
	if [[ ! -x $db/duckbench ]]; then
		cat >"$db/main.go" <<'GO'
// Command duckbench counts one archive hour with DuckDB: dedupe by event_id
// (row_number over event_id), then GROUP BY (type, scope, item) over the
// global, country and region scopes. Prints JSON.
package main

import (
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	_ "github.com/duckdb/duckdb-go/v2"
)

func main() {
	glob := flag.String("glob", "", "parquet glob")
	threads := flag.Int("threads", 2, "duckdb threads")
	flag.Parse()
	db, err := sql.Open("duckdb", "")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if _, err := db.Exec(fmt.Sprintf("SET threads=%d", *threads)); err != nil {
		panic(err)
	}
	src := strings.ReplaceAll(*glob, "'", "''")
	start := time.Now()
	q := fmt.Sprintf(`
WITH r AS (SELECT event_id, type, item, country, region FROM read_parquet('%[1]s')),
d AS (
  SELECT type, item, country, region FROM (
    SELECT *, row_number() OVER (PARTITION BY event_id ORDER BY type, item, country, region) AS rn FROM r
  ) WHERE rn = 1
), s AS (
  SELECT type, 'global' AS scope, item FROM d
  UNION ALL SELECT type, country, item FROM d WHERE coalesce(country, '') <> ''
  UNION ALL SELECT type, region, item FROM d WHERE coalesce(country, '') <> '' AND coalesce(region, '') <> ''
)
SELECT (SELECT count(*) FROM r), (SELECT count(*) FROM d), count(*), sum(n)
FROM (SELECT type, scope, item, count(*) AS n FROM s GROUP BY ALL)`, src)
	var events, counted, rows, sum int64
	if err := db.QueryRow(q).Scan(&events, &counted, &rows, &sum); err != nil {
		panic(err)
	}
	el := time.Since(start).Seconds()
	json.NewEncoder(os.Stdout).Encode(map[string]any{"tool": "duckdb", "events": events, "counted": counted,
		"rows": rows, "scope_counts": sum, "seconds": el, "events_per_s": float64(events) / el})
}
GO
		printf 'module duckbench\n\ngo 1.26.0\n' >"$db/go.mod"
		log "building DuckDB $DUCKDB_VERSION in $db (cgo; 600 s limit)"
		if ! (cd "$db" && timeout 600 go get "github.com/duckdb/duckdb-go/v2@$DUCKDB_VERSION" &&
			timeout 600 go build -o "$db/duckbench" .) >"$LOGS/duckdb-build.log" 2>&1; then
			log "DuckDB did not build; skipped (see $LOGS/duckdb-build.log)"
		fi
	fi
	if [[ -x $db/duckbench ]]; then
		timed duckdb "$db/duckbench" --glob="$dir/*.parquet" --threads=2
	fi
fi

# Optional CPU profile of the recount: a second run with --cpuprofile.
if [[ -n ${CPUPROFILE:-} ]]; then
	rm -rf "$ROOT/exact"
	# shellcheck disable=SC2086
	(cd "$WORK" && timed recount-profiled timeout "$RECOUNT_TIMEOUT" "$BIN/exact" --hour="$HOUR" --archive="$ROOT" --cpuprofile="$CPUPROFILE" $RECOUNT_ARGS)
	go tool pprof -top -nodecount=40 "$BIN/exact" "$CPUPROFILE" >"$LOGS/recount.pprof-top.txt" 2>&1 || true
	go tool pprof -top -cum -nodecount=40 "$BIN/exact" "$CPUPROFILE" >"$LOGS/recount.pprof-cum.txt" 2>&1 || true
	log "profile: $CPUPROFILE; top in $LOGS/recount.pprof-{top,cum}.txt"
fi

# Table.
floor_wall=$(awk '$1=="mapcount" {print $2}' "$LOGS/results")
echo
echo "N=$rows rows, hour $HOUR, root $ROOT ($(du -sh "$dir" | cut -f1) of Parquet); $(cat "$LOGS/recount.phases" 2>/dev/null)"
echo
echo "| command | rc | events/s | wall s | CPU s | peak RSS | wall vs floor | load at start |"
echo "|---|---|---|---|---|---|---|---|"
while read -r name wall cpu rss rc load; do
	awk -v n="$name" -v w="$wall" -v c="$cpu" -v r="$rss" -v rc="$rc" -v l="$load" -v N="$rows" -v f="$floor_wall" \
		'BEGIN { printf "| %s | %s | %.0f | %.1f | %.1f | %.2f GB | %.2fx | %s |\n", n, rc, (w>0?N/w:0), w, c, r/1048576, (f>0?w/f:0), l }'
done <"$LOGS/results"
echo
for f in "$LOGS"/*.out; do echo "$(basename "$f"): $(tail -c 1000 "$f")"; done
