package queue_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/stream"
)

// orphanRecord leaves what an ingress killed between its Record create and
// its publish leaves: a queued Record, accepted at acceptedAt, and no
// message in the stream.
func (e *env) orphanRecord(id string, acceptedAt time.Time, hash string) {
	e.t.Helper()
	ctx := context.Background()
	st, err := stream.Open(ctx, e.js, e.cfg.Stream)
	require.NoError(e.t, err)
	_, err = st.Create(ctx, messages.Record{InvocationID: id, Namespace: "default", Pool: testPool, Mode: messages.ModeAsync,
		State: messages.StateQueued, Stream: st.Config.Stream, RequestHash: hash, AcceptedAt: acceptedAt, UpdatedAt: acceptedAt})
	require.NoError(e.t, err)
}

// TestRetryOfCutOffAcceptRuns: the caller of a cut-off accept retries at
// once (within seconds of the Record). The retry is answered 202 queued
// only with the invocation stored: it runs, once.
func TestRetryOfCutOffAcceptRuns(t *testing.T) {
	e := newEnv(t, nil)
	e.worker("a", 1, nil)
	const id = "cut-off"
	// The cut-off ingress wrote the request's hash: the same request under
	// another ID shows it (the hash leaves the ID out).
	probe := e.invoke(map[string]any{"mode": "async", "invocationID": "probe", "ttlSeconds": 60})
	require.EqualValues(t, 202, probe.code, "%d %s", probe.code, probe.raw)
	e.orphanRecord(id, time.Now().UTC(), e.stored("probe").RequestHash)
	r := e.invoke(map[string]any{"mode": "async", "invocationID": id, "ttlSeconds": 60})
	require.EqualValues(t, 202, r.code, "%d %s", r.code, r.raw)
	require.Equal(t, true, r.body["duplicate"], "%s", r.raw)
	e.waitState(id, messages.StateSucceeded, 10*time.Second)
	e.quiet("a")
	require.Equal(t, []string{"a"}, e.log.Runs(id))
}

// TestRebuildRemovesOrphanRecord: a queued Record whose invocation never
// reached the stream (nobody retried) is removed when the activator
// rebuilds, so its ID is free and a later post of it runs.
func TestRebuildRemovesOrphanRecord(t *testing.T) {
	e := newEnv(t, nil)
	e.stop()
	const id = "orphan"
	e.orphanRecord(id, time.Now().UTC().Add(-time.Minute), "")
	e.startQueue()
	require.Eventually(t, func() bool {
		return e.do("GET", "/v1/namespaces/default/invocations/"+id, nil).code == 404
	}, 10*time.Second, 20*time.Millisecond, "the orphan Record is removed")
	e.worker("a", 1, nil)
	r := e.invoke(map[string]any{"mode": "async", "invocationID": id, "ttlSeconds": 60})
	require.EqualValues(t, 202, r.code, "%d %s", r.code, r.raw)
	require.Equal(t, false, r.body["duplicate"], "%s", r.raw)
	e.waitState(id, messages.StateSucceeded, 10*time.Second)
	require.Equal(t, []string{"a"}, e.log.Runs(id))
}

// TestSyncBodyEqualsGet: the 200 of a sync invocation (answered from the
// worker's fast-path reply) shows what GET shows of the Record once the
// activator has written it (the fast path may answer a few milliseconds
// before that write; queue/README.md).
func TestSyncBodyEqualsGet(t *testing.T) {
	e := newEnv(t, nil)
	e.worker("a", 1, nil)
	r := e.invoke(map[string]any{"mode": "sync", "invocationID": "same-body", "payload": map[string]any{"x": 1}})
	require.EqualValues(t, 200, r.code, "%d %s", r.code, r.raw)
	e.waitState("same-body", messages.StateSucceeded, 10*time.Second)
	g := e.do("GET", "/v1/namespaces/default/invocations/same-body", nil)
	require.EqualValues(t, 200, g.code)
	for _, k := range []string{"invocationID", "namespace", "pool", "mode", "state", "worker", "attempt", "acceptedAt", "response"} {
		require.NotNil(t, g.body[k], "GET has no %s: %s", k, g.raw)
		require.Equal(t, g.body[k], r.body[k], "%s: sync 200 %s, GET %s", k, r.raw, g.raw)
	}
}

// TestFullStoreRefusesNewWorkAndRunsAcceptedOnce: a bounded invocation
// stream refuses new invocations with 503 before it is full, its use is
// in the metrics against its bound, and every invocation it accepted
// still runs, once.
func TestFullStoreRefusesNewWorkAndRunsAcceptedOnce(t *testing.T) {
	e := newEnv(t, func(c *queue.Config) { c.Stream.MaxBytes = 1 << 20 })
	payload := map[string]any{"blob": strings.Repeat("x", 50<<10)}
	var accepted []string
	var refused resp
	for i := range 40 {
		id := fmt.Sprintf("fill-%d", i)
		r := e.invoke(map[string]any{"mode": "async", "invocationID": id, "ttlSeconds": 60, "payload": payload})
		if r.code == 503 {
			refused = r
			break
		}
		require.EqualValues(t, 202, r.code, "%s: %d %s", id, r.code, r.raw)
		accepted = append(accepted, id)
	}
	require.EqualValues(t, 503, refused.code, "no 503 after %d invocations of 50 KiB into a 1 MiB stream", len(accepted))
	require.Contains(t, refused.body["error"], "store is full")
	require.Equal(t, "5", refused.header.Get("Retry-After"))
	require.NotEmpty(t, accepted)
	body, err := e.metrics()
	require.NoError(t, err)
	require.Contains(t, body, `runplane_queue_store_max_bytes{store="invocations"} 1.048576e+06`)
	require.Contains(t, body, `runplane_queue_store_bytes{store="invocations"}`)
	require.Contains(t, body, `runplane_queue_store_bytes{store="records"}`)

	e.worker("a", 4, nil)
	for _, id := range accepted {
		e.waitState(id, messages.StateSucceeded, 20*time.Second)
	}
	e.quiet("a")
	for _, id := range accepted {
		require.Equal(t, []string{"a"}, e.log.Runs(id), "%s runs", id)
	}
}

// TestDispatchPastMaxDeliverIsDeadLettered: a dispatch its worker takes
// and never acks (here: naks at once, every time) is delivered a bounded
// number of times, then dead-lettered with the reason in its Record.
func TestDispatchPastMaxDeliverIsDeadLettered(t *testing.T) {
	e := newEnv(t, func(c *queue.Config) { c.MaxAttempts = 1 })
	ctx := context.Background()
	st, err := stream.Open(ctx, e.js, e.cfg.Stream)
	require.NoError(t, err)
	const w, id = "naker", "never-acked"
	require.NoError(t, st.EnsureWorkerConsumer(ctx, "default", testPool, w))
	cons, err := e.js.Consumer(ctx, st.Config.Stream, messages.ConsumerName("default", testPool, w))
	require.NoError(t, err)
	cc, err := cons.Consume(func(m jetstream.Msg) { _ = m.Nak() })
	require.NoError(t, err)
	t.Cleanup(cc.Stop)
	e.fakeWorker(w)
	r := e.invoke(map[string]any{"mode": "async", "invocationID": id, "ttlSeconds": 60})
	require.EqualValues(t, 202, r.code, "%d %s", r.code, r.raw)
	rec := e.waitState(id, messages.StateDeadLettered, 20*time.Second)
	require.Contains(t, rec.Error, "max deliveries")
	require.Contains(t, rec.Error, w)
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, stream.DefaultWorkerMaxDeliver, info.Delivered.Consumer, "deliveries")
}

// TestNATSOutageLongerThanHeartbeatTimeoutRunsOnce: NATS is away for
// longer than the heartbeat timeout while a worker runs an invocation. The
// activator, which heard no one either, does not declare the worker lost
// when NATS is back, so the invocation is not run a second time elsewhere.
func TestNATSOutageLongerThanHeartbeatTimeoutRunsOnce(t *testing.T) {
	e := newEnv(t, nil) // heartbeat timeout 1s
	g := newGate()
	a := e.worker("a", 1, g.handler)
	r := e.invoke(map[string]any{"mode": "async", "invocationID": "through-outage", "ttlSeconds": 60})
	require.EqualValues(t, 202, r.code, "%d %s", r.code, r.raw)
	require.Equal(t, "through-outage", g.next(t))
	b := e.worker("b", 1, nil) // would take a redelivery at once
	e.ns.Shutdown()
	e.ns.WaitForShutdown()
	time.Sleep(2500 * time.Millisecond) // the outage: 2.5 heartbeat timeouts
	e.ns = startNATS(t, e.storeDir, e.port)
	// The workers end before the restarted NATS does (cleanups run last
	// first): each one's drain on a stopped NATS waited out its flush
	// timeout, 10 s.
	t.Cleanup(func() {
		assert.NoError(t, b.Stop())
		assert.NoError(t, a.Stop())
	})
	back := time.Now()
	// Barrier: the activator has judged the workers for more than a
	// heartbeat timeout since NATS came back; a still holds the invocation.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		s := e.poolStatus()
		assert.True(c, s.UpdatedAt.After(back.Add(1500*time.Millisecond)), "status updated at %s", s.UpdatedAt)
		for _, w := range s.Workers {
			if w.Name == "a" {
				assert.Equal(c, 1, w.InFlight, "a in flight")
			}
		}
	}, 20*time.Second, 50*time.Millisecond)
	close(g.release)
	rec := e.waitState("through-outage", messages.StateSucceeded, 10*time.Second)
	e.quiet("a", "b")
	require.Equal(t, []string{"a"}, e.log.Runs("through-outage"))
	require.Equal(t, 1, rec.Attempt)
}
