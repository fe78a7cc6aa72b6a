# syntax=docker/dockerfile:1
# One image holding every runplane binary (runplane-webhook, -extender, -controller, -queue,
# -sidecar, -ssh, -copy, -accessor, framework-echo). The chart picks the binary per container
# with `command:`, and the webhook injects this same image into worker and SSH Pods.
#
#   docker build -t ghcr.io/runplane/runplane:dev .
#   docker buildx build --platform linux/amd64,linux/arm64 -t ghcr.io/runplane/runplane:dev .

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
# Modules first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS=linux
ARG TARGETARCH=amd64
# The version every binary reports (--version, runplane_build_info); make image passes it.
ARG VERSION=
# Static binaries: no cgo, so they run on distroless/static (no libc).
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w -X github.com/runplane/runplane/internal/buildinfo.version=$VERSION" -o /out/ ./cmd/...

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ /usr/local/bin/
# distroless nonroot: uid/gid 65532, which the chart's securityContext also sets.
USER 65532:65532
