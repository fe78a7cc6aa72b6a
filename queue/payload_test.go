package queue_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/objects"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/stream"
)

// echoWorker runs the echo framework (framework-echo's handler) behind
// the real sidecar, as a worker of testPool the activator knows ready. It
// returns how many times the framework ran.
func (e *env) echoWorker(name string) *atomic.Int64 {
	e.t.Helper()
	runs := &atomic.Int64{}
	echo := framework.Echo(framework.EchoOptions{})
	e.worker(name, 2, func(ctx context.Context, r framework.Request) (framework.Response, error) {
		runs.Add(1)
		return echo(ctx, r)
	})
	e.waitWorkerReady(name)
	return runs
}

// post sends body with contentType and returns the status and the answer.
func (e *env) post(path, contentType string, body []byte) (int, []byte) {
	e.t.Helper()
	req, err := http.NewRequest("POST", e.base+path, bytes.NewReader(body))
	require.NoError(e.t, err)
	req.Header.Set("Content-Type", contentType)
	r, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	require.NoError(e.t, err)
	return r.StatusCode, b
}

// bigJSON is a JSON payload of about n bytes.
func bigJSON(t testing.TB, n int) json.RawMessage {
	raw := make([]byte, n*3/4)
	_, err := rand.Read(raw)
	require.NoError(t, err)
	b, err := json.Marshal(map[string]string{"blob": base64.StdEncoding.EncodeToString(raw)})
	require.NoError(t, err)
	return b
}

// echoedPayload is the payload framework-echo saw, from its answer.
func echoedPayload(t testing.TB, rec messages.Record) json.RawMessage {
	require.NotNil(t, rec.Response, "record %s has no response", rec.InvocationID)
	var req framework.Request
	require.NoError(t, json.Unmarshal(rec.Response.Body, &req))
	return req.Payload
}

// TestLargePayloadRoundTrip: a 10 MiB payload (ten times NATS's
// max_payload) reaches the framework intact, and its 10 MiB echo comes back
// to the caller, sync and async, through the real sidecar; the framework
// runs once per invocation (a result over max_payload used to make the
// sidecar NAK its dispatch and the framework run again without end).
func TestLargePayloadRoundTrip(t *testing.T) {
	e := newEnv(t, nil)
	runs := e.echoWorker("w1")
	payload := bigJSON(t, 10<<20)
	require.False(t, objects.Inline(int64(len(payload)), e.nc.MaxPayload()), "the payload must exceed max_payload")

	t.Run("sync", func(t *testing.T) {
		before := runs.Load()
		body, err := json.Marshal(map[string]any{"mode": "sync", "invocationID": "big-sync", "timeoutSeconds": 60, "payload": payload})
		require.NoError(t, err)
		code, out := e.post("/v1/namespaces/default/pools/"+testPool+"/invocations", "application/json", body)
		require.Equal(t, http.StatusOK, code, "%.300s", out)
		var rec messages.Record
		require.NoError(t, json.Unmarshal(out, &rec))
		assert.Equal(t, messages.StateSucceeded, rec.State, rec.Error)
		assert.JSONEq(t, string(payload), string(echoedPayload(t, rec)))
		assert.Nil(t, rec.ResponseBodyRef, "callers never see references")
		// GET answers the same body.
		got := e.record("big-sync")
		assert.JSONEq(t, string(payload), string(echoedPayload(t, got)))
		assert.Equal(t, int64(1), runs.Load()-before, "the framework ran once")
	})
	t.Run("async", func(t *testing.T) {
		before := runs.Load()
		body, err := json.Marshal(map[string]any{"mode": "async", "invocationID": "big-async", "payload": payload})
		require.NoError(t, err)
		code, out := e.post("/v1/namespaces/default/pools/"+testPool+"/invocations", "application/json", body)
		require.Equal(t, http.StatusAccepted, code, "%.300s", out)
		rec := e.waitState("big-async", messages.StateSucceeded, 60*time.Second)
		assert.JSONEq(t, string(payload), string(echoedPayload(t, rec)))
		assert.Equal(t, int64(1), runs.Load()-before, "the framework ran once")
	})
}

// TestBinaryPayloadRoundTrip: binary content as raw HTTP body bytes and as
// base64 in the JSON envelope reaches the framework as base64 with its
// contentType, and a binary answer comes back as base64 — small (inline)
// and large (by reference).
func TestBinaryPayloadRoundTrip(t *testing.T) {
	e := newEnv(t, nil)
	e.echoWorker("w1")
	for _, n := range []int{3 << 10, 3 << 20} {
		raw := make([]byte, n)
		_, err := rand.Read(raw)
		require.NoError(t, err)
		b64 := base64.StdEncoding.EncodeToString(raw)

		code, out := e.post("/v1/namespaces/default/pools/"+testPool+"/invocations?mode=sync&timeoutSeconds=60", "image/png", raw)
		require.Equal(t, http.StatusOK, code, "%.300s", out)
		var rec messages.Record
		require.NoError(t, json.Unmarshal(out, &rec))
		require.Equal(t, messages.StateSucceeded, rec.State, rec.Error)
		var req framework.Request
		require.NoError(t, json.Unmarshal(rec.Response.Body, &req), "%.300s", out)
		assert.Equal(t, "image/png", req.ContentType)
		var got string
		require.NoError(t, json.Unmarshal(req.Payload, &got))
		assert.Equal(t, b64, got, "raw body of %d bytes", n)

		// base64 in the envelope, answered as binary (echo.raw).
		code, out = e.post("/v1/namespaces/default/pools/"+testPool+"/invocations", "application/json", mustJSON(t, map[string]any{
			"mode": "sync", "timeoutSeconds": 60, "contentType": "application/octet-stream", "payload": b64,
			"attributes": map[string]string{framework.EchoAttrRaw: "true"}}))
		require.Equal(t, http.StatusOK, code, "%.300s", out)
		rec = messages.Record{}
		require.NoError(t, json.Unmarshal(out, &rec))
		require.Equal(t, messages.StateSucceeded, rec.State, rec.Error)
		assert.Equal(t, "application/octet-stream", rec.Response.ContentType)
		got = ""
		require.NoError(t, json.Unmarshal(rec.Response.Body, &got))
		back, err := base64.StdEncoding.DecodeString(got)
		require.NoError(t, err)
		assert.Equal(t, raw, back, "binary answer of %d bytes", n)
	}
	// curl -d without a Content-Type sends form-urlencoded: still the JSON envelope.
	code, out := e.post("/v1/namespaces/default/pools/"+testPool+"/invocations", "application/x-www-form-urlencoded",
		[]byte(`{"mode":"async","payload":{"x":1}}`))
	assert.Equal(t, http.StatusAccepted, code, "%s", out)
	// A non-JSON contentType with a payload that is not base64 is refused.
	code, out = e.post("/v1/namespaces/default/pools/"+testPool+"/invocations", "application/json",
		mustJSON(t, map[string]any{"mode": "async", "contentType": "image/png", "payload": map[string]int{"x": 1}}))
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, string(out), "base64")
}

// TestPayloadOverLimit: a body over the configured limit is a 413 that
// names the limit, for a JSON payload and for a raw body.
func TestPayloadOverLimit(t *testing.T) {
	e := newEnv(t, func(c *queue.Config) { c.MaxPayloadBytes = 2 << 20 })
	over := make([]byte, 2<<20+1)
	code, out := e.post("/v1/namespaces/default/pools/"+testPool+"/invocations?mode=async", "application/octet-stream", over)
	assert.Equal(t, http.StatusRequestEntityTooLarge, code)
	assert.Contains(t, string(out), "limit of 2097152 bytes (2 MiB)")

	code, out = e.post("/v1/namespaces/default/pools/"+testPool+"/invocations", "application/json",
		mustJSON(t, map[string]any{"mode": "async", "payload": bigJSON(t, 2<<20+1024)}))
	assert.Equal(t, http.StatusRequestEntityTooLarge, code)
	assert.Contains(t, string(out), "limit of 2097152 bytes (2 MiB)")

	// A payload that fits in a message, with attributes that make the
	// invocation not fit: accepted (the payload goes by reference).
	code, out = e.post("/v1/namespaces/default/pools/"+testPool+"/invocations", "application/json",
		mustJSON(t, map[string]any{"mode": "async", "payload": bigJSON(t, 900<<10),
			"attributes": map[string]string{"big": string(bytes.Repeat([]byte("a"), 200<<10))}}))
	assert.Equal(t, http.StatusAccepted, code, "%.300s", out)

	// Within the limit and above max_payload: accepted.
	code, out = e.post("/v1/namespaces/default/pools/"+testPool+"/invocations?mode=async", "application/octet-stream", over[:2<<20])
	assert.Equal(t, http.StatusAccepted, code, "%s", out)
}

func mustJSON(t testing.TB, v any) []byte {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// TestObjectsGoWithTheirRecord: the payload and result objects of a big
// invocation are gone once its Record has expired (the bucket's TTL is the
// Record TTL plus a margin): nothing leaks.
func TestObjectsGoWithTheirRecord(t *testing.T) {
	e := newEnv(t, func(c *queue.Config) {
		c.Stream = stream.Config{DuplicateWindow: metav1.Duration{Duration: time.Second}, RecordTTL: metav1.Duration{Duration: 2 * time.Second}, ObjectTTL: 3 * time.Second}
	})
	e.echoWorker("w1")
	code, out := e.post("/v1/namespaces/default/pools/"+testPool+"/invocations", "application/json",
		mustJSON(t, map[string]any{"mode": "sync", "invocationID": "expires", "timeoutSeconds": 60, "payload": bigJSON(t, 2<<20)}))
	require.Equal(t, http.StatusOK, code, "%.300s", out)
	bucket := objects.StreamName(objects.Bucket(e.cfg.Stream.WithDefaults().Stream, "default"))
	st, err := e.js.Stream(context.Background(), bucket)
	require.NoError(t, err)
	info, err := st.Info(context.Background())
	require.NoError(t, err)
	require.NotZero(t, info.State.Msgs, "payload and result objects stored")
	require.Eventually(t, func() bool {
		return e.do("GET", "/v1/namespaces/default/invocations/expires", nil).code == http.StatusNotFound
	}, 30*time.Second, 100*time.Millisecond, "the Record expires")
	require.Eventually(t, func() bool {
		info, err := st.Info(context.Background())
		return err == nil && info.State.Msgs == 0 && info.State.Bytes == 0
	}, 30*time.Second, 100*time.Millisecond, "the objects expire after it")
}
