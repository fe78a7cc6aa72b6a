# runplane — see README.md. The two set-up commands are `make dev` and `make test`.
SHELL := /bin/bash
GO ?= go
export GONOSUMDB := k8s.io/kubernetes
# Go test flags for make test; -v so the output names every test that ran.
TESTFLAGS ?= -count=1 -v -timeout 40m

.PHONY: all dev test unit bench chaos lint testbin deps build python-test clean image

all: build

## dev: a local control plane with GPU nodes, NATS and every runplane component (Ctrl-C stops it).
dev: deps
	@$(GO) build -o bin/runplane-dev ./test/dev && exec bin/runplane-dev

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

## chaos: the serverless fault cases at load (test/chaos), printed as one table (CHAOS_RUN picks cases by regexp).
CHAOS_RUN ?= .
chaos:
	@RUNPLANE_TESTBIN_DIR=$${RUNPLANE_TESTBIN_DIR:-$$(bash test/testbin/build.sh)} bash test/chaos/run.sh '$(CHAOS_RUN)'

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

## image: the one runplane image holding every binary (needs a Docker engine).
IMAGE ?= ghcr.io/runplane/runplane:dev
image:
	docker build -t $(IMAGE) .

clean:
	rm -rf bin/
