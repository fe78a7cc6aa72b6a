package framework

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"
)

// gated is a handler that counts its calls and waits for gate (or its
// context) before echoing; cancelled counts the calls whose context ended.
type gated struct {
	calls, cancelled atomic.Int32
	gate             chan struct{}
}

func (g *gated) fn(ctx context.Context, r Request) (Response, error) {
	g.calls.Add(1)
	select {
	case <-g.gate:
		return Response{Body: json.RawMessage(`"` + r.InvocationID + `"`)}, nil
	case <-ctx.Done():
		g.cancelled.Add(1)
		return Response{}, ctx.Err()
	}
}

// TestIdempotentInvoke: a call (invocation ID, attempt) runs once however
// often it is posted; a caller that hangs up leaves it running, and a
// re-attach collects its outcome; a re-attach never starts an unknown call.
func TestIdempotentInvoke(t *testing.T) {
	sock := shortSocket(t)
	clk := clocktesting.NewFakeClock(time.Now())
	g := &gated{gate: make(chan struct{})}
	serve(t, sock, "", NewHandler(g.fn, WithClock(clk)))
	c := NewClient(sock, "", "")
	caps, err := c.Probe(context.Background())
	require.NoError(t, err)
	assert.True(t, caps.IdempotentInvoke, "the Go helper advertises the idempotent invoke")

	req := Request{InvocationID: "i1", Attempt: 1}
	// The first caller dies mid-call (its context ends: the connection closes).
	ctx, hangUp := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() { _, err := c.Invoke(ctx, req); first <- err }()
	require.Eventually(t, func() bool { return g.calls.Load() == 1 }, 5*time.Second, 5*time.Millisecond)
	hangUp()
	require.Error(t, <-first)

	// A repeat and a re-attach wait for the same call.
	got := make(chan Response, 2)
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

	_, err = c.Attach(context.Background(), Request{InvocationID: "i1", Attempt: 2})
	require.ErrorIs(t, err, ErrUnknownCall, "another attempt is another call, and attach never starts one")
	assert.EqualValues(t, 1, g.calls.Load(), "handler calls")
}

// TestIdempotentCancelAndDetachGrace: an explicit cancel ends a call; a
// call nobody waits for is cancelled once the detach grace is over.
func TestIdempotentCancelAndDetachGrace(t *testing.T) {
	sock := shortSocket(t)
	clk := clocktesting.NewFakeClock(time.Now())
	g := &gated{gate: make(chan struct{})}
	serve(t, sock, "", NewHandler(g.fn, WithClock(clk), WithDetachGrace(time.Minute)))
	c := NewClient(sock, "", "")

	done := make(chan Response, 1)
	go func() { r, _ := c.Invoke(context.Background(), Request{InvocationID: "c", Attempt: 1}); done <- r }()
	require.Eventually(t, func() bool { return g.calls.Load() == 1 }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, c.Cancel(context.Background(), Request{InvocationID: "c", Attempt: 1}))
	assert.Equal(t, 500, (<-done).StatusCode, "the cancelled call's outcome")
	assert.EqualValues(t, 1, g.cancelled.Load())

	ctx, hangUp := context.WithCancel(context.Background())
	go func() { _, _ = c.Invoke(ctx, Request{InvocationID: "d", Attempt: 1}) }()
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
	serve(t, sock, "", NewStreamHandler(func(context.Context, Request, ChunkWriter) error { return nil }))
	caps, err := NewClient(sock, "", "").Probe(context.Background())
	require.NoError(t, err)
	assert.False(t, caps.IdempotentInvoke)
}

// TestRecentOutcomesBounded: outcomes are dropped past keep or keepFor, and
// remembering one sets no timer (a timer per call held its response for
// keepFor whatever keep said: rate × 10 min of response bodies).
func TestRecentOutcomesBounded(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	cs := newCalls(handlerOptions{clock: clk, recent: 2, recentFor: 10 * time.Minute})
	finish := func(id string) {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		cs.m[callKey{id, 1}] = &call{done: make(chan struct{})}
		cs.remember(callKey{id, 1})
	}
	known := func(id string) bool {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		_, ok := cs.m[callKey{id, 1}]
		return ok
	}
	for _, id := range []string{"a", "b", "c"} {
		finish(id)
	}
	assert.False(t, known("a"), "beyond keep")
	assert.True(t, known("b"))
	assert.False(t, clk.HasWaiters(), "no timer holds a finished call")

	clk.Step(10 * time.Minute)
	finish("d")
	assert.False(t, known("b"), "past keepFor")
	assert.False(t, known("c"), "past keepFor")
	assert.True(t, known("d"))
	assert.Len(t, cs.finished, 1)
}

// TestCancelBeforeInvoke: the sidecar's cancel can overtake its invoke
// (two connections); the call then starts cancelled instead of running
// detached for the grace.
func TestCancelBeforeInvoke(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	cs := newCalls(handlerOptions{clock: clk, detachGrace: time.Minute, recent: 4, recentFor: time.Minute})
	k := callKey{"early", 1}
	require.False(t, cs.cancel(k), "not known yet")
	ran := make(chan error, 1)
	c := cs.start(context.Background(), k, true, func(ctx context.Context) Response {
		ran <- ctx.Err()
		return Response{}
	})
	require.NotNil(t, c)
	require.ErrorIs(t, <-ran, context.Canceled, "the call starts cancelled")
	<-c.done
	cs.release(c)

	other := cs.start(context.Background(), callKey{"later", 1}, true, func(ctx context.Context) Response {
		ran <- ctx.Err()
		return Response{}
	})
	require.NoError(t, <-ran, "a cancel holds only its own call")
	<-other.done
	cs.release(other)
}
