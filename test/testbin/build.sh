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
key="$(cat "$here"/*/go.mod "$here"/*/go.sum "$here/build.sh" | sha256sum | cut -c1-16)"
out="$cache_root/$key"
bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok nats-server helm)

complete=1
for b in "${bins[@]}"; do [[ -x "$out/$b" ]] || complete=0; done
[[ -f "$out/kwok-stages/.complete" ]] || complete=0
if [[ $complete == 1 ]]; then echo "$out"; exit 0; fi

mkdir -p "$out"
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}k8s.io/kubernetes"
export GOFLAGS="-mod=mod -trimpath"
kube_version=v1.36.3
kube_ldflags="-s -w \
 -X k8s.io/component-base/version.gitVersion=$kube_version \
 -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=36 \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/component-base/version.buildDate=2026-01-01T00:00:00Z"

build() { # build <module dir> <output name> <package> [ldflags]
	local dir=$1 name=$2 pkg=$3 ldflags=${4:--s -w}
	[[ -x "$out/$name" ]] && return 0
	local mkey cached
	mkey="$({ cat "$here/$dir/go.mod" "$here/$dir/go.sum"; echo "$pkg $ldflags"; } | sha256sum | cut -c1-16)"
	cached="$cache_root/by-module/$name-$mkey"
	if [[ ! -x "$cached" ]]; then
		echo "testbin: building $name" >&2
		mkdir -p "$cache_root/by-module"
		(cd "$here/$dir" && go build -ldflags "$ldflags" -o "$cached.tmp" "$pkg")
		mv "$cached.tmp" "$cached"
	fi
	ln -f "$cached" "$out/$name" 2>/dev/null || cp "$cached" "$out/$name"
}

build kubernetes kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$kube_ldflags"
build kubernetes kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$kube_ldflags"
build kubernetes kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "$kube_ldflags"
build kubernetes kubectl k8s.io/kubernetes/cmd/kubectl "$kube_ldflags"
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
