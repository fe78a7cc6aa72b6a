// Package tracing carries W3C trace context along runplane's serverless
// path (ingress → NATS → activator → sidecar → framework) and exports the
// spans of each hop over OTLP/gRPC when an endpoint is configured (off by
// default: the context is still propagated, nothing is recorded).
package tracing

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
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
	Endpoint string `json:"otlpEndpoint,omitempty"`
	// SampleRatio of traces recorded, decided where a trace enters (a new
	// trace, or the ingress for a caller's parent: Sampler) and followed by
	// every later hop; 0 counts as 1.
	SampleRatio float64 `json:"sampleRatio,omitempty"`
}

// AddFlags registers --otlp-endpoint and --trace-sample-ratio.
func (s *Settings) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&s.Endpoint, "otlp-endpoint", "", "OTLP/gRPC collector to export trace spans to: host:port (TLS) or a URL (http:// for plaintext); "+
		"empty: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT (and the other OTEL_EXPORTER_OTLP_* settings), else no spans are exported")
	fs.Float64Var(&s.SampleRatio, "trace-sample-ratio", 1, "share of traces recorded when spans are exported, 0 < ratio ≤ 1, decided where a trace enters runplane (the ingress) and followed by every later hop")
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

// Sampler decides which traces are recorded, at ratio of them:
//   - A new trace (no parent) by its trace ID, which the SDK drew at random.
//   - A caller's parent (StartFromCaller: the ingress, the only hop a
//     tenant's traceparent reaches) by a keyed hash of its trace ID. The
//     caller chooses that ID, and the SDK's ratio sampler reads its low
//     bytes directly (zeros: always recorded, 0xff…: never), so the raw ID
//     would let a tenant decide; HMAC-SHA256 under a random per-process key
//     makes the decision unpredictable to it yet alike for every call of
//     one trace within the process. The caller's sampled flag is ignored.
//   - Any other remote parent (a NATS hop after the ingress, whose headers
//     only runplane writes) by its sampled flag: the ingress decided once,
//     and each later hop (keyed differently, in another process) follows.
func Sampler(ratio float64) sdktrace.Sampler {
	root := sdktrace.TraceIDRatioBased(ratio)
	return sampler{
		ratio: ratio, key: []byte(rand.Text()), // 128 random bits; rand.Text cannot fail
		threshold: uint64(ratio * (1 << 63)),
		hop:       sdktrace.ParentBased(root),
	}
}

// sampler is Sampler's: the SDK has no sampler that decides on a keyed
// hash, so this one wraps its parent-based one.
type sampler struct {
	ratio     float64
	key       []byte
	threshold uint64 // of the hash's first 63 bits, as TraceIDRatioBased
	hop       sdktrace.Sampler
}

func (s sampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	psc := trace.SpanContextFromContext(p.ParentContext)
	if !psc.IsValid() || !psc.IsRemote() || !fromCaller(p.ParentContext) {
		return s.hop.ShouldSample(p)
	}
	mac := hmac.New(sha256.New, s.key)
	mac.Write(p.TraceID[:]) // a hash.Hash never returns a write error
	res := sdktrace.SamplingResult{Decision: sdktrace.Drop}
	if binary.BigEndian.Uint64(mac.Sum(nil))>>1 < s.threshold {
		res.Decision = sdktrace.RecordAndSample
	}
	return res
}

func (s sampler) Description() string {
	return fmt.Sprintf("runplane{caller parent: keyed hash at %v; %s}", s.ratio, s.hop.Description())
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
