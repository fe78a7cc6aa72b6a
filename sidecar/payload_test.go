package sidecar

import (
	"bytes"
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/objects"
)

// bucket creates the pool's Object Store bucket, as the queue does.
func (e *env) bucket() *objects.Buckets {
	e.t.Helper()
	b := &objects.Buckets{JS: e.js, Cfg: objects.Config{StreamName: api.DefaultStreamName, TTL: time.Hour}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := b.Ensure(ctx, testNS)
	require.NoError(e.t, err)
	return b
}

// bigBody is a JSON string of about n bytes.
func bigBody(n int) json.RawMessage {
	return json.RawMessage(`"` + string(bytes.Repeat([]byte("x"), n)) + `"`)
}

// TestPayloadsByReference covers the sidecar's side of bodies beyond
// max_payload: a payload handed by reference reaches the framework; an
// answer too big for one message is stored in the pool's bucket and the
// result carries its reference; the framework runs once and the dispatch is
// acked (a result over max_payload used to be NAKed and the framework run
// again without end); an answer over the limit fails with the reason; a
// reference to anything but the invocation's own object is not run.
func TestPayloadsByReference(t *testing.T) {
	e := newEnv(t)
	buckets := e.bucket()
	sock := socketPath(t)
	var calls atomic.Int32
	var lastPayload atomic.Pointer[json.RawMessage]
	serveFramework(t, sock, func(ctx context.Context, r framework.Request) (framework.Response, error) {
		calls.Add(1)
		lastPayload.Store(&r.Payload)
		var want int
		_ = json.Unmarshal([]byte(r.Attributes["size"]), &want)
		return framework.Response{StatusCode: 200, ContentType: "application/json", Body: bigBody(want)}, nil
	})
	results := e.results()
	e.startSidecar(e.config("w1", sock))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	t.Run("a big answer goes by reference, runs once, is acked", func(t *testing.T) {
		before := calls.Load()
		e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{InvocationID: "big-result", Attributes: map[string]string{"size": "3145728"},
			MaxResultBytes: 64 << 20}})
		res := waitResult(t, results)
		require.Equal(t, messages.StateSucceeded, res.State, res.Error)
		require.NotNil(t, res.ResponseBodyRef)
		assert.Empty(t, res.Response.Body, "the body is in the bucket")
		assert.Equal(t, objects.Bucket(api.DefaultStreamName, testNS), res.ResponseBodyRef.Bucket)
		assert.Equal(t, objects.ResultName(testNS, "big-result", 1), res.ResponseBodyRef.Name)
		body, err := objects.Get(ctx, e.js, *res.ResponseBodyRef, 0)
		require.NoError(t, err)
		assert.Equal(t, []byte(bigBody(3<<20)), body)
		require.Eventually(t, func() bool { return e.consumerInfo("w1").NumAckPending == 0 }, waitFor, tick, "dispatch acked")
		assert.Zero(t, e.consumerInfo("w1").NumRedelivered, "never redelivered")
		assert.Equal(t, int32(1), calls.Load()-before, "framework calls")
	})
	t.Run("an answer over the limit fails with the reason", func(t *testing.T) {
		before := calls.Load()
		e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{InvocationID: "too-big", Attributes: map[string]string{"size": "2097152"},
			MaxResultBytes: 1 << 20}})
		res := waitResult(t, results)
		require.Equal(t, messages.StateFailed, res.State)
		assert.Contains(t, res.Error, "exceeds the limit of 1048576 bytes")
		assert.Nil(t, res.ResponseBodyRef)
		assert.Equal(t, int32(1), calls.Load()-before, "framework calls")
	})
	obs, err := buckets.Ensure(ctx, testNS)
	require.NoError(t, err)
	payload := bigBody(5 << 20)
	t.Run("a payload by reference reaches the framework", func(t *testing.T) {
		ref, err := objects.Put(ctx, obs, objects.PayloadName(testNS, "big-payload"), payload, e.nc.MaxPayload())
		require.NoError(t, err)
		e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{InvocationID: "big-payload", PayloadRef: &ref,
			Attributes: map[string]string{"size": "10"}}})
		res := waitResult(t, results)
		require.Equal(t, messages.StateSucceeded, res.State, res.Error)
		assert.Equal(t, payload, *lastPayload.Load())
	})
	t.Run("a reference to another invocation's object is not run", func(t *testing.T) {
		ref, err := objects.Put(ctx, obs, objects.PayloadName(testNS, "someone-else"), payload, e.nc.MaxPayload())
		require.NoError(t, err)
		before := calls.Load()
		e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{InvocationID: "forged", PayloadRef: &ref}})
		res := waitResult(t, results)
		require.Equal(t, messages.StateFailed, res.State)
		assert.Contains(t, res.Error, "is not this invocation's")
		assert.Equal(t, before, calls.Load(), "framework calls")
	})
	t.Run("a changed object is not run", func(t *testing.T) {
		ref, err := objects.Put(ctx, obs, objects.PayloadName(testNS, "changed"), payload, e.nc.MaxPayload())
		require.NoError(t, err)
		_, err = objects.Put(ctx, obs, objects.PayloadName(testNS, "changed"), bigBody(5<<20+1), e.nc.MaxPayload())
		require.NoError(t, err)
		before := calls.Load()
		e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{InvocationID: "changed", PayloadRef: &ref}})
		res := waitResult(t, results)
		require.Equal(t, messages.StateFailed, res.State)
		assert.Contains(t, res.Error, "read the payload")
		assert.Equal(t, before, calls.Load(), "framework calls")
	})
}
