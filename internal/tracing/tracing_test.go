package tracing_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/runplane/runplane/internal/tracing"
	"github.com/runplane/runplane/internal/tracing/otlptest"
)

const (
	traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	spanID  = "00f067aa0ba902b7"
	parent  = "00-" + traceID + "-" + spanID + "-01"
)

func noEnv(string) string { return "" }

func TestFromHTTP(t *testing.T) {
	cases := map[string]struct {
		header string
		valid  bool
	}{
		"absent":                      {"", false},
		"valid":                       {parent, true},
		"malformed":                   {"00-xyz-" + spanID + "-01", false},
		"all-zero trace id":           {"00-00000000000000000000000000000000-" + spanID + "-01", false},
		"future version, long":        {"cc-" + traceID + "-" + spanID + "-01-" + strings.Repeat("a", 200), false},
		"future version, within size": {"cc-" + traceID + "-" + spanID + "-01-abcd", true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			h := http.Header{}
			if c.header != "" {
				h.Set(tracing.Header, c.header)
			}
			sc := tracing.FromHTTP(h)
			assert.Equal(t, c.valid, sc.IsValid())
			if c.valid {
				assert.Equal(t, traceID, sc.TraceID().String())
				assert.Equal(t, spanID, sc.SpanID().String())
			}
		})
	}
}

// TestParentOnly: a caller's span context keeps only its IDs — no sampled
// flag, no tracestate — so it cannot steer sampling or smuggle state on.
func TestParentOnly(t *testing.T) {
	h := http.Header{}
	h.Set(tracing.Header, parent)
	h.Set("tracestate", "vendor=secret")
	sc := tracing.ParentOnly(tracing.FromHTTP(h))
	require.True(t, sc.IsValid())
	assert.False(t, sc.IsSampled())
	assert.Equal(t, 0, sc.TraceState().Len())
	assert.Equal(t, traceID, sc.TraceID().String())
	assert.False(t, tracing.ParentOnly(trace.SpanContext{}).IsValid())
}

// TestNATSRoundTrip: what one hop writes to a NATS message the next reads.
func TestNATSRoundTrip(t *testing.T) {
	sc := tracing.FromHTTP(http.Header{"Traceparent": {parent}})
	ctx, span := tracing.Tracer{}.Start(context.Background(), sc, "hop")
	defer span.End()
	h := nats.Header{}
	tracing.ToNATS(ctx, h)
	assert.Equal(t, parent, h.Get(tracing.Header))
	assert.Equal(t, sc.TraceID(), tracing.FromNATS(h).TraceID())

	empty := nats.Header{}
	tracing.ToNATS(context.Background(), empty)
	assert.Empty(t, empty, "no span context: nothing written")
}

// TestSamplerIgnoresRemoteFlag: with ratio 0 nothing is recorded, even
// under a remote parent that says sampled; a local parent's decision is
// followed.
func TestSamplerIgnoresRemoteFlag(t *testing.T) {
	remote := trace.ContextWithRemoteSpanContext(context.Background(), tracing.FromHTTP(http.Header{"Traceparent": {parent}}))
	tid, err := trace.TraceIDFromHex(traceID)
	require.NoError(t, err)
	res := tracing.Sampler(0).ShouldSample(sdktrace.SamplingParameters{ParentContext: remote, TraceID: tid, Name: "x"})
	assert.Equal(t, sdktrace.Drop, res.Decision)
	res = tracing.Sampler(1).ShouldSample(sdktrace.SamplingParameters{ParentContext: remote, TraceID: tid, Name: "x"})
	assert.Equal(t, sdktrace.RecordAndSample, res.Decision)
}

func TestSettings(t *testing.T) {
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}
	assert.False(t, tracing.Settings{}.Enabled(noEnv))
	assert.True(t, tracing.Settings{}.Enabled(func(k string) string { return env[k] }))
	assert.True(t, tracing.Settings{Endpoint: "collector:4317"}.Enabled(noEnv))

	_, _, err := tracing.Settings{Endpoint: "x:1", SampleRatio: 1.5}.Provider(context.Background(), "t", noEnv)
	assert.ErrorContains(t, err, "--trace-sample-ratio")

	tp, stop, err := tracing.Settings{}.Provider(context.Background(), "t", noEnv)
	require.NoError(t, err)
	assert.False(t, tracing.NewTracer(tp, "t").Recording(), "off by default")
	assert.NoError(t, stop(context.Background()))
}

// TestProviderExports: an enabled provider exports its spans over OTLP/gRPC
// (to the in-process receiver), under the service's name.
func TestProviderExports(t *testing.T) {
	rcv := otlptest.Start(t)
	tp, stop, err := tracing.Settings{Endpoint: rcv.Endpoint()}.Provider(context.Background(), "svc", noEnv)
	require.NoError(t, err)
	tr := tracing.NewTracer(tp, "t")
	require.True(t, tr.Recording())
	_, span := tr.Start(context.Background(), tracing.FromHTTP(http.Header{"Traceparent": {parent}}), "op")
	span.End()
	require.NoError(t, stop(context.Background()))
	spans := rcv.Spans(traceID)
	require.Len(t, spans, 1)
	assert.Equal(t, "svc", spans[0].Service)
	assert.Equal(t, "op", spans[0].Name)
	assert.Equal(t, spanID, spans[0].Parent)
}

// TestOffPathAllocatesNothing: with tracing off and no traceparent, the
// hooks on the hot path (read a header, start a span, write a header)
// allocate nothing.
func TestOffPathAllocatesNothing(t *testing.T) {
	hh, nh := http.Header{"Content-Type": {"application/json"}}, nats.Header{"Nats-Msg-Id": {"x"}}
	ctx := context.Background()
	var tr tracing.Tracer
	allocs := testing.AllocsPerRun(100, func() {
		c, span := tr.Start(ctx, tracing.FromHTTP(hh), "a")
		tracing.ToNATS(c, nh)
		c, span2 := tr.Start(c, tracing.FromNATS(nh), "b")
		tracing.ToHTTP(c, hh)
		tracing.End(span2, nil)
		span.End()
	})
	assert.Zero(t, allocs)
}
