package ingress

import (
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/runplane/runplane/internal/tracing"
)

// traceAccept starts the ingress span of an invocation request: the child
// of the caller's traceparent (kept only as a parent id:
// tracing.ParentOnly), or a new trace. The span's context is answered
// back (traceparent) and travels in r's context to the invocation's NATS
// headers (publish). With tracing off and no traceparent, r is returned
// as it is. It is called only once the caller is authorized for the pool,
// so a caller without that right has no span recorded (nor a traceparent
// answered); start, when the request arrived, keeps the span's duration
// whole.
func (s *Server) traceAccept(w http.ResponseWriter, r *http.Request, ns, pool string, start time.Time) (*http.Request, trace.Span) {
	caller := tracing.FromHTTP(r.Header)
	if !caller.IsValid() && !s.tracer.Recording() {
		return r, trace.SpanFromContext(r.Context())
	}
	ctx, span := s.tracer.StartFromCaller(r.Context(), caller, "ingress accept", trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start),
		trace.WithAttributes(attribute.String("runplane.namespace", ns), attribute.String("runplane.pool", pool)))
	tracing.ToHTTP(ctx, w.Header())
	return r.WithContext(ctx), span
}
