#!/usr/bin/env bash
# gotest.sh PACKAGES…: go test of PACKAGES (TESTFLAGS: go test's test flags,
# such as -count=1 -v -timeout 40m -run X), with each test binary kept
# between runs. go test links every test binary again on every run and
# keeps none (Go 1.26; golang/go#77349 proposes a cache): linking the 87
# binaries was ~300 of a warm make test's ~1,300 CPU-seconds (BSD process
# accounting). `go test -c -o DIR/` skips the link of a binary whose build
# ID in DIR is already its inputs' — the go command's own up-to-date check —
# so an unchanged package costs no link; then the binaries run as go test
# runs them: in their package's directory, $(nproc) at a time, each one's
# output printed whole when it ends, with go test's "ok"/"FAIL" line.
#
# The binaries live in RUNPLANE_TEST_CACHE (default ~/.cache/runplane/
# test-binaries, ~3.5 GB), shared by every checkout: one run holds it at a
# time (flock). Exit status: 0 when every package built and passed.
set -uo pipefail
cache="${RUNPLANE_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/runplane/test-binaries}"
mkdir -p "$cache" || exit 1
exec 9>"$cache/.lock"
if ! flock -n 9; then
	echo "gotest: another run holds $cache; waiting for it" >&2
	flock 9
fi

# go test's spelling of a test flag (-v, -count=1, -timeout 40m) is the
# binary's with "test." after the dash. -test.paniconexit0 and the
# 10-minute timeout (unless one is given) as go test.
flags=(-test.paniconexit0)
timeout=-test.timeout=10m
for f in ${TESTFLAGS:-}; do
	case $f in
	-timeout* | -test.timeout*) timeout= ;;
	esac
	case $f in
	-test.*) flags+=("$f") ;;
	-*) flags+=("-test.${f#-}") ;;
	*) flags+=("$f") ;;
	esac
done
[[ -n $timeout ]] && flags+=("$timeout")

# One `go test -c -o DIR/` names a binary after the last element of its
# package's import path: the n-th package of a last element (several end
# in config or e2e) goes to group n.
list="$(go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}} {{.Dir}}{{end}}' "$@")" || exit 1
jobs="$(awk 'NF { k = split($1, p, "/"); n[p[k]]++; print n[p[k]], p[k], $1, $2 }' <<<"$list")"
for group in $(cut -d' ' -f1 <<<"$jobs" | sort -un); do
	mapfile -t pkgs < <(awk -v g="$group" '$1 == g { print $3 }' <<<"$jobs")
	mkdir -p "$cache/$group" || exit 1
	# -s -w: go test links a binary it runs without DWARF and symbols too.
	if ! go test -c -vet=off -ldflags='-s -w' -o "$cache/$group/" "${pkgs[@]}"; then
		echo "gotest: building the test binaries failed" >&2
		exit 1
	fi
done

# run GROUP NAME IMPORTPATH DIR: one package's binary, in its directory.
run() {
	local out start rc secs
	out="$(mktemp)"
	start="$(date +%s.%N)"
	(cd "$4" && exec "$cache/$1/$2.test" "${flags[@]}") >"$out" 2>&1
	rc=$?
	secs="$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.3f", e - s }')"
	{
		flock 8
		cat "$out"
		if ((rc == 0)); then
			printf 'ok  \t%s\t%ss\n' "$3" "$secs"
		else
			printf 'FAIL\t%s\t%ss\n' "$3" "$secs"
		fi
	} 8>"$cache/.output"
	rm -f "$out"
	return $((rc == 0 ? 0 : 1))
}
export -f run
export cache
export FLAGS="${flags[*]}"
# xargs gives each run no standard input; its status is 123 when one failed.
xargs -P "$(nproc)" -L 1 bash -c 'flags=($FLAGS); run "$@"' _ <<<"$jobs"
