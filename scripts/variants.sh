#!/usr/bin/env bash
# Summarize which service-backed test variants ran (internal/svctest) from
# the file TOPK_SERVICE_VARIANTS named during `go test`, and fail when any
# was skipped or ran on an in-process stand-in (with --strict, as in CI).
#
#   TOPK_SERVICE_VARIANTS=/tmp/variants go test -p 4 ./... ; scripts/variants.sh /tmp/variants
set -euo pipefail
strict=false
if [ "${1:-}" = "--strict" ]; then strict=true; shift; fi
file=${1:?usage: scripts/variants.sh [--strict] FILE}
if [ ! -s "$file" ]; then
	echo "service variants: none recorded in $file"
	$strict && exit 1
	exit 0
fi
echo "service variants (outcome, service, tests):"
sort "$file" | awk -F'\t' '{ n[$1 "\t" $2]++ } END { for (k in n) print "  " k "\t" n[k] }' | sort
bad=$(awk -F'\t' '$1 != "ran"' "$file" | sort -u)
if [ -n "$bad" ]; then
	echo "not run against the real service:"
	echo "$bad" | awk -F'\t' '{ printf "  %s %s %s: %s\n", $1, $2, $3, $4 }'
	if $strict; then
		echo "FAIL: every service-backed variant must run against the real service here"
		exit 1
	fi
fi
echo "service variants: $(awk -F'\t' '$1 == "ran"' "$file" | wc -l) ran, $(awk -F'\t' '$1 != "ran"' "$file" | wc -l) skipped or on a stand-in"
