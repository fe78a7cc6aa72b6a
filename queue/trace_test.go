package queue_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/tracing"
	"github.com/runplane/runplane/internal/tracing/otlptest"
	"github.com/runplane/runplane/queue"
)

const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
)

// syncCall posts one sync invocation with header traceparent (unless
// empty) and returns the answer's status and traceparent.
func (e *env) syncCall(traceparent string) (int, string) {
	e.t.Helper()
	return e.tracedCall(`{"mode":"sync","payload":{"hello":"trace"}}`, traceparent)
}

// tracedCall posts body as an invocation with header traceparent.
func (e *env) tracedCall(body, traceparent string) (int, string) {
	e.t.Helper()
	req, err := http.NewRequest("POST", e.base+"/v1/namespaces/default/pools/"+testPool+"/invocations", bytes.NewBufferString(body))
	require.NoError(e.t, err)
	req.Header.Set("Content-Type", "application/json")
	if traceparent != "" {
		req.Header.Set(tracing.Header, traceparent)
	}
	r, err := httpClient().Do(req)
	require.NoError(e.t, err)
	defer r.Body.Close()
	_, err = io.ReadAll(r.Body)
	require.NoError(e.t, err)
	return r.StatusCode, r.Header.Get(tracing.Header)
}

// TestTraceSpansIngressToFramework: one sync call with a caller's
// traceparent, through the real queue, NATS, sidecar and Go framework
// helper, each exporting over OTLP/gRPC to an in-process receiver: the
// four spans share the caller's trace ID and chain caller → ingress accept
// → activator dispatch → sidecar invoke → framework handler, and the
// answer's traceparent names the ingress span.
func TestTraceSpansIngressToFramework(t *testing.T) {
	rcv := otlptest.Start(t)
	newTP, flush := providers(t, rcv)
	qtp := newTP("runplane-queue")
	e := newEnv(t, func(c *queue.Config) { c.TracerProvider = qtp })
	e.sidecarTP, e.frameworkTP = newTP("runplane-sidecar"), newTP("framework-echo")
	e.echoWorker("w1")

	code, answered := e.syncCall("00-" + callerTrace + "-" + callerSpan + "-01")
	require.Equal(t, http.StatusOK, code)
	require.True(t, strings.HasPrefix(answered, "00-"+callerTrace+"-"), "answer's traceparent %q continues the caller's trace", answered)

	flush()
	byName := spansByName(rcv)
	chain := []struct{ name, service string }{
		{"ingress accept", "runplane-queue"}, {"activator dispatch", "runplane-queue"},
		{"sidecar invoke", "runplane-sidecar"}, {"framework handler", "framework-echo"},
	}
	parent := callerSpan
	for _, c := range chain {
		s, ok := byName[c.name]
		require.True(t, ok, "span %q in trace %s (got %v)", c.name, callerTrace, byName)
		assert.Equal(t, c.service, s.Service, c.name)
		assert.Equal(t, parent, s.Parent, "%s's parent", c.name)
		parent = s.SpanID
	}
	assert.Equal(t, "00-"+callerTrace+"-"+byName["ingress accept"].SpanID+"-01", answered, "the answer names the ingress span")
	assert.Len(t, rcv.Spans(""), len(chain), "no other spans")
}

// providers makes tracer providers exporting to rcv; flush stops them
// all, the barrier after which their spans are at the receiver (an
// export is synchronous).
func providers(t *testing.T, rcv *otlptest.Receiver) (newTP func(service string) trace.TracerProvider, flush func()) {
	var stops []func(context.Context) error
	newTP = func(service string) trace.TracerProvider {
		tp, stop, err := tracing.Settings{Endpoint: rcv.Endpoint()}.Provider(context.Background(), service, func(string) string { return "" })
		require.NoError(t, err)
		stops = append(stops, stop)
		return tp
	}
	return newTP, func() {
		for _, stop := range stops {
			require.NoError(t, stop(context.Background()))
		}
	}
}

// spansByName are the received spans of the caller's trace by name.
func spansByName(rcv *otlptest.Receiver) map[string]otlptest.Span {
	byName := map[string]otlptest.Span{}
	for _, s := range rcv.Spans(callerTrace) {
		byName[s.Name] = s
	}
	return byName
}

// TestTraceSurvivesFailover: an invocation queued under one activator and
// dispatched by the next (rebuilt from the stream) keeps its trace: the
// dispatch span is the child of the first replica's ingress span.
func TestTraceSurvivesFailover(t *testing.T) {
	rcv := otlptest.Start(t)
	newTP, flush := providers(t, rcv)
	qtp := newTP("runplane-queue")
	e := newEnv(t, func(c *queue.Config) { c.TracerProvider = qtp })
	code, _ := e.tracedCall(`{"mode":"async","invocationID":"failover","payload":{}}`, "00-"+callerTrace+"-"+callerSpan+"-01")
	require.Equal(t, http.StatusAccepted, code)
	e.stop()
	e.startQueue()
	e.sidecarTP, e.frameworkTP = newTP("runplane-sidecar"), newTP("framework-echo")
	e.echoWorker("w1")
	e.waitState("failover", messages.StateSucceeded, 20*time.Second)
	flush()
	byName := spansByName(rcv)
	require.Contains(t, byName, "ingress accept")
	require.Contains(t, byName, "activator dispatch", "the new leader's dispatch continues the trace")
	assert.Equal(t, byName["ingress accept"].SpanID, byName["activator dispatch"].Parent)
	assert.Equal(t, byName["activator dispatch"].SpanID, byName["sidecar invoke"].Parent)
}

// TestTraceOffPropagates: with tracing off everywhere (the default), a
// caller's traceparent still passes through — the answer names it, as a
// parent id only (its sampled flag dropped) — and a malformed or
// oversized one is not answered back.
func TestTraceOffPropagates(t *testing.T) {
	e := newEnv(t, nil)
	e.echoWorker("w1")
	cases := map[string]struct{ sent, answered string }{
		"caller's trace": {"00-" + callerTrace + "-" + callerSpan + "-01", "00-" + callerTrace + "-" + callerSpan + "-00"},
		"none":           {"", ""},
		"malformed":      {"00-" + callerTrace + "-zz-01", ""},
		"oversized":      {"00-" + callerTrace + "-" + callerSpan + "-01-" + strings.Repeat("a", tracing.MaxHeaderBytes), ""},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			code, answered := e.syncCall(c.sent)
			require.Equal(t, http.StatusOK, code)
			assert.Equal(t, c.answered, answered)
		})
	}
}
