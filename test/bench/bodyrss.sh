#!/usr/bin/env bash
# bodyrss.sh: the queue's peak RSS while it takes N concurrent request
# bodies of 64 MiB (async, accepted into the namespaces' Object Store
# buckets), measured on runplane-queue as its own process (VmHWM) against a
# nats-server process of its own, so NATS's memory is not counted. The
# body budgets are off (-1) so every body is read at once. Gives the
# multiple of a body the ingress holds at its peak: what
# limits.replicaMaxBodyBytes' default is derived from (queue/README.md,
# "Fairness"). BUDGETS=default keeps the default budgets: the bodies
# beyond them get 429 and the peak stays where the budget puts it.
#
#   [BUDGETS=default] bash test/bench/bodyrss.sh [json|raw] [N, default 4]
set -euo pipefail
cd "$(dirname "$0")/../.."
kind="${1:-json}" n="${2:-4}"
dir="$(mktemp -d /tmp/bodyrss.XXXXXX)"
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
bin="$(bash test/testbin/build.sh)"
go build -o "$dir/runplane-queue" ./cmd/runplane-queue
port=$((20000 + RANDOM % 20000)) http=$((20000 + RANDOM % 20000))
"$bin/nats-server" -js -a 127.0.0.1 -p "$port" -sd "$dir/js" >"$dir/nats.log" 2>&1 &
pools=""
for i in $(seq "$n"); do pools="$pools\"t$i/p\","; done
cat >"$dir/config.yaml" <<CONF
apiVersion: runplane.io/v1alpha1
kind: QueueConfiguration
staticPools: [${pools%,}]
insecureDisableCallerAuth: true
listen: 127.0.0.1:$http
metrics: {bindAddress: "0"}
nats: {url: "nats://127.0.0.1:$port"}
stream: {objectsMaxBytes: 268435456}
CONF
if [[ ${BUDGETS:-off} == off ]]; then echo 'limits: {replicaMaxBodyBytes: -1, namespaceMaxBodyBytes: -1}' >>"$dir/config.yaml"; fi
sleep 1
"$dir/runplane-queue" -config "$dir/config.yaml" >"$dir/queue.log" 2>&1 &
qpid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$http/readyz" >/dev/null && break; sleep 0.2; done
python3 - "$dir/body" "$kind" <<'PY'
import sys
path, kind = sys.argv[1], sys.argv[2]
size = 64 << 20
with open(path, "wb") as f:
    if kind == "json":
        head, tail = b'{"mode":"async","payload":"', b'"}'
        f.write(head + b"x" * (size - len(head) - len(tail)) + tail)  # a payload of 64 MiB - 2 + its quotes
    else:
        f.write(b"\x01" * size)
PY
ct=application/json q=""
if [[ $kind == raw ]]; then ct=application/octet-stream q="?mode=async"; fi
base=$(awk '/VmRSS/ {print $2}' "/proc/$qpid/status")
echo 5 >"/proc/$qpid/clear_refs" # VmHWM from here
for i in $(seq "$n"); do
	curl -s -o "$dir/out$i" -w '%{http_code}\n' -H "Content-Type: $ct" --data-binary @"$dir/body" \
		"http://127.0.0.1:$http/v1/namespaces/t$i/pools/p/invocations$q" &
done
wait $(jobs -p | grep -v "$qpid" | tail -n "$n") 2>/dev/null || true
peak=$(awk '/VmHWM/ {print $2}' "/proc/$qpid/status")
body=$(stat -c %s "$dir/body")
python3 -c "import sys; b,p,n,s=map(int,sys.argv[1:]); print(f'kind=$kind budgets=${BUDGETS:-off} bodies={n} body={s/2**20:.1f}MiB rss-ready={b/1024:.0f}MiB peak={p/1024:.0f}MiB peak-over-ready={(p-b)/1024:.0f}MiB per-body={(p-b)*1024/n/s:.2f}x')" "$base" "$peak" "$n" "$body"
echo "answers: $(cat "$dir"/out* | grep -o '"state":"queued"\|"limit":"[a-z_]*"' | sort | uniq -c | tr '\n' ' ')"
