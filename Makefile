# runplane — see README.md. The two set-up commands are `make dev` and `make test`.
SHELL := /bin/bash
GO ?= go
export GONOSUMDB := k8s.io/kubernetes
# Go test flags for make test; -v so the output names every test that ran.
TESTFLAGS ?= -count=1 -v -timeout 40m
# The version stamped into every binary (--version, runplane_build_info; internal/buildinfo).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
LDFLAGS := -X github.com/runplane/runplane/internal/buildinfo.version=$(VERSION)

.PHONY: all generate dev test test-matrix unit bench chaos lint testbin nodebin deps build pin-images python-test python-wheel clean image chart-docs chart-check

all: build

## dev: a local control plane with GPU nodes, NATS and every runplane component (Ctrl-C stops it),
## and one real kubelet node where the machine can run it (REAL_NODES=0 turns it off).
REAL_NODES ?= 1
dev: deps
	@$(GO) build -o bin/runplane-dev ./test/dev && exec bin/runplane-dev -real-nodes=$(REAL_NODES)

## test: Debian packages, lint, then unit + integration + e2e tests (builds the control-plane binaries
## once, cached outside the repo); ends with the time of each phase.
test:
	@TESTFLAGS="$(TESTFLAGS)" bash hack/test.sh

## test-matrix: the webhook, extender and serverless e2e suites against the older minors of the
## support window (MATRIX_VERSIONS, default "1.35 1.36"; each control plane built once, cached by
## its own key; MATRIX_RUN is a go test -run regexp). make test runs them against the current release.
MATRIX_VERSIONS ?= 1.35 1.36
test-matrix: deps
	@MATRIX_VERSIONS="$(MATRIX_VERSIONS)" bash hack/test-matrix.sh

## unit: only the tests that need no control plane.
unit:
	$(GO) test -short $(TESTFLAGS) ./...

# Debian's interpreter: its modules (uvicorn, mypy, setuptools) are the Debian
# packages of hack/install-deps.sh, whatever python3 comes first on PATH.
PYTHON ?= /usr/bin/python3

## python-test: the Python SDK's tests (make test runs them too).
python-test: deps
	RUNPLANE_PYTHON_STRICT=1 $(PYTHON) -m unittest discover -s framework/python -v

## python-wheel: the Python SDK's wheel into bin/python/ (offline: Debian's setuptools).
python-wheel: deps
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && cp -r framework/python "$$tmp/src" && \
	rm -rf "$$tmp/src/build" "$$tmp/src/"*.egg-info && \
	$(PYTHON) -m pip wheel --no-index --no-build-isolation --no-deps --quiet -w bin/python "$$tmp/src" && \
	ls bin/python/*.whl

## bench: every benchmark, printed as a table of medians.
bench: deps
	@dir=$$(bash test/testbin/build.sh) && RUNPLANE_TESTBIN_DIR=$$dir bash test/bench/run.sh

## chaos: the serverless fault cases at load (test/chaos), printed as one table (CHAOS_RUN picks cases by regexp).
CHAOS_RUN ?= .
chaos:
	@RUNPLANE_TESTBIN_DIR=$${RUNPLANE_TESTBIN_DIR:-$$(bash test/testbin/build.sh)} bash test/chaos/run.sh '$(CHAOS_RUN)'

## lint: golangci-lint (pinned in hack/tools, configured by .golangci.yml): go vet, staticcheck,
## errcheck, errorlint, bodyclose and the rest, with gofmt and goimports. A second run
## waits for the first (it refused to start while another ran: "parallel golangci-lint is running").
lint:
	$(TOOL) golangci-lint run --allow-serial-runners ./...

## testbin: build the control-plane binaries into the cache (prints its dir).
testbin:
	bash test/testbin/build.sh

## deps: Debian packages the tests use (OpenSSH client/server for the SSH tests).
deps:
	@bash hack/install-deps.sh

## build: every runplane binary into bin/.
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./cmd/...

## image: the one runplane image holding every binary, as an OCI archive (no Docker needed):
## bin/runplane-image.tar; `ctr images import`, `skopeo copy oci-archive:…` or `crane push` read it.
## With a Docker engine, `docker build -t $(IMAGE) .` builds the same image from the Dockerfile.
IMAGE ?= ghcr.io/runplane/runplane:dev
image:
	$(GO) run ./hack/images/cmd/runplane-images -only runplane -ref $(IMAGE) -out bin/runplane-image.tar

## pin-images: write the current digests of the chart's third-party images (kube-scheduler, nats,
## pause) into charts/runplane/values.yaml, when a release is cut (needs the registries).
pin-images:
	$(GO) run ./hack/pinimages/cmd/pin-images -values charts/runplane/values.yaml

## nodebin: the real kubelet node's binaries (kubelet, containerd, shim, ctr) into the cache (prints its dir).
nodebin:
	bash test/testbin/node.sh

# The chart tools (helm-docs, kube-score, kubeconform), pinned in hack/tools/go.mod.
TOOL := $(GO) tool -modfile=$(CURDIR)/hack/tools/go.mod
CHART := charts/runplane

## generate: the chart's admission templates (webhook configurations, ValidatingAdmissionPolicies)
## from the webhook's Go definitions (hack/admgen); a test in make test fails when they are stale.
generate:
	$(GO) generate ./webhook/

## chart-docs: regenerate the chart README's values table from the comments in values.yaml.
chart-docs:
	$(TOOL) helm-docs --chart-search-root $(CHART) --template-files README.md.gotmpl

## chart-check: the values README is current, kubeconform accepts the default render and
## kube-score finds nothing critical beyond its opinionated CPU-limit, ephemeral-storage and
## pull-policy checks (needs helm on PATH: PATH=$$(bash test/testbin/build.sh):$$PATH).
KUBE_SCORE_IGNORE := container-ephemeral-storage-request-and-limit,container-image-pull-policy
chart-check:
	@$(TOOL) helm-docs --chart-search-root $(CHART) --template-files README.md.gotmpl --dry-run 2>/dev/null | diff -u $(CHART)/README.md - \
		|| { echo "$(CHART)/README.md is stale: run make chart-docs"; exit 1; }
	@helm template runplane $(CHART) -n runplane-system --kube-version v1.37.2 > /tmp/runplane-chart-render.yaml
	$(TOOL) kubeconform -strict -summary -ignore-missing-schemas /tmp/runplane-chart-render.yaml
	$(TOOL) kube-score score --output-format ci --ignore-container-cpu-limit --ignore-test $(KUBE_SCORE_IGNORE) /tmp/runplane-chart-render.yaml | grep '^\[CRITICAL\]' \
		&& { echo "kube-score: critical findings above"; exit 1; } || echo "kube-score: no critical findings"

clean:
	rm -rf bin/
