#!/usr/bin/env bash
# emulators.sh start|stop|status|env: the official Pub/Sub and Bigtable
# emulators from the machine's gcloud SDK, in the background, for tests and
# local runs against the real emulators instead of the in-process fakes.
#
#   scripts/emulators.sh start    # start both, wait until each listens, print exports
#   eval "$(scripts/emulators.sh env)"
#   scripts/emulators.sh stop     # kill the emulator processes themselves
#
# The Pub/Sub emulator is run through the SDK's cloud-pubsub-emulator script,
# which execs the JVM, and the Bigtable emulator is the cbtemulator binary, so
# the recorded PIDs are the emulators themselves (killing `gcloud beta
# emulators ...` would leave the JVM running). Nothing here is gcloud-specific
# beyond locating the SDK.
#
# Environment:
#   EMU_DIR        where PIDs and logs go (default /tmp/topk-emulators)
#   PUBSUB_PORT    default 8085
#   BIGTABLE_PORT  default 8086
#   EMU_HOST       default 127.0.0.1
#   EMU_WAIT       seconds to wait for each port (default 60)
#   GCLOUD_SDK     SDK root (default: from `gcloud` on PATH)
set -euo pipefail

EMU_DIR=${EMU_DIR:-/tmp/topk-emulators}
EMU_HOST=${EMU_HOST:-127.0.0.1}
PUBSUB_PORT=${PUBSUB_PORT:-8085}
BIGTABLE_PORT=${BIGTABLE_PORT:-8086}
EMU_WAIT=${EMU_WAIT:-60}

sdk_root() {
	if [[ -n ${GCLOUD_SDK:-} ]]; then
		echo "$GCLOUD_SDK"
		return
	fi
	local g
	g=$(command -v gcloud) || { echo "emulators: gcloud not on PATH; set GCLOUD_SDK" >&2; exit 1; }
	dirname "$(dirname "$(readlink -f "$g")")"
}

listening() { (exec 3<>"/dev/tcp/$EMU_HOST/$1") 2>/dev/null; }

alive() { [[ -f $EMU_DIR/$1.pid ]] && kill -0 "$(cat "$EMU_DIR/$1.pid")" 2>/dev/null; }

# start_one NAME PORT CMD...
start_one() {
	local name=$1 port=$2
	shift 2
	if alive "$name"; then
		echo "emulators: $name already running (pid $(cat "$EMU_DIR/$name.pid"))" >&2
		return
	fi
	if listening "$port"; then
		echo "emulators: $EMU_HOST:$port is already in use by another process" >&2
		exit 1
	fi
	# setsid: the emulator outlives this shell and is not killed by its job control.
	setsid "$@" >"$EMU_DIR/$name.log" 2>&1 </dev/null &
	local pid=$!
	echo "$pid" >"$EMU_DIR/$name.pid"
	local deadline=$((SECONDS + EMU_WAIT))
	until listening "$port"; do
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "emulators: $name exited during startup; log:" >&2
			tail -20 "$EMU_DIR/$name.log" >&2
			rm -f "$EMU_DIR/$name.pid"
			exit 1
		fi
		if ((SECONDS >= deadline)); then
			echo "emulators: $name not listening on $EMU_HOST:$port after ${EMU_WAIT}s; log in $EMU_DIR/$name.log" >&2
			stop_one "$name"
			exit 1
		fi
		sleep 0.2
	done
	echo "emulators: $name listening on $EMU_HOST:$port (pid $pid, log $EMU_DIR/$name.log)" >&2
}

stop_one() {
	local name=$1 f=$EMU_DIR/$1.pid pid
	[[ -f $f ]] || return 0
	pid=$(cat "$f")
	if kill -0 "$pid" 2>/dev/null; then
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.2
		done
		if kill -0 "$pid" 2>/dev/null; then
			kill -9 "$pid" 2>/dev/null || true
		fi
		echo "emulators: stopped $name (pid $pid)" >&2
	fi
	rm -f "$f"
}

print_env() {
	echo "export PUBSUB_EMULATOR_HOST=$EMU_HOST:$PUBSUB_PORT"
	echo "export BIGTABLE_EMULATOR_HOST=$EMU_HOST:$BIGTABLE_PORT"
}

case ${1:-} in
start)
	mkdir -p "$EMU_DIR"
	root=$(sdk_root)
	ps=$root/platform/pubsub-emulator/bin/cloud-pubsub-emulator
	bt=$root/platform/bigtable-emulator/cbtemulator
	[[ -x $ps ]] || { echo "emulators: $ps missing (gcloud components install pubsub-emulator)" >&2; exit 1; }
	[[ -x $bt ]] || { echo "emulators: $bt missing (gcloud components install bigtable)" >&2; exit 1; }
	start_one pubsub "$PUBSUB_PORT" "$ps" --host="$EMU_HOST" --port="$PUBSUB_PORT"
	start_one bigtable "$BIGTABLE_PORT" "$bt" -host="$EMU_HOST" -port="$BIGTABLE_PORT"
	print_env
	;;
stop)
	stop_one pubsub
	stop_one bigtable
	;;
status)
	for n in pubsub bigtable; do
		if alive "$n"; then echo "$n: running (pid $(cat "$EMU_DIR/$n.pid"))"; else echo "$n: stopped"; fi
	done
	;;
env)
	print_env
	;;
*)
	echo "usage: $0 start|stop|status|env" >&2
	exit 2
	;;
esac
