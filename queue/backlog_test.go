package queue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"
)

// TestDeepBacklogDispatchedWhole: invocations deep in a long queue are held
// without their payload, headers and attributes (state.FullItems), and
// their dispatch reads them back from the stream: every one reaches the
// worker whole, in order.
func TestDeepBacklogDispatchedWhole(t *testing.T) {
	const n = 200 // > state.FullItems
	e := newEnv(t, nil)
	for i := range n {
		r := e.invoke(map[string]any{"mode": "async", "invocationID": fmt.Sprintf("deep-%03d", i), "payload": map[string]int{"n": i},
			"headers": map[string]string{"x-n": fmt.Sprint(i)}, "attributes": map[string]string{"path": fmt.Sprintf("/p/%d", i)}})
		require.EqualValues(t, 202, r.code)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, n, e.poolStatus().Backlog, "all queued in the activator")
	}, 10*time.Second, 20*time.Millisecond)

	seen := make(chan string, n)
	e.worker("w", 1, func(_ context.Context, d framework.Request) (framework.Response, error) {
		seen <- d.InvocationID
		body, err := json.Marshal(map[string]any{"payload": d.Payload, "header": d.Headers["x-n"], "path": d.Attributes["path"]})
		if err != nil {
			return framework.Response{}, err
		}
		return framework.Response{StatusCode: 200, ContentType: "application/json", Body: body}, nil
	})
	for i := range n {
		id := fmt.Sprintf("deep-%03d", i)
		rec := e.waitState(id, messages.StateSucceeded, 30*time.Second)
		require.NotNil(t, rec.Response, id)
		require.JSONEq(t, fmt.Sprintf(`{"payload":{"n":%d},"header":"%d","path":"/p/%d"}`, i, i, i), string(rec.Response.Body), id)
	}
	order := make([]string, 0, n)
	for range n {
		order = append(order, <-seen)
	}
	require.IsIncreasing(t, order, "queue order")
}

// TestDeepBacklogReadsNoRecord: the dispatch of an invocation deep in a
// long queue (held light) reads its message back from the stream, and no
// Record: the one the ingress created is made again from what the
// activator kept (state.Item.Unlighten). Every Record read of the drain is
// seen on the wire (a subscription to the JetStream get subjects of the
// Records bucket's stream).
func TestDeepBacklogReadsNoRecord(t *testing.T) {
	const n = 100 // > state.FullItems: 36 are held light
	e := newEnv(t, nil)
	for i := range n {
		r := e.invoke(map[string]any{"mode": "async", "invocationID": fmt.Sprintf("light-%03d", i), "payload": map[string]int{"n": i}})
		require.EqualValues(t, 202, r.code)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, n, e.poolStatus().Backlog, "all queued in the activator")
	}, 10*time.Second, 20*time.Millisecond)

	kvStream := "KV_" + e.cfg.Stream.WithDefaults().RecordsBucket
	var reads atomic.Int64
	for _, subj := range []string{"$JS.API.DIRECT.GET." + kvStream + ".>", "$JS.API.DIRECT.GET." + kvStream, "$JS.API.STREAM.MSG.GET." + kvStream} {
		sub, err := e.nc.Subscribe(subj, func(*nats.Msg) { reads.Add(1) })
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, sub.Unsubscribe()) })
	}
	require.NoError(t, e.nc.Flush())
	// The wiretap sees reads: one of a Record, made here, is counted.
	e.stored("light-000")
	require.Eventually(t, func() bool { return reads.Load() == 1 }, 5*time.Second, 10*time.Millisecond, "the wiretap counts a Record read")
	reads.Store(0)

	e.worker("w", 8, nil)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		st := e.poolStatus()
		assert.Zero(c, st.Backlog+st.InFlight, "drained")
	}, 60*time.Second, 20*time.Millisecond)
	require.NoError(t, e.nc.Flush())
	assert.Zero(t, reads.Load(), "Record reads while draining %d queued invocations", n)
	for i := range n {
		e.waitState(fmt.Sprintf("light-%03d", i), messages.StateSucceeded, 30*time.Second)
	}
}

// TestDeepBacklogMessageGoneIsDeadLettered: an invocation held light whose
// stream message is gone (purged by an operator, expired) cannot be
// dispatched: it is dead-lettered with the reason, not retried for ever,
// and the rest of the queue runs.
func TestDeepBacklogMessageGoneIsDeadLettered(t *testing.T) {
	const n = 70 // > state.FullItems: the last is held light
	e := newEnv(t, nil)
	for i := range n {
		r := e.invoke(map[string]any{"mode": "async", "invocationID": fmt.Sprintf("gone-%03d", i), "payload": map[string]int{"n": i}})
		require.EqualValues(t, 202, r.code)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, n, e.poolStatus().Backlog, "all queued in the activator")
	}, 10*time.Second, 20*time.Millisecond)
	st, err := e.js.Stream(context.Background(), e.cfg.Stream.WithDefaults().Stream)
	require.NoError(t, err)
	info, err := st.Info(context.Background())
	require.NoError(t, err)
	require.NoError(t, st.DeleteMsg(context.Background(), info.State.LastSeq), "the last invocation's message") //nolint:forbidigo // an operator's purge, not the queue's delete

	e.worker("w", 4, nil)
	rec := e.waitState(fmt.Sprintf("gone-%03d", n-1), messages.StateDeadLettered, 30*time.Second)
	require.Contains(t, rec.Error, "gone from the stream")
	for i := range n - 1 {
		e.waitState(fmt.Sprintf("gone-%03d", i), messages.StateSucceeded, 30*time.Second)
	}
}
