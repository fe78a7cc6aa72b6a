package framework_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/tracing"
	"github.com/runplane/runplane/internal/tracing/otlptest"
	"github.com/runplane/runplane/sidecar/frameworkclient"
)

// TestHandlerContinuesTrace: the sidecar's client sends its context's
// trace on the unix socket and the handler's ctx carries it — with no provider (the
// handler's own spans then continue the caller's trace) and with one
// (a "framework handler" span, child of the caller's).
func TestHandlerContinuesTrace(t *testing.T) {
	caller := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled})
	rcv := otlptest.Start(t)
	tp, stop, err := tracing.Settings{Endpoint: rcv.Endpoint()}.Provider(context.Background(), "fw", func(string) string { return "" })
	require.NoError(t, err)
	cases := map[string]struct {
		opts       []framework.Option
		wantParent trace.SpanID // of the handler's ctx span
	}{
		"no provider": {nil, caller.SpanID()},
		"provider":    {[]framework.Option{framework.WithTracerProvider(tp)}, trace.SpanID{}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			sock := shortSocket(t)
			seen := make(chan trace.SpanContext, 1)
			serve(t, sock, framework.DefaultHealthPath, framework.NewHandler(func(ctx context.Context, r framework.Request) (framework.Response, error) {
				seen <- trace.SpanContextFromContext(ctx)
				return framework.Response{}, nil
			}, c.opts...))
			ctx := trace.ContextWithRemoteSpanContext(context.Background(), caller)
			_, err := frameworkclient.NewClient(sock, "", "").Invoke(ctx, framework.Request{InvocationID: "i-" + name, Attempt: 1})
			require.NoError(t, err)
			got := <-seen
			assert.Equal(t, caller.TraceID(), got.TraceID())
			if c.wantParent.IsValid() {
				assert.Equal(t, c.wantParent, got.SpanID(), "the caller's span itself")
			} else {
				assert.NotEqual(t, caller.SpanID(), got.SpanID(), "a span of its own")
			}
		})
	}
	require.NoError(t, stop(context.Background()))
	spans := rcv.Spans(caller.TraceID().String())
	require.Len(t, spans, 1)
	assert.Equal(t, "framework handler", spans[0].Name)
	assert.Equal(t, caller.SpanID().String(), spans[0].Parent)
}
