package queue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"
)

// wiretap counts the JetStream API requests on subject (a subscription
// beside the server's own).
func (e *env) wiretap(subject string) *atomic.Int64 {
	e.t.Helper()
	var n atomic.Int64
	sub, err := e.nc.Subscribe(subject, func(*nats.Msg) { n.Add(1) })
	require.NoError(e.t, err)
	e.t.Cleanup(func() { assert.NoError(e.t, sub.Unsubscribe()) })
	require.NoError(e.t, e.nc.Flush())
	return &n
}

// TestFinishedWorkIsPurgedInBatches: a finished invocation's messages (its
// own and its Dispatch) used to be deleted one by one, two JetStream API
// requests per call (≥ 400 for these 200 calls); they now leave with a
// purge per subject now and then. Every request that removes a message is
// seen on the wire; the stream ends empty.
func TestFinishedWorkIsPurgedInBatches(t *testing.T) {
	const calls, callers = 200, 16
	e := newEnv(t, nil)
	e.worker("w", callers, nil)
	e.waitWorkerReady("w")
	name := e.cfg.Stream.WithDefaults().Stream
	deletes := e.wiretap("$JS.API.STREAM.MSG.DELETE." + name)
	purges := e.wiretap("$JS.API.STREAM.PURGE." + name)

	ids := make(chan int, calls)
	for i := range calls {
		ids <- i
	}
	close(ids)
	errs := make(chan error, calls)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for i := range ids {
				b, _ := json.Marshal(map[string]any{"mode": "sync", "invocationID": fmt.Sprintf("batch-%03d", i), "payload": map[string]int{"n": i}})
				r, err := http.Post(e.base+"/v1/namespaces/default/pools/"+testPool+"/invocations", "application/json", bytes.NewReader(b))
				if err == nil {
					_ = r.Body.Close()
					if r.StatusCode != http.StatusOK {
						err = fmt.Errorf("call %d: %s", i, r.Status)
					}
				}
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	// Not fatal: the count below is reported either way.
	assert.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Zero(c, e.streamState().Msgs, "messages")
	}, 20*time.Second, 20*time.Millisecond, "every finished invocation's messages left the stream")
	require.NoError(t, e.nc.Flush())
	t.Logf("%d calls: %d deletes, %d purges", calls, deletes.Load(), purges.Load())
	assert.Less(t, deletes.Load()+purges.Load(), int64(calls/2), "requests removing %d calls' %d messages", calls, 2*calls)
}

// TestPurgeKeepsOpenInvocations: a purge removes every message of its
// subject below its floor, so the floor must stay at the lowest message
// still needed. A long-running invocation dispatched between short ones
// keeps its message and its Dispatch while 50 short ones before and after
// it finish and leave the stream (those before in a purge below it, those
// after one by one once they waited state.FallbackAfter); it then finishes
// whole, and the stream ends empty.
func TestPurgeKeepsOpenInvocations(t *testing.T) {
	e := newEnv(t, nil)
	release := make(chan struct{})
	e.worker("w", 4, func(_ context.Context, r framework.Request) (framework.Response, error) {
		if r.InvocationID == "long" {
			<-release
		}
		return framework.Response{StatusCode: 200, ContentType: "application/json", Body: r.Payload}, nil
	})
	e.waitWorkerReady("w")
	post := func(id string) {
		t.Helper()
		r := e.invoke(map[string]any{"mode": "async", "invocationID": id, "payload": map[string]string{"id": id}})
		require.EqualValues(t, 202, r.code, "%s", r.raw)
	}
	for i := range 10 {
		post(fmt.Sprintf("before-%d", i))
	}
	for i := range 10 {
		e.waitState(fmt.Sprintf("before-%d", i), messages.StateSucceeded, 20*time.Second)
	}
	post("long")
	e.waitState("long", messages.StateRunning, 20*time.Second)
	for i := range 40 {
		post(fmt.Sprintf("after-%d", i))
	}
	for i := range 40 {
		e.waitState(fmt.Sprintf("after-%d", i), messages.StateSucceeded, 20*time.Second)
	}
	// Barrier: only the long one's two messages are left.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.EqualValues(c, 2, e.streamState().Msgs)
	}, 20*time.Second, 20*time.Millisecond, "the short invocations' messages left the stream")
	ctx := context.Background()
	st, err := e.js.Stream(ctx, e.cfg.Stream.WithDefaults().Stream)
	require.NoError(t, err)
	m, err := st.GetMsg(ctx, e.stored("long").Sequence)
	require.NoError(t, err, "the long-running invocation's message")
	require.Equal(t, "default/long", m.Header.Get(jetstream.MsgIDHeader))
	d, err := st.GetLastMsgForSubject(ctx, e.cfg.Stream.WithDefaults().Prefix+".dispatch.default."+testPool+".w")
	require.NoError(t, err, "its Dispatch")
	require.Equal(t, messages.DispatchPublishID("default", "long", 1), d.Header.Get(jetstream.MsgIDHeader))

	close(release)
	rec := e.waitState("long", messages.StateSucceeded, 20*time.Second)
	require.JSONEq(t, `{"id":"long"}`, string(rec.Response.Body))
	e.waitStreamEmpty("the long one's messages left too")
}
