package framework_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/sidecar/frameworkclient"
)

// gated is a handler that counts its calls and waits for gate (or its
// context) before echoing; cancelled counts the calls whose context ended.
type gated struct {
	calls, cancelled atomic.Int32
	gate             chan struct{}
}

func (g *gated) fn(ctx context.Context, r framework.Request) (framework.Response, error) {
	g.calls.Add(1)
	select {
	case <-g.gate:
		return framework.Response{Body: json.RawMessage(`"` + r.InvocationID + `"`)}, nil
	case <-ctx.Done():
		g.cancelled.Add(1)
		return framework.Response{}, ctx.Err()
	}
}

// TestIdempotentInvoke: a call (invocation ID, attempt) runs once however
// often it is posted; a caller that hangs up leaves it running, and a
// re-attach collects its outcome; a re-attach never starts an unknown call.
func TestIdempotentInvoke(t *testing.T) {
	sock := shortSocket(t)
	clk := clocktesting.NewFakeClock(time.Now())
	g := &gated{gate: make(chan struct{})}
	serve(t, sock, "", framework.NewHandler(g.fn, framework.WithClock(clk)))
	c := frameworkclient.NewClient(sock, "", "")
	caps, err := c.Probe(context.Background())
	require.NoError(t, err)
	assert.True(t, caps.IdempotentInvoke, "the Go helper advertises the idempotent invoke")

	req := framework.Request{InvocationID: "i1", Attempt: 1}
	// The first caller dies mid-call (its context ends: the connection closes).
	ctx, hangUp := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() { _, err := c.Invoke(ctx, req); first <- err }()
	require.Eventually(t, func() bool { return g.calls.Load() == 1 }, 5*time.Second, 5*time.Millisecond)
	hangUp()
	require.Error(t, <-first)

	// A repeat and a re-attach wait for the same call.
	got := make(chan framework.Response, 2)
	go func() { r, err := c.Invoke(context.Background(), req); assert.NoError(t, err); got <- r }()
	go func() { r, err := c.Attach(context.Background(), req); assert.NoError(t, err); got <- r }()
	close(g.gate)
	for range 2 {
		select {
		case r := <-got:
			assert.JSONEq(t, `"i1"`, string(r.Body))
		case <-time.After(5 * time.Second):
			t.Fatal("no outcome")
		}
	}
	// Collected again after it ended.
	r, err := c.Attach(context.Background(), req)
	require.NoError(t, err)
	assert.JSONEq(t, `"i1"`, string(r.Body))
	assert.EqualValues(t, 1, g.calls.Load(), "handler calls")
	assert.EqualValues(t, 0, g.cancelled.Load())

	_, err = c.Attach(context.Background(), framework.Request{InvocationID: "i1", Attempt: 2})
	require.ErrorIs(t, err, frameworkclient.ErrUnknownCall, "another attempt is another call, and attach never starts one")
	assert.EqualValues(t, 1, g.calls.Load(), "handler calls")
}

// TestIdempotentCancelAndDetachGrace: an explicit cancel ends a call; a
// call nobody waits for is cancelled once the detach grace is over.
func TestIdempotentCancelAndDetachGrace(t *testing.T) {
	sock := shortSocket(t)
	clk := clocktesting.NewFakeClock(time.Now())
	g := &gated{gate: make(chan struct{})}
	serve(t, sock, "", framework.NewHandler(g.fn, framework.WithClock(clk), framework.WithDetachGrace(time.Minute)))
	c := frameworkclient.NewClient(sock, "", "")

	done := make(chan framework.Response, 1)
	go func() {
		r, _ := c.Invoke(context.Background(), framework.Request{InvocationID: "c", Attempt: 1})
		done <- r
	}()
	require.Eventually(t, func() bool { return g.calls.Load() == 1 }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, c.Cancel(context.Background(), framework.Request{InvocationID: "c", Attempt: 1}))
	assert.Equal(t, 500, (<-done).StatusCode, "the cancelled call's outcome")
	assert.EqualValues(t, 1, g.cancelled.Load())

	ctx, hangUp := context.WithCancel(context.Background())
	go func() { _, _ = c.Invoke(ctx, framework.Request{InvocationID: "d", Attempt: 1}) }()
	require.Eventually(t, func() bool { return g.calls.Load() == 2 }, 5*time.Second, 5*time.Millisecond)
	hangUp()
	require.Eventually(t, func() bool {
		clk.Step(time.Minute) // a grace at a time, once the hang-up is seen
		return g.cancelled.Load() == 2
	}, 5*time.Second, 5*time.Millisecond, "cancelled after the grace")
}

// TestStreamHandlerIsPlain: a streaming handler does not offer the
// idempotent invoke (a stream cannot be replayed to a re-attaching sidecar).
func TestStreamHandlerIsPlain(t *testing.T) {
	sock := shortSocket(t)
	serve(t, sock, "", framework.NewStreamHandler(func(context.Context, framework.Request, framework.ChunkWriter) error { return nil }))
	caps, err := frameworkclient.NewClient(sock, "", "").Probe(context.Background())
	require.NoError(t, err)
	assert.False(t, caps.IdempotentInvoke)
}
