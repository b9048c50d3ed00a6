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
# its JSON line. Extra arguments go to the streaming command. Publishes to
# REDIS (127.0.0.1:6379) under the prefix benchtk, whose keys it deletes
# after the run (with redis-cli, when installed).
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${RATE:-100000} DUR=${DUR:-120s} T1=${T1:-30} T2=${T2:-120}
REDIS=${REDIS:-127.0.0.1:6379}
SPEC="synthetic:rate=$RATE,duration=$DUR,items=10000000,zipf=1.1,seed=1,types=video|hashtag|search,countries=20"
BIN=$(mktemp -d)
trap 'rm -rf "$BIN"' EXIT
go build -o "$BIN/streaming" ./pipelines/streaming
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), $(date -u +%FT%TZ)"
echo "source: $SPEC; flags: $*"
while [ "$(date +%S)" != "05" ]; do sleep 0.2; done
"$BIN/streaming" --source="$SPEC" --redis="$REDIS" --redis_prefix=benchtk "$@" >"$BIN/out.json" 2>"$BIN/log" &
pid=$!
tck=$(getconf CLK_TCK)
cpu() { awk -v t="$tck" '{print ($14+$15)/t}' "/proc/$pid/stat" 2>/dev/null || true; }
sleep "$T1"; c1=$(cpu)
sleep $((T2 - T1)); c2=$(cpu); last=$c2
while kill -0 "$pid" 2>/dev/null; do x=$(cpu); [ -n "$x" ] && last=$x; sleep 1; done
wait "$pid" || { tail -20 "$BIN/log"; exit 1; }
if command -v redis-cli >/dev/null; then
	redis-cli -u "redis://$REDIS" --scan --pattern 'benchtk*' | xargs -r -n 500 redis-cli -u "redis://$REDIS" del >/dev/null
fi
awk -v a="$c1" -v b="$c2" -v c="$last" -v t1="$T1" -v t2="$T2" 'BEGIN {
	printf "cpu-s: 0-%ds %.2f, %d-%ds (steady) %.2f, %ds-exit %.2f (the last within a second)\n", t1, a, t1, t2, b - a, t2, c - b }'
tail -n1 "$BIN/out.json"
