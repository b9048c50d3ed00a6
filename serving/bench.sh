#!/usr/bin/env bash
# Serving benchmark (BENCHMARKS.md, "Serving"): GET /v1/top k=100 under wrk
# from a second process on loopback, and redis-benchmark GET of the same
# list blob (and of a value the size of the k=100 answer) from the same
# private Redis. Needs redis-server, redis-benchmark and wrk (Debian
# packages). Bounded: DURATION seconds per wrk run (default 15).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-15}
CONNS=${CONNS:-32}
# One wrk thread: the load generator gets one core and the server the other,
# as redis-benchmark (single-threaded) does against Redis.
THREADS=${THREADS:-1}
RPORT=${RPORT:-16399}
HPORT=${HPORT:-18089}
# PIN=1: the servers (the API, Redis) on CPU 1 and the load generators (wrk,
# redis-benchmark) on CPU 0, as if the load came from another machine: no
# thread of one waits for a core behind the other's. Unpinned by default.
srv=() cli=()
if [[ ${PIN:-0} == 1 ]]; then srv=(taskset -c 1) cli=(taskset -c 0); fi
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

go build -o "$tmp/serving" ./serving
go build -o "$tmp/benchlist" ./serving/benchlist
"${srv[@]}" redis-server --port "$RPORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$tmp" >/dev/null &
pids+=($!)
for _ in $(seq 50); do redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
blob=$("$tmp/benchlist" --redis "127.0.0.1:$RPORT")
"${srv[@]}" "$tmp/serving" --addr "127.0.0.1:$HPORT" --redis "127.0.0.1:$RPORT" --log_level=warn &
pids+=($!)
url="http://127.0.0.1:$HPORT/v1/top?type=video&scope=global&window=1h&k=100"
for _ in $(seq 100); do curl -sf "$url" >/dev/null && break; sleep 0.1; done
echo "== machine: $(nproc) cores (PIN=${PIN:-0}), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== response: $(curl -s "$url" | wc -c) bytes"
wrk -t2 -c8 -d3s "$url" >/dev/null # warm-up
cpu() { awk '{print $14, $15}' "/proc/$1/stat"; }
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8, $5+$6}' /proc/stat; }
tck=$(getconf CLK_TCK)
run() { # $1: label, rest: extra wrk args
  local label=$1; shift
  echo "== wrk -t$THREADS -c$CONNS -d${DURATION}s --latency $* GET /v1/top k=100 ($label), load $(cut -d' ' -f1-3 /proc/loadavg)"
  read -r u0 s0 < <(cpu "${pids[1]}"); read -r b0 i0 < <(busy)
  "${cli[@]}" wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency "$@" "$url" | tee "$tmp/wrk.out"
  read -r u1 s1 < <(cpu "${pids[1]}"); read -r b1 i1 < <(busy)
  reqs=$(awk '/requests in/{print $1}' "$tmp/wrk.out")
  awk -v r="$reqs" -v u=$((u1-u0)) -v s=$((s1-s0)) -v t="$tck" -v b=$((b1-b0)) -v i=$((i1-i0)) 'BEGIN{
    printf "== API process CPU: %.2f s user + %.2f s system for %d requests = %.1f us/request (%.0f requests/s per core); machine %.0f%% busy\n",
      u/t, s/t, r, 1e6*(u+s)/t/r, r/((u+s)/t), 100*b/(b+i) }'
}
run identity
run gzip -H "Accept-Encoding: gzip"
kill "${pids[1]}" # the API is done: give Redis the machine
for key in "$blob" topk:bench:k100; do
  echo "== redis-benchmark -c $CONNS -n 200000 GET $key ($(redis-cli -p "$RPORT" strlen "$key") bytes), load $(cut -d' ' -f1-3 /proc/loadavg)"
  "${cli[@]}" redis-benchmark -p "$RPORT" -c "$CONNS" -n 200000 GET "$key" 2>&1 | tr '\r' '\n' | grep -E 'throughput summary|latency summary' -A2 || true
done
