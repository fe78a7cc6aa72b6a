#!/usr/bin/env bash
# build.sh builds the local control plane's binaries into a cache outside the
# repository, keyed by the pinned versions (the go.mod/go.sum of each tools
# module), and prints the directory that holds them. A later run with the
# same pins finds the binaries there and builds nothing. Each binary is also
# kept under the key of its own module (by-module/), so a change of one pin
# (a nats-server upgrade) rebuilds that binary, not Kubernetes (about 25 of
# the first make test's 39 build minutes on a 2-core machine).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${RUNPLANE_TESTBIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/runplane/testbin}"

# KUBE_VERSION picks the control plane's Kubernetes (1.35, 1.35.x or 1.35.4):
# unset, the current release that kubernetes/ pins; else the older minor of
# the support window that kubernetes-<minor>/ pins (make test-matrix). Each
# version has its own cache key, and its binaries their by-module keys.
# kubernetes-1.36/ keeps the bytes of the previous default module (its module
# line too) so that machines which built 1.36.3 reuse those binaries.
kube_dir=kubernetes want=""
if [[ -n ${KUBE_VERSION:-} ]]; then
	want="v${KUBE_VERSION#v}" && want="${want%.x}"
	minor="$(cut -d. -f1,2 <<<"$want")"
	if [[ -d "$here/kubernetes-${minor#v}" ]]; then kube_dir="kubernetes-${minor#v}"; fi
fi
kube_version="$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" { print $3 }' "$here/$kube_dir/go.mod")"
if [[ -n $want && $want != "$kube_version" && $want != "$(cut -d. -f1,2 <<<"$kube_version")" ]]; then
	echo "build.sh: KUBE_VERSION=$KUBE_VERSION is not a pinned Kubernetes version; allowed (or their minor, or minor.x):" \
		"$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" { printf " %s", substr($3, 2) }' "$here"/kubernetes*/go.mod)" >&2
	exit 2
fi
key_files=("$here/$kube_dir/go.mod" "$here/$kube_dir/go.sum" "$here/build.sh")
for m in etcd kwok nats helm; do key_files+=("$here/$m/go.mod" "$here/$m/go.sum"); done
key="$(cat "${key_files[@]}" | sha256sum | cut -c1-16)"
out="$cache_root/$key"
bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok nats-server helm)

complete=1
for b in "${bins[@]}"; do [[ -x "$out/$b" ]] || complete=0; done
[[ -f "$out/kwok-stages/.complete" ]] || complete=0
if [[ $complete == 1 ]]; then echo "$out"; exit 0; fi

mkdir -p "$out"
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}k8s.io/kubernetes"
export GOFLAGS="-mod=mod -trimpath"
# Static, as Kubernetes' own release builds are, and as the real node's
# binaries must be (node.sh): one cgo setting lets the node's builds reuse
# the packages compiled here from the Go build cache. With cgo on here,
# kube-network-policies built after kube-apiserver took 430 CPU-s, with it
# off 57 (a fresh cache, 2026-11-29): net, and all that imports it, is
# compiled differently under each setting.
export CGO_ENABLED=0
kube_ldflags="-s -w \
 -X k8s.io/component-base/version.gitVersion=$kube_version \
 -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=$(cut -d. -f2 <<<"$kube_version") \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/component-base/version.buildDate=2026-01-01T00:00:00Z"

build() { # build <module dir> <output name> <package> [ldflags]
	local dir=$1 name=$2 pkg=$3 ldflags=${4:--s -w}
	[[ -x "$out/$name" ]] && return 0
	local mkey cached
	mkey="$({ cat "$here/$dir/go.mod" "$here/$dir/go.sum"; echo "$pkg $ldflags cgo=$CGO_ENABLED"; } | sha256sum | cut -c1-16)"
	cached="$cache_root/by-module/$name-$mkey"
	if [[ ! -x "$cached" ]]; then
		echo "testbin: building $name" >&2
		mkdir -p "$cache_root/by-module"
		(cd "$here/$dir" && go build -ldflags "$ldflags" -o "$cached.tmp" "$pkg")
		mv "$cached.tmp" "$cached"
	fi
	ln -f "$cached" "$out/$name" 2>/dev/null || cp "$cached" "$out/$name"
}

build "$kube_dir" kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$kube_ldflags"
build "$kube_dir" kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$kube_ldflags"
build "$kube_dir" kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "$kube_ldflags"
build "$kube_dir" kubectl k8s.io/kubernetes/cmd/kubectl "$kube_ldflags"
build etcd etcd go.etcd.io/etcd/server/v3
build kwok kwok sigs.k8s.io/kwok/cmd/kwok
build nats nats-server github.com/nats-io/nats-server/v2
build helm helm helm.sh/helm/v3/cmd/helm

# kwok's stage manifests live in its module; copy them next to the binaries.
kwok_dir="$(cd "$here/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
rm -rf "$out/kwok-stages" && mkdir -p "$out/kwok-stages"
cp -r "$kwok_dir/kustomize/stage/." "$out/kwok-stages/"
chmod -R u+w "$out/kwok-stages"
touch "$out/kwok-stages/.complete"
echo "$out"
