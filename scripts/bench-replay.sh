#!/usr/bin/env bash
# bench-replay.sh: issue 9's replay benchmark (BENCHMARKS.md, "The replay on
# HEAD"): the streaming job replays an NDJSON stream of event time spread
# over SPAN (scripts/genreplay: 4M events over 80 minutes, 3 types, 8
# countries with their regions) from a file, with no Redis, writing its
# lists to a folder, and each run prints its CPU-s (user + sys of the job,
# from the shell's children times), wall time, events/s and peak RSS (the
# job's JSON line).
#
#   scripts/bench-replay.sh                          # the working tree, one run
#   RUNS=3 scripts/bench-replay.sh --trending=false  # extra arguments go to the job
#   BASE=HEAD~1 RUNS=5 scripts/bench-replay.sh       # A/B: BASE, then the working tree, alternating
#
# With BASE (a git revision, built in a temporary worktree), runs alternate
# BASE and the working tree, RUNS pairs, so that the machine's drift falls
# on both alike (this machine's noise is about +-10% a run: compare pairs,
# not single runs), and after each pair it says whether the two wrote the
# same list files byte for byte (diff -rq). The stream is made once and
# kept: STREAM (default /tmp/topk-replay-EVENTS-SPAN.ndjson; EVENTS 4000000,
# SPAN 80m).
set -euo pipefail
cd "$(dirname "$0")/.."
EVENTS=${EVENTS:-4000000} SPAN=${SPAN:-80m} RUNS=${RUNS:-1} BASE=${BASE:-}
STREAM=${STREAM:-/tmp/topk-replay-$EVENTS-$SPAN.ndjson}
TMP=$(mktemp -d)
cleanup() {
	if [ -d "$TMP/base-tree" ]; then git worktree remove --force "$TMP/base-tree" >/dev/null 2>&1 || true; fi
	rm -rf "$TMP"
}
trap cleanup EXIT
go build -o "$TMP/head" ./pipelines/streaming
if [ -n "$BASE" ]; then
	git worktree add --detach "$TMP/base-tree" "$BASE" >/dev/null 2>&1
	(cd "$TMP/base-tree" && go build -o "$TMP/base" ./pipelines/streaming)
fi
if [ ! -s "$STREAM" ]; then
	go run ./scripts/genreplay --events="$EVENTS" --span="$SPAN" --out="$STREAM"
fi
echo "machine: $(nproc) cores, $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p'), $(date -u +%FT%TZ)"
echo "stream: $STREAM ($EVENTS events over $SPAN); flags: --redis=none $*"
[ -n "$BASE" ] && echo "base: $BASE ($(git rev-parse --short "$BASE")); head: the working tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ', modified'))"

# childcpu prints the CPU-s (user + sys) of the shell's finished children
# (times runs in this shell: in a command substitution it would count a
# subshell's children).
childcpu() {
	times >"$TMP/times"
	awk 'NR == 2 {
		n = split($0, f, " "); s = 0
		for (i = 1; i <= n; i++) { split(f[i], p, "m"); sub("s", "", p[2]); s += p[1] * 60 + p[2] }
		printf "%.2f", s }' "$TMP/times"
}

# run NAME: one replay by the binary NAME into $TMP/out-NAME.
run() {
	local name=$1 before after start end
	shift
	rm -rf "$TMP/out-$name"
	# The last run's 120,000 list files written back and their deletion
	# done before this run starts, not during it (the file sink's kernel
	# time varied from 8 to 19 CPU-s between runs).
	sync
	childcpu >"$TMP/before"
	start=$(date +%s.%N)
	if ! "$TMP/$name" --source="file:$STREAM" --redis=none --lists_out="$TMP/out-$name" "$@" >"$TMP/json" 2>"$TMP/log"; then
		tail -20 "$TMP/log"
		exit 1
	fi
	end=$(date +%s.%N)
	childcpu >"$TMP/after"
	before=$(cat "$TMP/before") after=$(cat "$TMP/after")
	tail -n1 "$TMP/json" | awk -v n="$name" -v b="$before" -v a="$after" -v s="$start" -v e="$end" '{
		match($0, /"events_per_s":[0-9.]+/); eps = substr($0, RSTART + 15, RLENGTH - 15)
		match($0, /"peak_rss_mb":[0-9.]+/); rss = substr($0, RSTART + 14, RLENGTH - 14)
		match($0, /"lists":[0-9]+/); l = substr($0, RSTART + 8, RLENGTH - 8)
		printf "%-5s %7.1f CPU-s  %6.1f s wall  %7.0f events/s  peak RSS %5.2f GB  %s lists\n", n, a - b, e - s, eps, rss / 1024, l
	}'
}

for i in $(seq 1 "$RUNS"); do
	if [ -n "$BASE" ]; then
		run base "$@"
		run head "$@"
		if diff -rq "$TMP/out-base" "$TMP/out-head" >/dev/null; then
			echo "pair $i: the same list files, byte for byte"
		else
			echo "pair $i: list files differ ($(diff -rq "$TMP/out-base" "$TMP/out-head" | wc -l) paths)"
		fi
	else
		run head "$@"
	fi
done
