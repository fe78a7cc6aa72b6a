package queue_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/poolpolicy"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/pool"
)

// flaky fails the first fails[id] runs of invocation id (500 with an
// error), then echoes; it counts every run.
type flaky struct {
	mu    sync.Mutex
	fails map[string]int
	runs  map[string]int
}

func (f *flaky) handler(_ context.Context, d framework.Request) (framework.Response, error) {
	f.mu.Lock()
	f.runs[d.InvocationID]++
	n := f.runs[d.InvocationID]
	f.mu.Unlock()
	if n <= f.fails[d.InvocationID] {
		msg := fmt.Sprintf("boom %d", n)
		return framework.Response{StatusCode: 500, Error: msg}, nil
	}
	return framework.Response{StatusCode: 200, Body: d.Payload}, nil
}

func (f *flaky) count(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs[id]
}

func retryEnv(t *testing.T, r poolpolicy.Retry) *env {
	return newEnv(t, func(c *queue.Config) {
		p := pool.DefaultPolicy()
		p.Retry = r
		c.StaticPolicies = map[string]pool.Policy{pool.StaticKey("default", testPool): p}
	})
}

// TestRetryPolicy: a pool with runplane.io/max-retries runs a failed
// execution again after the backoff, as a new attempt, until it succeeds or
// the retries are exhausted (then dead_lettered, saying so); every attempt's
// outcome is in the Record. Without a policy a failure is final at once.
func TestRetryPolicy(t *testing.T) {
	f := &flaky{fails: map[string]int{"once": 1, "always": 100, "never": 0}, runs: map[string]int{}}
	e := retryEnv(t, poolpolicy.Retry{MaxRetries: 2, On: []string{"error"}, Backoff: 100 * time.Millisecond})
	e.worker("w1", 2, f.handler)

	// Sync: the caller gets the retried attempt's success, not the first
	// attempt's failure.
	r := e.invoke(map[string]any{"mode": "sync", "invocationID": "once", "timeoutSeconds": 20, "payload": map[string]any{"x": 1}})
	require.Equal(t, 200, r.code, "%s", r.raw)
	require.Equal(t, "succeeded", r.body["state"], "%s", r.raw)
	rec := e.record("once")
	require.Equal(t, messages.StateSucceeded, rec.State)
	require.Equal(t, 2, rec.Attempt)
	require.Equal(t, 1, rec.Retries)
	require.Len(t, rec.Attempts, 2, "%+v", rec.Attempts)
	require.Equal(t, messages.StateFailed, rec.Attempts[0].State)
	require.Equal(t, 500, rec.Attempts[0].StatusCode)
	require.Equal(t, "boom 1", rec.Attempts[0].Error)
	require.NotNil(t, rec.Attempts[0].RetryAt)
	require.False(t, rec.Attempts[0].RetryAt.Before(rec.Attempts[0].FinishedAt.Add(90*time.Millisecond)), "the retry waits for the backoff")
	require.Equal(t, messages.StateSucceeded, rec.Attempts[1].State)
	require.Nil(t, rec.Attempts[1].RetryAt)

	// Always failing: 1 + max-retries runs, then dead-lettered with the reason.
	r = e.invoke(map[string]any{"mode": "async", "invocationID": "always", "payload": map[string]any{}})
	require.Equal(t, 202, r.code, "%s", r.raw)
	rec = e.waitState("always", messages.StateDeadLettered, 20*time.Second)
	require.Contains(t, rec.Error, "retries exhausted: 3 attempts failed")
	require.Contains(t, rec.Error, "runplane.io/max-retries=2")
	require.Equal(t, 2, rec.Retries)
	require.Len(t, rec.Attempts, 3)
	for i, o := range rec.Attempts {
		require.Equal(t, i+1, o.Attempt)
		require.Equal(t, messages.StateFailed, o.State)
		require.Equal(t, i < 2, o.RetryAt != nil, "attempt %d", o.Attempt)
	}
	require.NotNil(t, rec.Response, "the last response is kept")

	// A success is not retried.
	r = e.invoke(map[string]any{"mode": "sync", "invocationID": "never", "timeoutSeconds": 20, "payload": map[string]any{}})
	require.Equal(t, 200, r.code, "%s", r.raw)
	e.quiet("w1")
	require.Equal(t, 2, f.count("once"))
	require.Equal(t, 3, f.count("always"))
	require.Equal(t, 1, f.count("never"))
	require.Len(t, e.record("never").Attempts, 1)
}

// TestNoRetryByDefault: without a retry policy a failed execution ends
// failed after one run, and the Record lists no attempts (today's
// behaviour: nothing runs twice unless asked).
func TestNoRetryByDefault(t *testing.T) {
	f := &flaky{fails: map[string]int{"fail": 100}, runs: map[string]int{}}
	e := newEnv(t, nil)
	e.worker("w1", 1, f.handler)
	r := e.invoke(map[string]any{"mode": "sync", "invocationID": "fail", "timeoutSeconds": 20, "payload": map[string]any{}})
	require.Equal(t, 200, r.code, "%s", r.raw)
	require.Equal(t, "failed", r.body["state"], "%s", r.raw)
	e.quiet("w1")
	rec := e.record("fail")
	require.Equal(t, messages.StateFailed, rec.State)
	require.Empty(t, rec.Attempts)
	require.Zero(t, rec.Retries)
	require.Equal(t, 1, f.count("fail"))
}

// TestRetryOnStatusCode: retry-on with a status code retries a response
// the framework answered without an error, and not another code.
func TestRetryOnStatusCode(t *testing.T) {
	var mu sync.Mutex
	runs := map[string]int{}
	h := func(_ context.Context, d framework.Request) (framework.Response, error) {
		mu.Lock()
		runs[d.InvocationID]++
		n := runs[d.InvocationID]
		mu.Unlock()
		code := 200
		switch {
		case d.InvocationID == "busy" && n == 1:
			code = 503
		case d.InvocationID == "missing":
			code = 404
		}
		return framework.Response{StatusCode: code}, nil
	}
	e := retryEnv(t, poolpolicy.Retry{MaxRetries: 1, On: []string{"503"}, Backoff: 100 * time.Millisecond})
	e.worker("w1", 1, h)
	for _, id := range []string{"busy", "missing"} {
		r := e.invoke(map[string]any{"mode": "sync", "invocationID": id, "timeoutSeconds": 20, "payload": map[string]any{}})
		require.Equal(t, 200, r.code, "%s", r.raw)
	}
	e.quiet("w1")
	busy, missing := e.record("busy"), e.record("missing")
	require.Equal(t, 200, busy.Response.StatusCode)
	require.Equal(t, []int{503, 200}, []int{busy.Attempts[0].StatusCode, busy.Attempts[1].StatusCode})
	require.Equal(t, 404, missing.Response.StatusCode)
	require.Len(t, missing.Attempts, 1)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]int{"busy": 2, "missing": 1}, runs)
}

// TestPoolTimeoutSeconds: a pool's runplane.io/timeout-seconds bounds an
// invocation's timeoutSeconds (its workers' grace period is sized for it)
// and is the default when it is lower than the ingress's.
func TestPoolTimeoutSeconds(t *testing.T) {
	e := newEnv(t, func(c *queue.Config) {
		p := pool.DefaultPolicy()
		p.TimeoutSeconds = 60
		c.StaticPolicies = map[string]pool.Policy{pool.StaticKey("default", testPool): p}
	})
	r := e.invoke(map[string]any{"mode": "async", "invocationID": "long", "timeoutSeconds": 61, "payload": map[string]any{}})
	require.Equal(t, 400, r.code, "%s", r.raw)
	require.Contains(t, r.body["error"], "above the pool's runplane.io/timeout-seconds=60")
	got := make(chan framework.Request, 1)
	e.worker("w1", 1, func(ctx context.Context, d framework.Request) (framework.Response, error) {
		got <- d
		return framework.Response{StatusCode: 200}, nil
	})
	r = e.invoke(map[string]any{"mode": "sync", "invocationID": "dflt", "payload": map[string]any{}})
	require.Equal(t, 200, r.code, "%s", r.raw)
	require.Equal(t, 60, (<-got).TimeoutSeconds, "the pool's timeout is the default")
}
