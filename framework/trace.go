package framework

import (
	"fmt"
	"net/http"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/runplane/runplane/internal/tracing"
)

// WithTracerProvider records each call's "framework handler" span with tp,
// a child of the sidecar's span (the request's traceparent). Default: the
// global provider (otel.SetTracerProvider), a no-op unless the program
// sets one. Either way the handler's context carries the trace, so spans
// the handler starts continue it.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *handlerOptions) { o.tracer = tracing.NewTracer(tp, tracerName) }
}

const tracerName = "runplane/framework"

// handlerTracer is t, or the global provider's tracer when no option chose
// one (the global one delegates to whatever the program sets later).
func handlerTracer(t tracing.Tracer) tracing.Tracer {
	if t.Recording() {
		return t
	}
	return tracing.NewTracer(otel.GetTracerProvider(), tracerName)
}

func handlerSpanOptions(req Request) []trace.SpanStartOption {
	return []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		attribute.String("runplane.invocation", req.InvocationID), attribute.Int("runplane.attempt", req.Attempt))}
}

// endHandlerSpan ends a handler's span, failed when the handler returned
// an error or answered a 5xx.
func endHandlerSpan(span trace.Span, resp Response, err error) {
	if err == nil && resp.StatusCode >= http.StatusInternalServerError && span.IsRecording() {
		span.SetStatus(codes.Error, fmt.Sprintf("status %d", resp.StatusCode))
	}
	tracing.End(span, err)
}
