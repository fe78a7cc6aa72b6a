package tracing

import (
	"context"
	"net/http"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Header is the W3C trace context header runplane carries on every hop
// (HTTP and NATS). tracestate is neither read nor written: a caller's
// vendor state means nothing to runplane, and unbounded it would ride on
// every message.
const Header = "traceparent"

// canonicalHeader is Header as net/http keys it.
const canonicalHeader = "Traceparent"

// MaxHeaderBytes bounds a traceparent read from anywhere (version 00 has
// 55 bytes; later versions may append fields): a longer one is ignored.
const MaxHeaderBytes = 128

// carrier is a one-header TextMapCarrier over get/set: only traceparent,
// within MaxHeaderBytes.
type carrier struct {
	get func(string) string
	set func(string, string)
}

func (c carrier) Get(key string) string {
	if key != Header || c.get == nil {
		return ""
	}
	if v := c.get(key); len(v) <= MaxHeaderBytes {
		return v
	}
	return ""
}

func (c carrier) Set(key, value string) {
	if key == Header && c.set != nil {
		c.set(key, value)
	}
}

func (c carrier) Keys() []string { return []string{Header} }

// extract is the remote parent a carrier names: invalid when there is
// none, or it is malformed or too long.
func extract(c carrier) trace.SpanContext {
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), c))
}

// FromHTTP is the parent an HTTP request's traceparent names.
func FromHTTP(h http.Header) trace.SpanContext {
	if len(h[canonicalHeader]) == 0 { // h.Values would allocate the canonical key
		return trace.SpanContext{}
	}
	return extract(carrier{get: h.Get})
}

// FromNATS is the parent a NATS message's traceparent names.
func FromNATS(h nats.Header) trace.SpanContext {
	if len(h[Header]) == 0 {
		return trace.SpanContext{}
	}
	return extract(carrier{get: h.Get})
}

// ToHTTP writes ctx's span context (if any) to h as traceparent.
func ToHTTP(ctx context.Context, h http.Header) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		propagation.TraceContext{}.Inject(ctx, carrier{set: h.Set})
	}
}

// ToNATS writes ctx's span context (if any) to h as traceparent.
func ToNATS(ctx context.Context, h nats.Header) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		propagation.TraceContext{}.Inject(ctx, carrier{set: h.Set})
	}
}

// ParentOnly keeps of an untrusted caller's span context only its trace
// and span IDs: no sampled flag (the sampler decides, Sampler), no
// tracestate.
func ParentOnly(sc trace.SpanContext) trace.SpanContext {
	if !sc.IsValid() {
		return trace.SpanContext{}
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: sc.TraceID(), SpanID: sc.SpanID(), Remote: true})
}

// Tracer is one hop's tracer. The zero value (no provider, or a no-op
// one) records nothing and costs nothing: a remote parent passes through
// to the next hop unchanged.
type Tracer struct{ t trace.Tracer }

// NewTracer is the tracer called name of tp (nil: the zero Tracer).
func NewTracer(tp trace.TracerProvider, name string) Tracer {
	switch tp.(type) {
	case nil, noop.TracerProvider:
		return Tracer{}
	}
	return Tracer{t: tp.Tracer(name)}
}

// Recording reports whether t records spans.
func (t Tracer) Recording() bool { return t.t != nil }

// Start starts span name as a child of parent (a remote span context;
// invalid: of ctx's span, or a new trace).
func (t Tracer) Start(ctx context.Context, parent trace.SpanContext, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	}
	if t.t == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	return t.t.Start(ctx, name, opts...)
}

// End ends span, marking it failed with err (if any).
func End(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
