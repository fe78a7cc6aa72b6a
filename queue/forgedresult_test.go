package queue_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/messages"
)

// TestForgedResultIgnored: a second worker of the same pool publishes a
// result for an invocation dispatched to the first (under its own name;
// under the first's name with an attempt never dispatched; under the
// first's name and attempt without the attempt's result token, or with a
// wrong one): all are refused and counted, and the invocation ends with the
// first worker's result.
func TestForgedResultIgnored(t *testing.T) {
	e := newEnv(t, nil)
	g := newGate()
	e.worker("a", 1, g.handler)
	r := e.invoke(map[string]any{"mode": "async", "invocationID": "victim", "payload": map[string]string{"from": "caller"}})
	require.Equal(t, 202, r.code, "%s", r.raw)
	require.Equal(t, "victim", g.next(t))
	e.worker("b", 1, nil) // the forger: a worker of the same pool

	forged := []messages.Result{
		{Worker: "b", Attempt: 1},
		{Worker: "a", Attempt: 2},
		{Worker: "a", Attempt: 1}, // the dispatched worker's name, without its token
		{Worker: "a", Attempt: 1, ResultToken: "guess"},
	}
	for _, f := range forged {
		f.InvocationID, f.Namespace, f.Pool, f.State = "victim", "default", testPool, messages.StateSucceeded
		f.Response = &messages.Response{StatusCode: 200, Body: json.RawMessage(`{"from":"forger"}`)}
		b, err := json.Marshal(f)
		require.NoError(t, err)
		_, err = e.js.Publish(context.Background(), e.subj.Result("default", testPool), b)
		require.NoError(t, err)
	}
	// Barrier: the activator has judged all four (the attempt's token is
	// checked first: a result without it is refused as "token" whoever it
	// names).
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m, err := e.metrics()
		assert.NoError(c, err)
		assert.Contains(c, m, `runplane_activator_results_refused_total{reason="unknown_attempt"} 1`)
		assert.Contains(c, m, `runplane_activator_results_refused_total{reason="token"} 3`)
	}, 10*time.Second, 20*time.Millisecond)
	rec := e.record("victim")
	require.False(t, rec.State.Terminal(), "a forged result finished the invocation: %+v", rec)

	close(g.release)
	rec = e.waitState("victim", messages.StateSucceeded, 10*time.Second)
	assert.Equal(t, "a", rec.Worker)
	require.NotNil(t, rec.Response)
	assert.JSONEq(t, `{"from":"caller"}`, string(rec.Response.Body))
	assert.False(t, strings.Contains(string(rec.Response.Body), "forger"))
}

// TestForgedReplyIgnored: another worker of the pool that knows the
// ingress replica's reply subject (from a sync invocation it served) and
// guesses a victim's invocation ID cannot answer the victim's sync caller:
// the caller gets the dispatched worker's result.
func TestForgedReplyIgnored(t *testing.T) {
	e := newEnv(t, nil)
	// The forger serves one sync invocation and learns the reply subject
	// (its Dispatch's ReplyTo, where its sidecar answers: seen here on the
	// wire).
	replyTo := make(chan string, 1)
	sub, err := e.nc.Subscribe(e.subj.Reply("default", testPool)+".>", func(m *nats.Msg) {
		select {
		case replyTo <- m.Subject:
		default:
		}
	})
	require.NoError(t, err)
	require.NoError(t, e.nc.Flush())
	forger := e.worker("b", 1, nil)
	require.Equal(t, 200, e.invoke(map[string]any{"mode": "sync", "payload": "x"}).code)
	learned := <-replyTo
	require.NoError(t, sub.Unsubscribe())
	require.NoError(t, forger.Stop())

	g := newGate()
	e.worker("a", 1, g.handler)
	done := make(chan resp, 1)
	go func() {
		done <- e.invoke(map[string]any{"mode": "sync", "invocationID": "victim", "payload": map[string]string{"from": "caller"}, "timeoutSeconds": 20})
	}()
	require.Equal(t, "victim", g.next(t))
	// reply.<ns>.<pool>.<replica>.<id>.<token>: the forger knows all but
	// the victim's token.
	prefix := e.subj.Reply("default", testPool) + "."
	require.True(t, strings.HasPrefix(learned, prefix), learned)
	parts := strings.Split(strings.TrimPrefix(learned, prefix), ".") // replica, ID, token
	require.Len(t, parts, 3, learned)
	base := prefix + parts[0]
	b, err := json.Marshal(messages.Result{InvocationID: "victim", Namespace: "default", Pool: testPool, Worker: "b", Attempt: 1,
		State: messages.StateSucceeded, Response: &messages.Response{StatusCode: 200, Body: json.RawMessage(`{"from":"forger"}`)}})
	require.NoError(t, err)
	for _, subj := range []string{base + ".victim", base + ".victim." + parts[2], base + ".victim.guess"} {
		require.NoError(t, e.nc.Publish(subj, b))
	}
	// The worker answers on the same connection after the forgeries: the
	// ingress sees them first.
	close(g.release)
	r := <-done
	require.Equal(t, 200, r.code, "%s", r.raw)
	assert.Equal(t, "a", r.body["worker"])
	assert.NotContains(t, string(r.raw), "forger")
}

// TestForgedResultIgnoredAfterRestart: a new activator recovers the result
// token of an attempt that is already running (from its Dispatch in the
// stream), so another worker's forged result naming the running worker is
// still refused after a leader change.
func TestForgedResultIgnoredAfterRestart(t *testing.T) {
	e := newEnv(t, nil)
	g := newGate()
	e.worker("a", 1, g.handler)
	r := e.invoke(map[string]any{"mode": "async", "invocationID": "victim", "payload": map[string]string{"from": "caller"}})
	require.Equal(t, 202, r.code, "%s", r.raw)
	require.Equal(t, "victim", g.next(t))
	e.waitState("victim", messages.StateRunning, 10*time.Second)

	e.stop()
	e.startQueue()
	require.Eventually(t, func() bool {
		body, err := e.metrics()
		return err == nil && strings.Contains(body, "\nrunplane_activator_rebuilt 1\n")
	}, 10*time.Second, 20*time.Millisecond, "the new activator rebuilt its state")

	f := messages.Result{InvocationID: "victim", Namespace: "default", Pool: testPool, Worker: "a", Attempt: 1, State: messages.StateSucceeded,
		Response: &messages.Response{StatusCode: 200, Body: json.RawMessage(`{"from":"forger"}`)}}
	b, err := json.Marshal(f)
	require.NoError(t, err)
	_, err = e.js.Publish(context.Background(), e.subj.Result("default", testPool), b)
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m, err := e.metrics()
		assert.NoError(c, err)
		assert.Contains(c, m, `runplane_activator_results_refused_total{reason="token"} 1`)
	}, 10*time.Second, 20*time.Millisecond)
	require.False(t, e.record("victim").State.Terminal(), "a forged result finished the running invocation after the restart")

	close(g.release)
	rec := e.waitState("victim", messages.StateSucceeded, 10*time.Second)
	assert.Equal(t, "a", rec.Worker)
	assert.JSONEq(t, `{"from":"caller"}`, string(rec.Response.Body))
}
