#!/usr/bin/env bash
# run.sh is make bench: it runs every benchmark of benchmarks.txt (-count
# BENCH_COUNT, default 3) and prints them as one table of medians. The raw
# output is kept in BENCH_OUT (default /tmp/runplane-bench.txt) for benchstat.
set -euo pipefail
cd "$(dirname "$0")/../.."
count="${BENCH_COUNT:-3}"
out="${BENCH_OUT:-/tmp/runplane-bench.txt}"
: >"$out"
# The real node's binaries (test/e2e/realnode, root only) are built before
# the benchmarks, as make test does, so no benchmark's timeout pays for the
# first build.
if [[ $(id -u) == 0 && -z "${RUNPLANE_NODEBIN_DIR:-}" ]]; then
	RUNPLANE_NODEBIN_DIR="$(bash test/testbin/node.sh)" || { echo "bench: building the real node's binaries failed" >&2; exit 1; }
	export RUNPLANE_NODEBIN_DIR
fi
while read -r pkg regex benchtime own_count; do
	[[ -z "$pkg" || "$pkg" == \#* ]] && continue
	n="${own_count:-$count}"
	echo "bench: $pkg $regex ($benchtime x $n)" >&2
	go test -run '^$' -bench "^${regex}" -benchtime "$benchtime" -count "$n" -short -timeout 30m "$pkg" >>"$out" 2>&1 ||
		echo "bench: $pkg $regex FAILED (see $out)" >&2
done <test/bench/benchmarks.txt
go run ./test/bench/table <"$out"
