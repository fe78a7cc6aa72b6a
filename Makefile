# runplane — see README.md. The two set-up commands are `make dev` and `make test`.
SHELL := /bin/bash
GO ?= go
export GONOSUMDB := k8s.io/kubernetes
# Go test flags for make test; -v so the output names every test that ran.
TESTFLAGS ?= -count=1 -v -timeout 40m

.PHONY: all dev test unit bench lint testbin nodebin deps build python-test clean image

all: build

## dev: a local control plane with GPU nodes, NATS and every runplane component (Ctrl-C stops it),
## and one real kubelet node where the machine can run it (REAL_NODES=0 turns it off).
REAL_NODES ?= 1
dev: deps
	@$(GO) build -o bin/runplane-dev ./test/dev && exec bin/runplane-dev -real-nodes=$(REAL_NODES)

## test: unit + integration + e2e tests (builds the control-plane binaries once, cached outside the repo).
test: deps lint
	@TESTFLAGS="$(TESTFLAGS)" bash hack/test.sh

## unit: only the tests that need no control plane.
unit:
	$(GO) test -short $(TESTFLAGS) ./...

python-test:
	python3 -m unittest discover -s framework/python -v

## bench: every benchmark, printed as a table of medians.
bench: deps
	@dir=$$(bash test/testbin/build.sh) && RUNPLANE_TESTBIN_DIR=$$dir bash test/bench/run.sh

## lint: gofmt and go vet.
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

## testbin: build the control-plane binaries into the cache (prints its dir).
testbin:
	bash test/testbin/build.sh

## deps: Debian packages the tests use (OpenSSH client/server for the SSH tests).
deps:
	@bash hack/install-deps.sh

## build: every runplane binary into bin/.
build:
	$(GO) build -o bin/ ./cmd/...

## image: the one runplane image holding every binary, as an OCI archive (no Docker needed):
## bin/runplane-image.tar; `ctr images import`, `skopeo copy oci-archive:…` or `crane push` read it.
## With a Docker engine, `docker build -t $(IMAGE) .` builds the same image from the Dockerfile.
IMAGE ?= ghcr.io/runplane/runplane:dev
image:
	$(GO) run ./hack/images/cmd/runplane-images -only runplane -ref $(IMAGE) -out bin/runplane-image.tar

## nodebin: the real kubelet node's binaries (kubelet, containerd, shim, ctr) into the cache (prints its dir).
nodebin:
	bash test/testbin/node.sh

clean:
	rm -rf bin/
