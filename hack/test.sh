#!/usr/bin/env bash
# test.sh is make test: the Debian packages, the linters, the cached
# builds, the Go tests (unit, integration against the local control plane,
# e2e) and the Python framework's tests; then the time of each phase and the
# slowest Go packages (where a newcomer's first run goes), and one closing
# line counting every test that ran, e.g. "tests: 412 passed, 0 failed, 3 skipped".
set -uo pipefail
cd "$(dirname "$0")/.."
read -ra go_flags <<<"${TESTFLAGS:--count=1 -v -timeout 40m}" # words, not globbed
# Every Go build of the run — lint's, runplane's binaries (static and
# trimmed, as the image has them: hack/images) and the tests' — with one
# configuration, so that each package compiles once: with go test's
# defaults (cgo on, full paths) a fresh machine compiled every dependency
# of the binaries twice.
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-trimpath" CGO_ENABLED=0
log="$(mktemp -d)"
trap 'rm -rf "$log"' EXIT

# phase NAME: the seconds since the previous mark go to NAME (printed at the end).
phases=()
mark=$SECONDS
phase() {
	phases+=("$(printf '%-26s %5ds' "$1" $((SECONDS - mark)))")
	mark=$SECONDS
}
timings() {
	echo
	echo "time per phase:"
	printf '  %s\n' "${phases[@]}"
	if [[ -s $log/go.txt ]]; then
		echo "slowest Go packages:"
		awk '$1 == "ok" || $1 == "FAIL" { if ($3 ~ /s$/) { t = $3; sub(/s$/, "", t); printf "%9.1fs  %s\n", t, $2 } }' "$log/go.txt" |
			sort -rn | head -10 | sed 's/^/ /'
	fi
}
fail() { # fail MESSAGE: stop with the phases so far.
	echo "test: $1" >&2
	timings
	exit 1
}

bash hack/install-deps.sh || fail "installing the Debian packages failed"
phase "Debian packages"
make -s lint || fail "lint failed"
phase "lint"
bin_dir="$(bash test/testbin/build.sh)" || fail "building the control-plane binaries failed"
phase "control-plane binaries"
# The real node's binaries (test/e2e/realnode, root only) are built here,
# before the tests, so no test's timeout pays for the first build.
if [[ $(id -u) == 0 ]]; then
	node_dir="$(bash test/testbin/node.sh)" || fail "building the real node's binaries failed"
	export RUNPLANE_NODEBIN_DIR="$node_dir"
	phase "real node binaries"
fi
# runplane's own binaries, static as the image has them, built once for
# every suite that runs one (test/runplanebin): each suite linking its own
# took minutes of the run.
go run ./hack/images/cmd/runplane-images -only binaries -bin "$log/bin" || fail "building runplane's binaries failed"
export RUNPLANE_BIN_DIR="$log/bin"
phase "runplane binaries"
# go test as hack/gotest.sh runs it: each test binary kept between runs, so
# an unchanged package is not linked again (linking was ~300 of a warm
# run's ~1,300 CPU-seconds); vet is off, as lint ran govet above (27 more).
RUNPLANE_TESTBIN_DIR="$bin_dir" TESTFLAGS="${go_flags[*]}" bash hack/gotest.sh ./... 2>&1 | tee "$log/go.txt"
go_status=${PIPESTATUS[0]}
phase "Go tests (build + run)"
# Debian's python3 (hack/install-deps.sh installs the SDK's modules for it);
# strict: a missing module fails its tests instead of skipping them.
RUNPLANE_PYTHON_STRICT=1 "${PYTHON:-/usr/bin/python3}" -m unittest discover -s framework/python -v 2>&1 | tee "$log/python.txt"
py_status=${PIPESTATUS[0]}
phase "Python tests"
timings

# Top-level Go tests only (subtests are indented); Python's unittest lines
# end in "... ok", "... FAIL"/"... ERROR" or "... skipped '<why>'".
go_pass=$(grep -c '^--- PASS' "$log/go.txt")
go_fail=$(grep -c '^--- FAIL' "$log/go.txt")
go_skip=$(grep -c '^--- SKIP' "$log/go.txt")
py_pass=$(grep -c '\.\.\. ok$' "$log/python.txt")
py_fail=$(grep -cE '\.\.\. (FAIL|ERROR)$' "$log/python.txt")
py_skip=$(grep -c "\.\.\. skipped" "$log/python.txt")
# A package that fails to build or panics may print no "--- FAIL" line.
failed=$((go_fail + py_fail))
if ((failed == 0 && (go_status != 0 || py_status != 0))); then
	failed=1
fi
echo
echo "tests: $((go_pass + py_pass)) passed, $failed failed, $((go_skip + py_skip)) skipped"
if ((go_status != 0 || py_status != 0)); then
	exit 1
fi
