#!/usr/bin/env bash
# bench-steady.sh: the streaming job's CPU by phase, so that a stage's cost
# is read in steady state rather than over a bounded run whose start-up and
# end-of-input flush weigh differently on each stage (BENCHMARKS.md,
# "Trending's cost in steady state").
#
#   RATE=100000 scripts/bench-steady.sh --trending=false
#   RATE=500000 scripts/bench-steady.sh --scopes=false
#
# Runs the synthetic source (3 types, 20 countries with their regions, 10M
# items, Zipf 1.1) for DUR (120s), starting at second 05 of a minute, and
# prints the job's own CPU-s (utime + stime of /proc/PID/stat) over 0-T1 s,
# T1-T2 s (the steady window, default 30-120 s) and T2 s to its exit, then
# its JSON line, and the events the job counted in the steady window (its
# Prometheus counter topk_stream_events_total{stage="counted"}, served on
# METRICS, 127.0.0.1:19190 by default) with the CPU-s per million of them
# (the figure to compare when the job cannot keep up with RATE on this
# machine: it then counts fewer events than RATE x the window, in bigger
# bundles), and the bytes of trending's users tallies per counted event
# (topk_stream_trend_tally_bytes_total: the volume most of trending's cost
# follows), and the bytes of the summary sets the pre-aggregation sends
# to the bucket merge per counted event
# (topk_stream_preagg_summary_bytes_total: the shuffle's volume, which
# grows with early flushes). Extra arguments go to the streaming command.
# Publishes to REDIS (127.0.0.1:6379) under the prefix benchtk, whose keys
# it deletes after the run (with redis-cli, when installed).
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${RATE:-100000} DUR=${DUR:-120s} T1=${T1:-30} T2=${T2:-120}
REDIS=${REDIS:-127.0.0.1:6379} METRICS=${METRICS:-127.0.0.1:19190}
SPEC="synthetic:rate=$RATE,duration=$DUR,items=10000000,zipf=1.1,seed=1,types=video|hashtag|search,countries=20"
BIN=$(mktemp -d)
trap 'rm -rf "$BIN"' EXIT
go build -o "$BIN/streaming" ./pipelines/streaming
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), $(date -u +%FT%TZ)"
echo "source: $SPEC; flags: $*"
while [ "$(date +%S)" != "05" ]; do sleep 0.2; done
"$BIN/streaming" --source="$SPEC" --redis="$REDIS" --redis_prefix=benchtk --metrics_addr="$METRICS" "$@" >"$BIN/out.json" 2>"$BIN/log" &
pid=$!
tck=$(getconf CLK_TCK)
cpu() { awk -v t="$tck" '{print ($14+$15)/t}' "/proc/$pid/stat" 2>/dev/null || true; }
metric() { # the job's counter $1 (a full series name), as an integer
	curl -fsS "http://$METRICS/metrics" 2>/dev/null | awk -v m="$1" 'index($0, m " ") == 1 {printf "%.0f", $2}'
}
counted='topk_stream_events_total{stage="counted"}' tb=topk_stream_trend_tally_bytes_total sb=topk_stream_preagg_summary_bytes_total
sleep "$T1"; c1=$(cpu); e1=$(metric "$counted"); b1=$(metric $tb); s1=$(metric $sb)
sleep $((T2 - T1)); c2=$(cpu); e2=$(metric "$counted"); b2=$(metric $tb); s2=$(metric $sb); last=$c2
while kill -0 "$pid" 2>/dev/null; do x=$(cpu); [ -n "$x" ] && last=$x; sleep 1; done
wait "$pid" || { tail -20 "$BIN/log"; exit 1; }
if command -v redis-cli >/dev/null; then
	redis-cli -u "redis://$REDIS" --scan --pattern 'benchtk*' | xargs -r -n 500 redis-cli -u "redis://$REDIS" del >/dev/null
fi
awk -v a="$c1" -v b="$c2" -v c="$last" -v t1="$T1" -v t2="$T2" -v e1="${e1:-0}" -v e2="${e2:-0}" -v b1="${b1:-0}" -v b2="${b2:-0}" -v s1="${s1:-0}" -v s2="${s2:-0}" 'BEGIN {
	printf "cpu-s: 0-%ds %.2f, %d-%ds (steady) %.2f, %ds-exit %.2f (the last within a second)\n", t1, a, t1, t2, b - a, t2, c - b
	if (e2 > e1) printf "steady: %d events counted (%.0f/s), %.2f cpu-s per million; trending tallies %.1f MB/s, %.2f bytes per event; summary sets %.2f bytes per event\n", e2 - e1, (e2 - e1) / (t2 - t1), (b - a) * 1e6 / (e2 - e1), (b2 - b1) / 1e6 / (t2 - t1), (b2 - b1) / (e2 - e1), (s2 - s1) / (e2 - e1) }'
tail -n1 "$BIN/out.json"
