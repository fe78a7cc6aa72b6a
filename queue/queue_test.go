package queue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/runplane/runplane/api/serverless/v1"
	"github.com/runplane/runplane/internal/callerauth/callerauthtest"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/ingress"
	"github.com/runplane/runplane/sidecar/sidecartest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRequestValidation(t *testing.T) {
	e := newEnv(t, func(c *queue.Config) { c.MaxBodyBytes = 1024 })
	// An ID owned by another pool makes a re-post a conflict.
	r := e.do("POST", "/v1/namespaces/default/pools/other/invocations", map[string]any{"mode": "async", "invocationID": "taken"})
	require.EqualValues(t, 202, r.code, "setup: %d %s", r.code, r.raw)
	tests := []struct {
		name, method, path string
		body               any
		code               int
		errContains        string
	}{
		{"bad json", "POST", "/v1/namespaces/default/pools/echo/invocations", "{", 400, "invalid JSON"},
		{"missing mode", "POST", "/v1/namespaces/default/pools/echo/invocations", map[string]any{}, 400, "mode is required"},
		{"bad mode", "POST", "/v1/namespaces/default/pools/echo/invocations", map[string]any{"mode": "later"}, 400, "must be sync or async"},
		{"unknown field", "POST", "/v1/namespaces/default/pools/echo/invocations", map[string]any{"mode": "async", "bogus": 1}, 400, "bogus"},
		{"bad id", "POST", "/v1/namespaces/default/pools/echo/invocations", map[string]any{"mode": "async", "invocationID": "a b"}, 400, "invocationID"},
		{"negative timeout", "POST", "/v1/namespaces/default/pools/echo/invocations", map[string]any{"mode": "async", "timeoutSeconds": -1}, 400, "timeoutSeconds"},
		{"negative ttl", "POST", "/v1/namespaces/default/pools/echo/invocations", map[string]any{"mode": "async", "ttlSeconds": -1}, 400, "ttlSeconds"},
		{"bad pool token", "POST", "/v1/namespaces/default/pools/a.b/invocations", map[string]any{"mode": "async"}, 400, "pool"},
		{"unknown pool", "POST", "/v1/namespaces/default/pools/nope/invocations", map[string]any{"mode": "async"}, 404, "unknown pool"},
		{"too large", "POST", "/v1/namespaces/default/pools/echo/invocations", map[string]any{"mode": "async", "payload": strings.Repeat("x", 2000)}, 413, "exceeds"},
		{"alias without namespace", "POST", "/api/v1/serverless/invocations", map[string]any{"mode": "async", "serverlessRequestID": "echo"}, 400, "field namespace is required"},
		{"alias without pool", "POST", "/api/v1/serverless/invocations", map[string]any{"mode": "async", "namespace": "default"}, 400, "serverlessRequestID"},
		{"alias unknown pool", "POST", "/api/v1/serverless/invocations", map[string]any{"mode": "async", "namespace": "default", "serverlessRequestID": "nope"}, 404, "unknown pool"},
		{"alias pool of another namespace", "POST", "/api/v1/serverless/invocations", map[string]any{"mode": "async", "namespace": "team-b", "serverlessRequestID": "echo"}, 404, "unknown pool"},
		{"pool of another namespace", "POST", "/v1/namespaces/team-b/pools/echo/invocations", map[string]any{"mode": "async"}, 404, "unknown pool"},
		{"body namespace differs", "POST", "/v1/namespaces/default/pools/echo/invocations", map[string]any{"mode": "async", "namespace": "team-b"}, 400, "field namespace"},
		{"bad namespace token", "POST", "/v1/namespaces/a*b/pools/echo/invocations", map[string]any{"mode": "async"}, 400, "namespace"},
		{"bad id on get", "GET", "/v1/namespaces/default/invocations/a*b", nil, 400, "invocation ID"},
		{"bad id on cancel", "POST", "/v1/namespaces/default/invocations/%3E/cancel", nil, 400, "invocation ID"},
		{"old invoke route", "POST", "/v1/pools/echo/invocations", map[string]any{"mode": "async"}, 404, "/v1/namespaces/{namespace}/pools/{pool}"},
		{"old get route", "GET", "/v1/invocations/taken", nil, 404, "/v1/namespaces/{namespace}/invocations/{id}"},
		{"id of another pool", "POST", "/v1/namespaces/default/pools/echo/invocations", map[string]any{"mode": "async", "invocationID": "taken"}, 409, "cannot be used in namespace"},
		{"unknown invocation", "GET", "/v1/namespaces/default/invocations/missing", nil, 404, "not found"},
		{"invocation of another namespace", "GET", "/v1/namespaces/team-b/invocations/taken", nil, 404, "not found"},
		{"cancel in another namespace", "POST", "/v1/namespaces/team-b/invocations/taken/cancel", nil, 404, "not found"},
		{"cancel unknown", "POST", "/v1/namespaces/default/invocations/missing/cancel", nil, 404, "not found"},
		{"unknown pool info", "GET", "/v1/namespaces/default/pools/nope", nil, 404, "unknown pool"},
		{"unknown route", "GET", "/nothing", nil, 404, "no route"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(tc.method, tc.path, tc.body)
			msg, _ := r.body["error"].(string)
			require.False(t, r.code != tc.code || !strings.Contains(msg, tc.errContains), "got %d %q, want %d containing %q", r.code, msg, tc.code, tc.errContains)
		})
	}
}

func TestServiceEndpoints(t *testing.T) {
	e := newEnv(t, nil)
	for _, p := range []string{"/healthz", "/readyz", "/v1/namespaces/default/pools/echo"} {
		r := e.do("GET", p, nil)
		assert.EqualValues(t, 200, r.code, "GET %s: %d %s", p, r.code, r.raw)
	}
	r := e.do("GET", "/openapi.json", nil)
	paths, _ := r.body["paths"].(map[string]any)
	for _, p := range []string{"/v1/namespaces/{namespace}/pools/{pool}/invocations", "/v1/namespaces/{namespace}/invocations/{id}", "/v1/namespaces/{namespace}/invocations/{id}/cancel", "/v1/namespaces/{namespace}/pools/{pool}", "/api/v1/serverless/invocations"} {
		assert.Contains(t, paths, p, "openapi.json")
	}
	e.invoke(map[string]any{"mode": "async"})
	req, _ := e.do("GET", "/healthz", nil), 0
	_ = req
	mr, err := e.metrics()
	assert.False(t, err != nil || !strings.Contains(mr, "runplane_ingress_invocations_total"), "metrics lack ingress counters: %v", err)
}

// TestAsyncLifecycle follows one invocation through queued, dispatched,
// running and succeeded, and checks the ack.
func TestAsyncLifecycle(t *testing.T) {
	e := newEnv(t, nil)
	states := e.watchStates("inv-1")
	r := e.invoke(map[string]any{"mode": "async", "invocationID": "inv-1", "payload": map[string]string{"prompt": "robot"}})
	require.EqualValues(t, 202, r.code, "async: %d %s", r.code, r.raw)
	var ack v1.Ack
	require.NoError(t, json.Unmarshal(r.raw, &ack))
	require.Equal(t, "inv-1", ack.InvocationID)
	require.False(t, ack.Duplicate || ack.AcceptedAt.IsZero(), "bad ack %s", r.raw)
	rec := e.record("inv-1")
	require.Equal(t, messages.StateQueued, rec.State, "without workers: state %s, want queued", rec.State)
	g := newGate()
	e.worker("w1", 1, g.handler)
	g.next(t)
	rec = e.waitState("inv-1", messages.StateRunning, 5*time.Second)
	require.False(t, rec.Worker != "w1" || rec.Attempt != 1, "running record %+v", rec)
	close(g.release)
	rec = e.waitState("inv-1", messages.StateSucceeded, 5*time.Second)
	require.NotNil(t, rec.Response)
	require.JSONEq(t, `{"prompt":"robot"}`, string(rec.Response.Body))
	got := states()
	want := []messages.State{messages.StateQueued, messages.StateDispatched, messages.StateRunning, messages.StateSucceeded}
	require.True(t, slices.Equal(got, want), "transitions %v, want %v", got, want)
}

// TestSyncRoundTripAndAlias: both routes run a sync invocation; the seed
// alias takes its pool from the body or, for a body over
// ingress.DefaultAliasBodyBytes (read before the caller is authorized),
// from the query only.
func TestSyncRoundTripAndAlias(t *testing.T) {
	e := newEnv(t, nil)
	e.worker("w1", 4, nil)
	big := strings.Repeat("x", ingress.DefaultAliasBodyBytes)
	tests := []struct {
		name, path string
		body       map[string]any
		code       int
		want       string // the response body's payload, or a word of the problem
	}{
		{"v1", "/v1/namespaces/default/pools/echo/invocations", map[string]any{"mode": "sync", "payload": map[string]int{"n": 1}}, 200, `{"n":1}`},
		{"seed alias", "/api/v1/serverless/invocations", map[string]any{"mode": "sync", "namespace": "default", "serverlessRequestID": "echo", "payload": map[string]int{"n": 1}}, 200, `{"n":1}`},
		{"seed alias, pool in the query, big body", "/api/v1/serverless/invocations?namespace=default&serverlessRequestID=echo",
			map[string]any{"mode": "sync", "payload": map[string]string{"s": big}}, 200, `{"s":"` + big + `"}`},
		{"seed alias, pool in the body, big body", "/api/v1/serverless/invocations",
			map[string]any{"mode": "sync", "namespace": "default", "serverlessRequestID": "echo", "payload": map[string]string{"s": big}}, 413, "in the query"},
		{"seed alias, query and body disagree", "/api/v1/serverless/invocations?namespace=default&serverlessRequestID=echo",
			map[string]any{"mode": "sync", "namespace": "default", "serverlessRequestID": "other"}, 400, "differs from the pool"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("POST", tc.path, tc.body)
			require.Equal(t, tc.code, r.code, "%s", r.raw)
			if tc.code != 200 {
				assert.Contains(t, r.body["detail"], tc.want)
				return
			}
			var rec messages.Record
			_ = json.Unmarshal(r.raw, &rec)
			require.Equal(t, messages.StateSucceeded, rec.State)
			require.JSONEq(t, tc.want, string(rec.Response.Body))
		})
	}
}

// TestIdempotency: a re-posted ID never runs twice — within the duplicate
// window, after it, and for concurrent sync callers waiting on one result.
func TestIdempotency(t *testing.T) {
	e := newEnv(t, nil)
	g := newGate()
	e.worker("w1", 2, g.handler)

	// Concurrent sync callers with one ID share one execution.
	var wg sync.WaitGroup
	bodies := make([]string, 3)
	for i := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := e.invoke(map[string]any{"mode": "sync", "invocationID": "same", "payload": "p", "timeoutSeconds": 10})
			bodies[i] = fmt.Sprintf("%d %v", r.code, r.body["state"])
		}()
	}
	g.next(t)
	// Barrier: the other two callers are duplicates waiting on the result.
	require.Eventually(t, func() bool {
		m, err := e.metrics()
		return err == nil && strings.Contains(m, `runplane_ingress_duplicates_total{namespace="default",pool="echo"} 2`)
	}, 15*time.Second, 10*time.Millisecond, "both duplicate sync callers waiting")
	close(g.release)
	wg.Wait()
	// The sync answer may come from the reply fast path before the Record
	// is final; re-posts below read the Record.
	e.waitState("same", messages.StateSucceeded, 5*time.Second)
	for _, b := range bodies {
		require.Equal(t, "200 succeeded", b, "sync duplicates: %v", bodies)
	}
	// Re-post within and after the (1s) duplicate window.
	for _, wait := range []time.Duration{0, 1500 * time.Millisecond} {
		time.Sleep(wait)
		r := e.invoke(map[string]any{"mode": "async", "invocationID": "same", "payload": "p"})
		require.False(t, r.code != 202 || r.body["duplicate"] != true || r.body["state"] != "succeeded", "re-post after %s: %d %s", wait, r.code, r.raw)
		r = e.invoke(map[string]any{"mode": "sync", "invocationID": "same", "payload": "p"})
		require.False(t, r.code != 200 || r.body["state"] != "succeeded", "sync re-post after %s: %d %s", wait, r.code, r.raw)
	}
	e.quiet("w1")
	runs := e.log.Runs("same")
	require.False(t, len(runs) != 1, "ran %d times: %v", len(runs), runs)
}

func TestSyncTimeoutIsPollable(t *testing.T) {
	e := newEnv(t, nil)
	start := time.Now()
	r := e.invoke(map[string]any{"mode": "sync", "invocationID": "slow", "timeoutSeconds": 1})
	require.False(t, r.code != 504 || r.body["invocationID"] != "slow" || time.Since(start) < time.Second, "want 504 after 1s with the ID, got %d %s after %s", r.code, r.raw, time.Since(start))
	e.waitState("slow", messages.StateQueued, time.Second)
	e.worker("w1", 1, nil)
	e.waitState("slow", messages.StateSucceeded, 5*time.Second)
}

func TestCancel(t *testing.T) {
	e := newEnv(t, nil)
	// Queued: cancelled at once, never runs.
	e.invoke(map[string]any{"mode": "async", "invocationID": "q1"})
	r := e.do("POST", "/v1/namespaces/default/invocations/q1/cancel", nil)
	require.False(t, r.code != 200 || r.body["state"] != "cancelled", "cancel queued: %d %s", r.code, r.raw)
	g := newGate()
	e.worker("w1", 1, g.handler)
	// Running: the worker gets a Cancel.
	e.invoke(map[string]any{"mode": "async", "invocationID": "r1"})
	id := g.next(t)
	require.Equal(t, "r1", id, "worker started %s, want r1 (q1 was cancelled)", id)
	e.waitState("r1", messages.StateRunning, 5*time.Second)
	r = e.do("POST", "/v1/namespaces/default/invocations/r1/cancel", nil)
	require.False(t, r.code != 200 || r.body["state"] != "cancelled", "cancel running: %d %s", r.code, r.raw)
	select {
	case id := <-g.cancelled:
		require.Equal(t, "r1", id, "cancelled %s", id)
	case <-time.After(5 * time.Second):
		require.FailNow(t, "worker never got the cancel")
	}
	r = e.do("POST", "/v1/namespaces/default/invocations/r1/cancel", nil)
	require.EqualValues(t, 409, r.code, "cancel terminal: %d %s", r.code, r.raw)
	require.False(t, e.record("r1").State != messages.StateCancelled || len(e.log.Runs("q1")) != 0, "r1 %s, q1 runs %v", e.record("r1").State, e.log.Runs("q1"))
}

func TestTimeouts(t *testing.T) {
	e := newEnv(t, nil)
	// ttlSeconds: time allowed in the queue, no worker ever comes.
	e.invoke(map[string]any{"mode": "async", "invocationID": "ttl", "ttlSeconds": 1})
	rec := e.waitState("ttl", messages.StateTimedOut, 5*time.Second)
	require.True(t, strings.Contains(rec.Error, "ttlSeconds"), "ttl error %q", rec.Error)
	// timeoutSeconds: execution time, enforced by the worker.
	e.worker("w1", 1, sidecartest.Sleep(10*time.Second))
	e.invoke(map[string]any{"mode": "async", "invocationID": "exec", "timeoutSeconds": 1, "ttlSeconds": 60})
	e.waitState("exec", messages.StateTimedOut, 5*time.Second)
}

func TestBacklogBound(t *testing.T) {
	e := newEnv(t, func(c *queue.Config) { c.Limits.PoolMaxBacklog = 2 })
	for i := range 2 {
		r := e.invoke(map[string]any{"mode": "async"})
		require.EqualValues(t, 202, r.code, "%d: %d", i, r.code)
	}
	r := e.invoke(map[string]any{"mode": "async"})
	require.False(t, r.code != 429 || r.header.Get("Retry-After") == "", "want 429 with Retry-After, got %d %v", r.code, r.header)
	// Draining the backlog admits work again.
	e.worker("w1", 4, nil)
	require.Eventually(t, func() bool { return e.invoke(map[string]any{"mode": "async"}).code == 202 }, 5*time.Second, 100*time.Millisecond,
		"backlog never drained")
}

// TestWorkerLossRedelivery: a worker that vanishes mid-invocation has its
// invocation redelivered to another worker once the hold for silent workers
// is over; after MaxAttempts losses it is dead-lettered.
func TestWorkerLossRedelivery(t *testing.T) {
	e := newEnv(t, func(c *queue.Config) { c.MaxAttempts, c.SilentHold.Duration = 2, 500*time.Millisecond })
	g := newGate()
	a := e.worker("a", 1, g.handler)
	e.invoke(map[string]any{"mode": "async", "invocationID": "x", "ttlSeconds": 60})
	g.next(t)
	require.NoError(t, a.Kill())
	close(g.release)
	e.worker("b", 1, nil)
	rec := e.waitState("x", messages.StateSucceeded, 10*time.Second)
	require.Equal(t, "b", rec.Worker)
	require.Equal(t, 2, rec.Attempt)
	require.Equal(t, []string{"a", "b"}, e.log.Runs("x"))

	// Dead letter: two workers lost in a row (MaxAttempts 2).
	require.NoError(t, e.workers["b"].Stop())
	g2 := newGate()
	c := e.worker("c", 1, g2.handler)
	e.invoke(map[string]any{"mode": "async", "invocationID": "y", "ttlSeconds": 60})
	g2.next(t)
	require.NoError(t, c.Kill())
	d := e.worker("d", 1, g2.handler)
	g2.next(t)
	require.NoError(t, d.Kill())
	rec = e.waitState("y", messages.StateDeadLettered, 10*time.Second)
	require.False(t, rec.Attempt != 2 || !strings.Contains(rec.Error, "lost"), "dead-letter record %+v", rec)
	st, _ := e.js.Stream(context.Background(), e.cfg.Stream.WithDefaults().Stream)
	m, err := st.GetLastMsgForSubject(context.Background(), e.subj.DeadLetter("default", testPool))
	require.False(t, err != nil || !strings.Contains(string(m.Data), `"invocationID":"y"`), "no dead letter for y: %v", err)
}

// TestNATSRestart: the service rides through a NATS restart; invocations
// accepted before it complete, new ones work after it.
func TestNATSRestart(t *testing.T) {
	e := newEnv(t, nil)
	e.worker("w1", 2, nil)
	r := e.invoke(map[string]any{"mode": "sync", "invocationID": "before"})
	require.EqualValues(t, 200, r.code, "before restart: %d %s", r.code, r.raw)
	require.NoError(t, e.workers["w1"].Stop())
	e.invoke(map[string]any{"mode": "async", "invocationID": "queued-during", "ttlSeconds": 120})
	e.ns.Shutdown()
	e.ns.WaitForShutdown()
	time.Sleep(300 * time.Millisecond)
	e.ns = startNATS(t, e.storeDir, e.port)
	t.Cleanup(func() { e.ns.Shutdown() })
	e.worker("w2", 2, nil)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		r := e.invoke(map[string]any{"mode": "sync", "invocationID": "after", "timeoutSeconds": 3})
		assert.EqualValues(c, 200, r.code, "after restart: %s", r.raw)
		assert.Equal(c, "succeeded", r.body["state"])
	}, 20*time.Second, 200*time.Millisecond)
	e.waitState("queued-during", messages.StateSucceeded, 10*time.Second)
}

// TestIngressServesNoMetrics: the ingress port, which every tenant calls,
// answers /metrics with 404; the metrics are on their own listener (issue
// #30: the ingress served every namespace's and pool's series to anyone).
func TestIngressServesNoMetrics(t *testing.T) {
	e := newEnv(t, nil)
	r := e.do("GET", "/metrics", nil)
	assert.Equal(t, http.StatusNotFound, r.code)
	assert.NotContains(t, string(r.raw), "runplane_")
	m, err := e.metrics()
	require.NoError(t, err)
	assert.Contains(t, m, "runplane_build_info")
}

// TestMetricsNeedKubernetes: without a Kubernetes config nothing can
// authenticate a scraper, so metrics are refused unless the queue runs
// insecure on purpose.
func TestMetricsNeedKubernetes(t *testing.T) {
	ns := startNATS(t, t.TempDir(), -1)
	t.Cleanup(ns.Shutdown)
	err := queue.Run(t.Context(), queue.Config{NATS: queue.NATS{URL: ns.ClientURL()}, Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0",
		StaticPools: []string{testPool}, CallerAuthorizer: callerauthtest.Static{}, Logger: slog.New(slog.DiscardHandler)})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Kubernetes config")
}
