#!/usr/bin/env bash
# install-deps.sh installs the Debian packages runplane's tests and make dev
# use (the real kubelet node's too), when they are missing. It is a no-op on a machine that has them.
set -euo pipefail
need=()
command -v ssh >/dev/null 2>&1 || need+=(openssh-client)
[[ -x /usr/sbin/sshd ]] || need+=(openssh-server)
[[ -x /usr/lib/openssh/sftp-server || -x /usr/lib/sftp-server ]] || need+=(openssh-sftp-server)
# The Python SDK's tests run with Debian's interpreter (not a pyenv or venv
# python3 that may come first on PATH): its modules come from these packages,
# since PyPI is not reachable (framework/README.md).
[[ -x /usr/bin/python3 ]] || need+=(python3)
pymod() { [[ -x /usr/bin/python3 ]] && /usr/bin/python3 -c "import $1" >/dev/null 2>&1; }
pymod setuptools || need+=(python3-setuptools)
pymod wheel || need+=(python3-wheel)
pymod pip || need+=(python3-pip)
pymod ensurepip || need+=(python3-venv)
pymod mypy || need+=(mypy)
pymod uvicorn || need+=(python3-uvicorn)
pymod fastapi || need+=(python3-fastapi)
# promtool (charts/runplane TestAlertRules: `promtool test rules` on the chart's alerts) comes
# with Debian's Prometheus (about 94 MiB installed, 18 s here; no daemon is started).
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
# node and npm (charts/runplane TestDashboardSchema: tsc checks the dashboard against Grafana's
# schema, @grafana/schema from the npm registry, test/grafana/install.sh).
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
# Headless Chromium (controllers TestAccessorInABrowser: the accessor's page as a browser renders it;
# about 348 MiB installed).
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v cp >/dev/null 2>&1 || need+=(coreutils)
command -v pgrep >/dev/null 2>&1 || need+=(procps)
# The real kubelet node (test/cluster RealNodes, make dev): the OCI runtime,
# the CNI plugins (bridge, host-local, loopback) and the static busybox that
# the user test image is built from (hack/images). Real nodes need root
# anyway, so only root installs them; elsewhere they are skipped.
if [[ $(id -u) == 0 ]]; then
	command -v runc >/dev/null 2>&1 || [[ -x /usr/sbin/runc ]] || need+=(runc)
	[[ -x /usr/lib/cni/bridge ]] || need+=(containernetworking-plugins)
	[[ -x /bin/busybox ]] || need+=(busybox-static)
fi
if ((${#need[@]} == 0)); then exit 0; fi
if [[ $(id -u) != 0 ]]; then
	echo "install-deps: missing ${need[*]}; run as root or install them (apt-get install ${need[*]})" >&2
	exit 1
fi
echo "install-deps: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
