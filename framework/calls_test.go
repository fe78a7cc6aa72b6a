package framework

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"
)

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
