// Package otlptest is an in-process OTLP/gRPC trace receiver for tests: the
// real collector protocol (go.opentelemetry.io/proto/otlp), the spans
// kept in memory.
package otlptest

import (
	"context"
	"encoding/hex"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// Span is one received span, IDs in hex as in a traceparent.
type Span struct {
	Service, Name           string
	TraceID, SpanID, Parent string
	Attributes              map[string]string
}

// Receiver serves the OTLP trace service on loopback.
type Receiver struct {
	coltrace.UnimplementedTraceServiceServer
	// Addr is the receiver's host:port (plaintext gRPC).
	Addr string

	mu    sync.Mutex
	spans []Span
}

// Start serves a Receiver until the test ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := &Receiver{Addr: ln.Addr().String()}
	srv := grpc.NewServer()
	coltrace.RegisterTraceServiceServer(srv, r)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Stop()
		require.NoError(t, <-done)
	})
	return r
}

// Endpoint is the receiver as an --otlp-endpoint URL.
func (r *Receiver) Endpoint() string { return "http://" + r.Addr }

// Export implements coltrace.TraceServiceServer.
func (r *Receiver) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				attrs := map[string]string{}
				for _, kv := range s.GetAttributes() {
					attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
				}
				r.spans = append(r.spans, Span{Service: service, Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()),
					SpanID: hex.EncodeToString(s.GetSpanId()), Parent: hex.EncodeToString(s.GetParentSpanId()), Attributes: attrs})
			}
		}
	}
	return &coltrace.ExportTraceServiceResponse{}, nil
}

// Spans are the spans received so far of trace traceID (hex; "": all).
func (r *Receiver) Spans(traceID string) []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Span
	for _, s := range r.spans {
		if traceID == "" || s.TraceID == traceID {
			out = append(out, s)
		}
	}
	return out
}
