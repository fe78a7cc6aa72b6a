#!/usr/bin/env bash
# node.sh builds the binaries of a real kubelet node — kubelet, kube-proxy,
# containerd, its runc shim and ctr, the cluster DNS (coredns) and the
# NetworkPolicy/AdminNetworkPolicy enforcer (kube-network-policies, with the
# network-policy-api CRDs of the version it is built against) — into the
# same cache root as build.sh, under a key of their own (the modules under
# node/ and this script), and prints the directory that holds them. A later
# run with the same pins builds nothing. runc and the CNI plugins come from Debian (hack/install-deps.sh).
#
# It is separate from build.sh so that adding the node changed nothing in the
# control plane's cache key: a machine that has the control-plane binaries
# keeps them.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${RUNPLANE_TESTBIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/runplane/testbin}"
key="node-$(cat "$here"/node/*/go.mod "$here"/node/*/go.sum "$here"/node/*/main.go "$here/node.sh" | sha256sum | cut -c1-16)"
out="$cache_root/$key"
bins=(kubelet kube-proxy containerd containerd-shim-runc-v2 ctr coredns kube-network-policies)
# The CRDs the enforcer watches, from the module version it is built against.
crds=(policy.networking.k8s.io_adminnetworkpolicies.yaml policy.networking.k8s.io_baselineadminnetworkpolicies.yaml)

complete=1
for b in "${bins[@]}"; do [[ -x "$out/$b" ]] || complete=0; done
for f in "${crds[@]}"; do [[ -f "$out/crds/$f" ]] || complete=0; done
if [[ $complete == 1 ]]; then echo "$out"; exit 0; fi
# --check: only say whether they are built (exit 1 when not), build nothing.
if [[ ${1:-} == --check ]]; then exit 1; fi

mkdir -p "$out"
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}k8s.io/kubernetes"
export GOFLAGS="-mod=mod -trimpath"
# Static, as build.sh's binaries are (why: there).
export CGO_ENABLED=0
# The kubelet module pins the version; the binaries report it (like build.sh).
kube_version="$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" { print $3 }' "$here/node/kubelet/go.mod")"
kube_ldflags="-s -w \
 -X k8s.io/component-base/version.gitVersion=$kube_version \
 -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=$(cut -d. -f2 <<<"$kube_version") \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/component-base/version.buildDate=2026-01-01T00:00:00Z"
containerd_version=v2.4.2
containerd_ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=$containerd_version"
# Static containerd without the snapshotters that need cgo or kernel features
# we do not use (overlayfs and native remain).
containerd_tags="no_btrfs no_devmapper no_zfs no_aufs"

build() { # build <module dir> <output name> <package> <ldflags> [tags]
	local dir=$1 name=$2 pkg=$3 ldflags=$4 tags=${5:-}
	[[ -x "$out/$name" ]] && return 0
	echo "testbin: building $name" >&2
	local start=$SECONDS
	(cd "$here/node/$dir" && go build -tags "$tags" -ldflags "$ldflags" -o "$out/$name.tmp" "$pkg")
	mv "$out/$name.tmp" "$out/$name"
	echo "testbin: built $name in $((SECONDS - start))s" >&2
}

build containerd containerd github.com/containerd/containerd/v2/cmd/containerd "$containerd_ldflags" "$containerd_tags"
build containerd containerd-shim-runc-v2 github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 "$containerd_ldflags" "$containerd_tags"
build containerd ctr github.com/containerd/containerd/v2/cmd/ctr "$containerd_ldflags" "$containerd_tags"
# Every binary here is static, like build.sh's Kubernetes binaries, so
# that the kubelet and the enforcer reuse their compiled packages from the
# Go build cache (only their own packages and the link are new).
build kubelet kubelet k8s.io/kubernetes/cmd/kubelet "$kube_ldflags"
build kubelet kube-proxy k8s.io/kubernetes/cmd/kube-proxy "$kube_ldflags"
# The cluster DNS runs in a Pod (test/cluster/dns.go), so static.
build coredns coredns . "-s -w"
# Runs in the node's network namespace like kube-proxy (test/cluster).
build netpol kube-network-policies . "-s -w"
npa="$(cd "$here/node/netpol" && go list -m -f '{{.Dir}}' sigs.k8s.io/network-policy-api)"
mkdir -p "$out/crds"
for f in "${crds[@]}"; do install -m 0644 "$npa/config/crd/experimental/$f" "$out/crds/$f"; done
echo "$out"
