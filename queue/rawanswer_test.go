package queue_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/objects"
	"github.com/runplane/runplane/queue/stream"
)

// TestAnswersAreEncodingJSONs: the ingress places a response body into its
// answer as it is (callback.Encode), yet every answer is byte for byte what
// encoding/json writes — for a framework's body with white space, <, &
// and U+2028 (which encoding/json compacts and escapes), inline (the
// worker's sync reply, the Record) and by reference (an Object Store object the
// worker wrote), sync and GET.
func TestAnswersAreEncodingJSONs(t *testing.T) {
	e := newEnv(t, nil)
	e.worker("w1", 2, func(_ context.Context, r framework.Request) (framework.Response, error) {
		var n int
		if err := json.Unmarshal(r.Payload, &n); err != nil {
			return framework.Response{}, err
		}
		body := "{ \"html\": \"<a>&\u2028</a>\",\n  \"text\": \"" + strings.Repeat("a b ", n/4) + "\" }"
		return framework.Response{StatusCode: 200, Body: json.RawMessage(body)}, nil
	})
	e.waitWorkerReady("w1")
	for _, tc := range []struct {
		name  string
		bytes int
	}{{"inline", 64 << 10}, {"by reference", 2 << 20}} {
		t.Run(tc.name, func(t *testing.T) {
			id := strings.ReplaceAll(tc.name, " ", "-")
			code, out := e.post("/v1/namespaces/default/pools/"+testPool+"/invocations", "application/json",
				mustJSON(t, map[string]any{"mode": "sync", "invocationID": id, "timeoutSeconds": 60, "payload": tc.bytes}))
			require.Equal(t, http.StatusOK, code, "%.300s", out)
			// The sync answer may come from the worker's reply a few ms
			// before the activator writes the final Record.
			e.waitState(id, messages.StateSucceeded, 30*time.Second)
			get := e.do("GET", "/v1/namespaces/default/invocations/"+id, nil)
			require.Equal(t, http.StatusOK, get.code)
			for what, answer := range map[string][]byte{"sync": out, "GET": get.raw} {
				var v struct {
					Response struct {
						Body json.RawMessage `json:"body"`
					} `json:"response"`
				}
				require.NoError(t, json.Unmarshal(answer, &v), what)
				require.Greater(t, len(v.Response.Body), tc.bytes, what)
				assert.Equal(t, messages.StateSucceeded, messages.State(gjson(t, answer, "state")), what)
				assert.Equal(t, reencoded(t, answer), string(answer), "%s: the answer is encoding/json's", what)
			}
		})
	}
}

// reencoded is the answer as encoding/json writes the value it holds (its
// response body kept as a json.RawMessage, which json.Marshal compacts and
// escapes), with httpjson's newline.
func reencoded(t *testing.T, answer []byte) string {
	// v1.Invocation's fields, in its order; the response as one raw value.
	var inv struct {
		InvocationID string          `json:"invocationID"`
		Namespace    string          `json:"namespace"`
		Pool         string          `json:"pool"`
		Mode         string          `json:"mode"`
		State        string          `json:"state"`
		Worker       string          `json:"worker,omitempty"`
		Attempt      int             `json:"attempt,omitempty"`
		Response     json.RawMessage `json:"response,omitempty"`
		AcceptedAt   json.RawMessage `json:"acceptedAt"`
		UpdatedAt    json.RawMessage `json:"updatedAt"`
	}
	require.NoError(t, json.Unmarshal(answer, &inv))
	b, err := json.Marshal(inv)
	require.NoError(t, err)
	return string(b) + "\n"
}

func gjson(t *testing.T, b []byte, key string) string {
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &m))
	var s string
	require.NoError(t, json.Unmarshal(m[key], &s))
	return s
}

// TestInvalidBodyObjectRefused: a worker writes its response body's object
// and names it in its Result, which the activator takes without reading
// the object. A body that is not JSON is answered 502 naming the problem —
// it was answered 200 with an empty body (encoding/json failed after the
// status line was sent).
func TestInvalidBodyObjectRefused(t *testing.T) {
	e := newEnv(t, nil)
	e.echoWorker("w1")
	const id = "forged-body"
	code, out := e.post("/v1/namespaces/default/pools/"+testPool+"/invocations", "application/json",
		mustJSON(t, map[string]any{"mode": "sync", "invocationID": id, "timeoutSeconds": 60, "payload": bigJSON(t, 2<<20)}))
	require.Equal(t, http.StatusOK, code, "%.300s", out)

	// What a worker that runs its own code instead of the sidecar leaves:
	// its object (its namespace's bucket is writable to it) with bytes that
	// are not JSON, and a Result naming it, which the activator copies into
	// the Record.
	ctx := context.Background()
	rec := e.stored(id)
	require.NotNil(t, rec.ResponseBodyRef, "a 2 MiB echo goes by reference")
	obs, err := e.js.ObjectStore(ctx, rec.ResponseBodyRef.Bucket)
	require.NoError(t, err)
	bad := []byte(`{"blob":"` + strings.Repeat("A", 2<<20) + `"`) // unterminated
	ref, err := objects.Put(ctx, obs, rec.ResponseBodyRef.Name, bad, e.nc.MaxPayload())
	require.NoError(t, err)
	rec.ResponseBodyRef = &ref
	kv, err := e.js.KeyValue(ctx, e.cfg.Stream.WithDefaults().RecordsBucket)
	require.NoError(t, err)
	_, err = kv.Put(ctx, stream.Key("default", id), mustJSON(t, rec))
	require.NoError(t, err)

	get := e.do("GET", "/v1/namespaces/default/invocations/"+id, nil)
	assert.Equal(t, http.StatusBadGateway, get.code, "%.300s", get.raw)
	assert.Contains(t, string(get.raw), "not valid JSON")
}
