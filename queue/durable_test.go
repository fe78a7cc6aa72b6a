package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue/stream"
)

// orphanRecord leaves what an ingress killed between its Record create and
// its publish leaves: a queued Record, accepted at acceptedAt, and no
// message in the stream.
func (e *env) orphanRecord(id string, acceptedAt time.Time) {
	e.t.Helper()
	ctx := context.Background()
	st, err := stream.Open(ctx, e.js, e.cfg.Stream)
	require.NoError(e.t, err)
	_, err = st.Create(ctx, messages.Record{InvocationID: id, Namespace: "default", Pool: testPool, Mode: messages.ModeAsync,
		State: messages.StateQueued, Stream: st.Config.Stream, AcceptedAt: acceptedAt, UpdatedAt: acceptedAt})
	require.NoError(e.t, err)
}

// TestRetryOfCutOffAcceptRuns: the caller of a cut-off accept retries at
// once (within seconds of the Record). The retry is answered 202 queued
// only with the invocation stored: it runs, once.
func TestRetryOfCutOffAcceptRuns(t *testing.T) {
	e := newEnv(t, nil)
	e.worker("a", 1, nil)
	const id = "cut-off"
	e.orphanRecord(id, time.Now().UTC())
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
	e.orphanRecord(id, time.Now().UTC().Add(-time.Minute))
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
// worker's fast-path reply) shows what GET shows of the Record.
func TestSyncBodyEqualsGet(t *testing.T) {
	e := newEnv(t, nil)
	e.worker("a", 1, nil)
	r := e.invoke(map[string]any{"mode": "sync", "invocationID": "same-body", "payload": map[string]any{"x": 1}})
	require.EqualValues(t, 200, r.code, "%d %s", r.code, r.raw)
	g := e.do("GET", "/v1/namespaces/default/invocations/same-body", nil)
	require.EqualValues(t, 200, g.code)
	for _, k := range []string{"invocationID", "namespace", "pool", "mode", "state", "worker", "attempt", "stream", "sequence", "acceptedAt", "requestHash", "response"} {
		require.NotNil(t, g.body[k], "GET has no %s: %s", k, g.raw)
		require.Equal(t, g.body[k], r.body[k], "%s: sync 200 %s, GET %s", k, r.raw, g.raw)
	}
}
