#!/usr/bin/env bash
# run.sh is make chaos: every fault case of test/chaos (and test/chaos/kube
# when the control-plane binaries are built) at full length, then one table
# of their counts. $1 selects cases by go test -run regexp (default all).
# The raw output is kept in CHAOS_OUT (default /tmp/runplane-chaos.txt).
set -uo pipefail
cd "$(dirname "$0")/../.."
run="${1:-.}"
out="${CHAOS_OUT:-/tmp/runplane-chaos.txt}"
rows="$(mktemp)"
trap 'rm -f "$rows"' EXIT
pkgs=(./test/chaos/)
if [[ -n "${RUNPLANE_TESTBIN_DIR:-}" ]]; then
	pkgs+=(./test/chaos/kube/)
else
	echo "chaos: RUNPLANE_TESTBIN_DIR unset: skipping test/chaos/kube (leader election, rollout on Kubernetes)" >&2
fi
RUNPLANE_CHAOS=full RUNPLANE_CHAOS_ROWS="$rows" go test -count=1 -v -p 1 -timeout 90m -run "$run" "${pkgs[@]}" 2>&1 | tee "$out" |
	grep -E '^(=== RUN|--- |ok|FAIL|PASS)|: load: |accepted [0-9]+, succeeded'
status=${PIPESTATUS[0]}
echo
go run ./test/chaos/cmd/chaos-table <"$rows"
echo "chaos: full output in $out"
exit "$status"
