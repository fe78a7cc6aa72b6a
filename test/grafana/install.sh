#!/usr/bin/env bash
# install.sh installs Grafana's dashboard schema (@grafana/schema, its
# TypeScript types) and tsc from the npm registry, as pinned by
# package-lock.json here, into a cache outside the repository keyed by the
# lock file, and prints the directory holding node_modules. A later run with
# the same pins installs nothing (the first: about 10 s).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${RUNPLANE_GRAFANA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/runplane/grafana-schema}"
key="$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -c1-16)"
out="$cache_root/$key"
if [[ -f "$out/.complete" ]]; then echo "$out"; exit 0; fi
command -v npm >/dev/null 2>&1 || { echo "grafana: npm is missing: bash hack/install-deps.sh" >&2; exit 1; }
rm -rf "$out" && mkdir -p "$out"
cp "$here/package.json" "$here/package-lock.json" "$out/"
# --ignore-scripts: neither package needs an install script, and none runs.
(cd "$out" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >&2)
touch "$out/.complete"
echo "$out"
