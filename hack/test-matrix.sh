#!/usr/bin/env bash
# test-matrix.sh is make test-matrix: the suites most exposed to the API
# server's version (the webhook and its policies, the extender and its
# kube-scheduler, the serverless e2e) against the control plane of each older
# Kubernetes minor of the support window, each built once by build.sh under a
# key of its own (KUBE_VERSION). make test covers the current release. One
# line per minor at the end, e.g. "matrix: 1.35 (v1.35.4): ok".
set -uo pipefail
cd "$(dirname "$0")/.."
versions=(${MATRIX_VERSIONS:-1.35 1.36})
pkgs=(${MATRIX_PKGS:-./webhook/... ./extender/... ./test/e2e/serverless/})
go_flags=(${TESTFLAGS:--count=1 -timeout 40m})
if [[ -n ${MATRIX_RUN:-} ]]; then go_flags+=(-run "$MATRIX_RUN"); fi

summary=()
status=0
for v in "${versions[@]}"; do
	dir="$(KUBE_VERSION=$v bash test/testbin/build.sh)" || {
		summary+=("matrix: $v: building its control plane failed")
		status=1
		continue
	}
	served="$("$dir/kube-apiserver" --version | awk '{ print $2 }')"
	echo "matrix: $v ($served): go test ${go_flags[*]} ${pkgs[*]}"
	if RUNPLANE_TESTBIN_DIR="$dir" go test "${go_flags[@]}" "${pkgs[@]}"; then
		summary+=("matrix: $v ($served): ok")
	else
		summary+=("matrix: $v ($served): FAILED")
		status=1
	fi
done
echo
printf '%s\n' "${summary[@]}"
exit "$status"
