package sidecar

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/tracing"
)

// traceInvoke starts the span of one call of the framework, a child of
// the activator's dispatch span the Dispatch's headers name; the returned
// context carries it to the framework (frameworkclient.Client writes its
// traceparent on the request). Free when tracing is off and the Dispatch
// came without a trace.
func (s *Sidecar) traceInvoke(ctx context.Context, msg jetstream.Msg, d messages.Dispatch) (context.Context, trace.Span) {
	parent := tracing.FromNATS(msg.Headers())
	if !parent.IsValid() && !s.tracer.Recording() {
		return ctx, trace.SpanFromContext(ctx)
	}
	return s.tracer.Start(ctx, parent, "sidecar invoke", trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		attribute.String("runplane.namespace", s.cfg.WorkerNamespace), attribute.String("runplane.pool", s.cfg.Pool),
		attribute.String("runplane.invocation", d.InvocationID), attribute.String("runplane.worker", s.cfg.WorkerName), attribute.Int("runplane.attempt", d.Attempt)))
}
