package activator

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/runplane/runplane/queue/activator/internal/state"
)

// traceDispatch starts the span of one dispatch of it to worker, a child
// of the ingress span its message named (it.Trace); the returned context
// carries it into the Dispatch's NATS headers. Nothing is recorded or
// allocated when tracing is off and the invocation came without a trace.
func (a *Activator) traceDispatch(ctx context.Context, it *state.Item, worker string, attempt int) (context.Context, trace.Span) {
	if !it.Trace.IsValid() && !a.tracer.Recording() {
		return ctx, trace.SpanFromContext(ctx)
	}
	return a.tracer.Start(ctx, it.Trace, "activator dispatch", trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
		attribute.String("runplane.namespace", it.Inv.Namespace), attribute.String("runplane.pool", it.Inv.Pool),
		attribute.String("runplane.invocation", it.Inv.InvocationID), attribute.String("runplane.worker", worker), attribute.Int("runplane.attempt", attempt)))
}

// keepTrace notes invocation k's trace parent sc in traces (rebuild), if
// it has one: a new leader's dispatch continues the invocation's trace.
func keepTrace(traces map[string]trace.SpanContext, k string, sc trace.SpanContext) {
	if sc.IsValid() {
		traces[k] = sc
	}
}
