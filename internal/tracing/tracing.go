// Package tracing carries W3C trace context along runplane's serverless
// path (ingress → NATS → activator → sidecar → framework) and exports the
// spans of each hop over OTLP/gRPC when an endpoint is configured (off by
// default: the context is still propagated, nothing is recorded).
package tracing

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Settings configure a binary's span export. The zero value exports
// nothing unless the standard OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT env is
// set.
type Settings struct {
	// Endpoint is the OTLP/gRPC collector: host:port (TLS) or a URL
	// (http:// for plaintext). Empty: the OTEL_EXPORTER_OTLP_* env, else off.
	Endpoint string
	// SampleRatio of traces recorded, decided from the trace ID (so every
	// hop of one trace decides alike); 0 counts as 1.
	SampleRatio float64
}

// AddFlags registers --otlp-endpoint and --trace-sample-ratio.
func (s *Settings) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&s.Endpoint, "otlp-endpoint", "", "OTLP/gRPC collector to export trace spans to: host:port (TLS) or a URL (http:// for plaintext); "+
		"empty: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT (and the other OTEL_EXPORTER_OTLP_* settings), else no spans are exported")
	fs.Float64Var(&s.SampleRatio, "trace-sample-ratio", 1, "share of traces recorded when spans are exported, 0 < ratio ≤ 1, decided from the trace ID so every hop agrees")
}

// Enabled reports whether spans are exported, with getenv the process
// env (os.Getenv).
func (s Settings) Enabled(getenv func(string) string) bool {
	return s.Endpoint != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

// Provider builds service's tracer provider and the function that flushes
// and stops it. Without an endpoint it is a no-op provider: starting a span
// then allocates nothing beyond its context, and a remote parent passes
// through unchanged.
func (s Settings) Provider(ctx context.Context, service string, getenv func(string) string) (trace.TracerProvider, func(context.Context) error, error) {
	if s.SampleRatio < 0 || s.SampleRatio > 1 {
		return nil, nil, fmt.Errorf("--trace-sample-ratio %v: want a share of traces, 0 < ratio ≤ 1", s.SampleRatio)
	}
	if !s.Enabled(getenv) {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	var opts []otlptracegrpc.Option
	switch {
	case strings.Contains(s.Endpoint, "://"):
		opts = append(opts, otlptracegrpc.WithEndpointURL(s.Endpoint))
	case s.Endpoint != "":
		opts = append(opts, otlptracegrpc.WithEndpoint(s.Endpoint))
	}
	// New dials lazily: a collector that is down costs dropped spans, never
	// a failed start.
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("OTLP trace exporter (--otlp-endpoint %q): %w", s.Endpoint, err)
	}
	ratio := s.SampleRatio
	if ratio == 0 {
		ratio = 1
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithSampler(Sampler(ratio)),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))),
	)
	return tp, func(ctx context.Context) error {
		return errors.Join(tp.ForceFlush(ctx), tp.Shutdown(ctx))
	}, nil
}

// Sampler is parent-based with ratio for new traces. A remote parent's
// sampled flag is not followed: a caller's traceparent is only a parent
// id, and a tenant setting the flag on every call must not get more of
// its calls recorded than the ratio. The ratio is decided from the trace
// ID, so each hop of a trace (a remote parent to the next) decides alike.
func Sampler(ratio float64) sdktrace.Sampler {
	root := sdktrace.TraceIDRatioBased(ratio)
	return sdktrace.ParentBased(root, sdktrace.WithRemoteParentSampled(root), sdktrace.WithRemoteParentNotSampled(root))
}

// Flush runs a provider's stop function (from Provider) at exit, within
// five seconds, logging a failure (spans lost, never an exit error).
func Flush(stop func(context.Context) error, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := stop(ctx); err != nil {
		log.Warn("flushing trace spans", "err", err)
	}
}
