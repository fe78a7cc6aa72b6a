#!/usr/bin/env bash
# profile.sh: CPU and allocation profiles of the queue's sync round trip
# (BenchmarkSyncRoundTrip, rate=max, stub worker through the real sidecar),
# and where its CPU goes: the share of the samples under each part of the
# path (pprof -focus; a part may include another's calls, encoding/json is
# in all of them). NATS server, queue, sidecars, framework and client run in
# the one test process, so one profile holds every process of the path.
#
#   bash test/bench/profile.sh [calls, default 3000] [bench regexp]
#
# Profiles and the test binary stay in PROFILE_DIR (default
# /tmp/runplane-profile) for go tool pprof; queue/README.md, "Where a
# call's CPU goes", shows a run.
set -euo pipefail
cd "$(dirname "$0")/../.."
n="${1:-3000}"
bench="${2:-BenchmarkSyncRoundTrip/nats=plain/rate=max/queue}"
dir="${PROFILE_DIR:-/tmp/runplane-profile}"
mkdir -p "$dir"
go test -c -o "$dir/queue.test" ./queue
(cd queue && "$dir/queue.test" -test.run '^$' -test.bench "$bench" -test.benchtime "${n}x" -test.count 1 -test.short \
	-test.cpuprofile "$dir/cpu.prof" -test.memprofile "$dir/mem.prof") | grep -E '^Benchmark'
share() {
	local pct secs
	read -r pct secs < <(go tool pprof -top -focus "$2" "$dir/queue.test" "$dir/cpu.prof" 2>/dev/null |
		sed -n 's/^Showing nodes accounting for \([^,]*\), \([^ ]*\) of .*/\2 \1/p')
	printf '%-8s %-7s %s\n' "$pct" "$secs" "$1"
}
go tool pprof -top "$dir/queue.test" "$dir/cpu.prof" 2>/dev/null | grep -m1 'Total samples'
while IFS='|' read -r re name; do
	share "$name" "$re"
done <<'PARTS'
nats-server/v2/server\.|NATS server (JetStream stores, consumers, API, core routing)
nats%2ego\.\(\*Conn\)\.(readLoop|flusher)|nats.go read and flush loops (every client)
net/http\.\(\*conn\)\.serve|HTTP servers: ingress (auth, decode, accept, wait) and the framework
ingress\.\(\*Server\)\.(watchRecords|onReply)|ingress Records watch and sync replies
queue/activator\.|activator (consume, dispatch, results, Record writes, deletes)
runplane/sidecar\.|sidecar (pull, journal, framework call, result, reply, ack)
net/http\.\(\*persistConn\)|HTTP client loops (the caller's, the sidecar's to the framework)
runtime\.gcBgMarkWorker|garbage collector (background marking)
encoding/json\.|encoding/json (in all of the above)
PARTS
echo "allocations (alloc_space, top 12):"
go tool pprof -sample_index=alloc_space -top -nodecount 12 "$dir/queue.test" "$dir/mem.prof" 2>/dev/null | sed -n '/flat%/,$p'
