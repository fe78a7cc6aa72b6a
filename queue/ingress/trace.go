package ingress

import (
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/runplane/runplane/internal/tracing"
)

// traceAccept starts the ingress span of an invocation request: the child
// of the caller's traceparent (kept only as a parent id:
// tracing.ParentOnly), or a new trace. The span's context is answered
// back (traceparent) and travels in r's context to the invocation's NATS
// headers (publish). With tracing off and no traceparent, r is returned
// as it is.
func (s *Server) traceAccept(w http.ResponseWriter, r *http.Request, ns, pool string) (*http.Request, trace.Span) {
	parent := tracing.ParentOnly(tracing.FromHTTP(r.Header))
	if !parent.IsValid() && !s.tracer.Recording() {
		return r, trace.SpanFromContext(r.Context())
	}
	ctx, span := s.tracer.Start(r.Context(), parent, "ingress accept", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("runplane.namespace", ns), attribute.String("runplane.pool", pool)))
	tracing.ToHTTP(ctx, w.Header())
	return r.WithContext(ctx), span
}
