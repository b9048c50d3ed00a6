#!/usr/bin/env bash
# bench-fastpath.sh: the fast path against the naive Beam baseline on the same
# synthetic input, on Prism in-process, one after the other.
#
#   scripts/bench-fastpath.sh                      # 1M events/s offered for 2 minutes
#   SPEC=synthetic:rate=200000,duration=1m scripts/bench-fastpath.sh
#
# Prints each pipeline's JSON line, then wall/user/sys seconds and max RSS
# from /usr/bin/time, and CPU-seconds per million events.
set -euo pipefail
cd "$(dirname "$0")/.."
SPEC=${SPEC:-synthetic:rate=1000000,duration=2m,items=10000000,zipf=1.1,beacon=500}
BIN=$(mktemp -d)
trap 'rm -rf "$BIN"' EXIT
go build -o "$BIN/streaming" ./pipelines/streaming
go build -o "$BIN/naive" ./pipelines/naive
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), $(date -u +%F)"
echo "source: $SPEC"
run() {
	local name=$1; shift
	/usr/bin/time -f "$name time: wall %e s, user %U s, sys %S s, max RSS %M KB" -o "$BIN/$name.time" "$@" 2>"$BIN/$name.log" >"$BIN/$name.json" || { tail -20 "$BIN/$name.log"; exit 1; }
	cat "$BIN/$name.json" "$BIN/$name.time"
	python3 - "$BIN/$name.json" "$BIN/$name.time" <<'PY'
import json, re, sys
j = json.load(open(sys.argv[1]))
t = open(sys.argv[2]).read()
u, s = (float(x) for x in re.search(r"user ([\d.]+) s, sys ([\d.]+) s", t).groups())
ev = j.get("events", 0)
print("  cpu-s per million events: %.2f" % ((u + s) / ev * 1e6 if ev else float("nan")))
PY
}
run fastpath "$BIN/streaming" --source="$SPEC"
run naive "$BIN/naive" --source="$SPEC"
