#!/usr/bin/env bash
# gotest.sh PACKAGES…: go test of PACKAGES (TESTFLAGS: go test's test flags,
# such as -count=1 -v -timeout 40m -run X; build flags such as -race are not
# taken), with each test binary kept between runs. go test links every test
# binary again on every run and keeps none (Go 1.26; golang/go#77349
# proposes a cache): linking the 87 binaries was ~300 of a warm make test's
# ~1,300 CPU-seconds (BSD process accounting). `go test -c -o DIR/` skips
# the link of a binary whose build ID in DIR is already its inputs' — the
# go command's own up-to-date check — so an unchanged package costs no
# link; then the binaries run as go test runs them, in their package's
# directory, each one's output printed whole when it ends with go test's
# "ok"/"FAIL" line — but the longest of the last run first, and one more at
# a time than there are cores (RUNPLANE_TEST_JOBS): the real-node suites
# wait on kubelets more than they compute, and a warm run with go test's
# -p of one per core kept the cores ~40% idle (1,064 CPU-s in 924 s on 2).
#
# The binaries live in RUNPLANE_TEST_CACHE (default ~/.cache/runplane/
# test-binaries, ~3.5 GB), shared by every checkout: one run holds it at a
# time (flock; no process a test starts inherits the lock). Exit status: 0
# when every package built and passed.
set -uo pipefail
cache="$(realpath -m "${RUNPLANE_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/runplane/test-binaries}")"
mkdir -p "$cache/tmp" || exit 1
exec 9>"$cache/.lock"
if ! flock -n 9; then
	echo "gotest: another run holds $cache; waiting for it (up to 2 hours)" >&2
	flock -w 7200 9 || { echo "gotest: $cache still held; giving up" >&2; exit 1; }
fi

# go test's spelling of a test flag (-v, -count=1, -timeout 40m; --v too)
# is the binary's with "test." after the dash; split on white space, never
# globbed (-run .* is a pattern, not the files here). -test.paniconexit0
# and the 10-minute timeout (unless one is given) as go test.
read -ra words <<<"${TESTFLAGS:-}"
flags=(-test.paniconexit0)
timeout=10m
next_is_timeout=
for f in "${words[@]}"; do
	[[ $f == --* ]] && f="${f#-}"
	if [[ -n $next_is_timeout ]]; then
		timeout="$f" next_is_timeout=
		continue
	fi
	case $f in
	-timeout=* | -test.timeout=*) timeout="${f#*=}" ;;
	-timeout | -test.timeout) next_is_timeout=1 ;;
	esac
	case $f in
	-timeout* | -test.timeout*) ;;
	-test.*) flags+=("$f") ;;
	-*) flags+=("-test.${f#-}") ;;
	*) flags+=("$f") ;;
	esac
done
flags+=("-test.timeout=$timeout")
# As go test: a binary still running a minute past its timeout (a hang
# outside its tests, in a TestMain's teardown, which -test.timeout does not
# cover) gets SIGQUIT, its goroutines' stacks, and FAIL. 0: no bound.
kill_after="$(awk -v d="$timeout" 'BEGIN {
	s = 0
	while (match(d, /^[0-9.]+(h|ms|us|ns|m|s)/)) {
		n = substr(d, 1, RLENGTH); d = substr(d, RLENGTH + 1)
		v = n + 0; u = n; sub(/^[0-9.]+/, "", u)
		s += v * (u == "h" ? 3600 : u == "m" ? 60 : u == "s" ? 1 : u == "ms" ? 0.001 : 0)
	}
	if (d != "" && d != "0") exit 1
	printf "%d", (s > 0 ? s + 60 : 0)
}')" || { echo "gotest: -timeout $timeout is not a duration" >&2; exit 2; }

# One `go test -c -o DIR/` names a binary after the last element of its
# package's import path: the n-th package of a last element (several end
# in config or e2e) goes to group n. The longest packages of the last run
# go first (the run's tail is then not one long suite alone).
list="$(go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}} {{.Dir}}{{end}}' "$@")" || exit 1
jobs="$(awk 'NF { k = split($1, p, "/"); n[p[k]]++; print n[p[k]], p[k], $1, $2 }' <<<"$list")"
if [[ -z $jobs ]]; then
	echo "gotest: no packages to test in $*" >&2
	exit 1
fi
if [[ -f $cache/durations ]] && ordered="$(awk 'NR == FNR { d[$1] = $2; next } { print ($3 in d ? d[$3] : 1e9), $0 }' "$cache/durations" - <<<"$jobs" |
	sort -s -k1,1 -rn | cut -d' ' -f2-)" && [[ $(wc -l <<<"$ordered") == $(wc -l <<<"$jobs") ]]; then
	jobs="$ordered"
fi

# build PACKAGES… into group dir $1; GOTMPDIR in the cache, so a binary is
# renamed into place, never copied (a copy cut short keeps its build ID).
build() {
	local dir="$cache/$1"
	shift
	mkdir -p "$dir" &&
		GOTMPDIR="$cache/tmp" go test -c -vet=off -ldflags='-s -w' -o "$dir/" "$@" 9>&-
}
broken=()
for group in $(cut -d' ' -f1 <<<"$jobs" | sort -un); do
	mapfile -t pkgs < <(awk -v g="$group" '$1 == g { print $3 }' <<<"$jobs")
	# -s -w: go test links a binary it runs without DWARF and symbols too.
	if ! build "$group" "${pkgs[@]}"; then
		# Which failed, one by one: only those are not run (their binary
		# in the cache is an older one's).
		for p in "${pkgs[@]}"; do
			build "$group" "$p" 2>/dev/null || broken+=("$p")
		done
	fi
done
for p in "${broken[@]}"; do
	printf 'FAIL\t%s [build failed]\n' "$p"
	jobs="$(awk -v p="$p" '$3 != p' <<<"$jobs")"
done

# gotest_run GROUP NAME IMPORTPATH DIR: one package's binary, in its
# directory.
gotest_run() {
	local out start rc secs bound=()
	out="$(mktemp)" || return 1
	trap 'rm -f "$out"' EXIT
	start="$(date +%s.%N)"
	((GOTEST_KILL_AFTER > 0)) && bound=(timeout --foreground -s QUIT -k 30s "$GOTEST_KILL_AFTER")
	# The flags are words: split, not globbed (set -f).
	set -f
	# shellcheck disable=SC2086
	(cd "$4" && exec "${bound[@]}" "$GOTEST_CACHE/$1/$2.test" $GOTEST_FLAGS) >"$out" 2>&1 9>&- </dev/null
	rc=$?
	set +f
	secs="$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.3f", e - s }')"
	{
		flock 8
		cat "$out"
		# As go test: a line of its own after output without a newline,
		# and why a binary that printed nothing more ended.
		[[ -s $out && -n $(tail -c 1 "$out") ]] && echo
		((rc == 124 || rc == 137)) && echo "gotest: $3: killed a minute past its -test.timeout, as go test kills one"
		((rc > 1)) && echo "gotest: $3: exit status $rc$( ((rc > 128)) && echo " (signal $((rc - 128)))")"
		if ((rc == 0)); then
			printf 'ok  \t%s\t%ss\n' "$3" "$secs"
		else
			printf 'FAIL\t%s\t%ss\n' "$3" "$secs"
		fi
		echo "$3 $secs" >>"$GOTEST_CACHE/durations.new"
	} 8>"$GOTEST_CACHE/.output"
	return $((rc == 0 ? 0 : 1))
}
export -f gotest_run
export GOTEST_CACHE="$cache" GOTEST_FLAGS="${flags[*]}" GOTEST_KILL_AFTER="$kill_after"
rm -f "$cache/durations.new"
# xargs: status 123 when a run failed; -r: nothing to run, no run.
# The runs keep the lock (fd 9): one interrupted holds it until it ends.
xargs -r -P "${RUNPLANE_TEST_JOBS:-$(($(nproc) + 1))}" -L 1 bash -c 'gotest_run "$@"' _ <<<"$jobs"
status=$?
# This run's durations over the last's (a run of a few packages keeps the
# others').
if [[ -s $cache/durations.new ]]; then
	touch "$cache/durations"
	awk '{ d[$1] = $2 } END { for (p in d) print p, d[p] }' "$cache/durations" "$cache/durations.new" >"$cache/durations.tmp" &&
		mv "$cache/durations.tmp" "$cache/durations"
	rm -f "$cache/durations.new"
fi
((status == 0 && ${#broken[@]} == 0))
