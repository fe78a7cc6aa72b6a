package callback

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "github.com/runplane/runplane/api/serverless/v1"
	"github.com/runplane/runplane/internal/messages"
)

// jsonNames are the JSON field names of struct type t.
func jsonNames(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for _, f := range reflect.VisibleFields(t) {
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
			out[name] = true
		}
	}
	return out
}

// TestInvocation fails when messages.Record gains a JSON field that
// Invocation neither shows nor is known to hide, when a hidden value
// reaches the view, and when Invocation drops a field it shows.
func TestInvocation(t *testing.T) {
	hidden := map[string]bool{"stream": true, "sequence": true, "requestHash": true, "namespaceUID": true, "responseBodyRef": true, "streamBytes": true}
	view := jsonNames(reflect.TypeFor[v1.Invocation]())
	record := jsonNames(reflect.TypeFor[messages.Record]())
	for n := range record {
		assert.True(t, view[n] != hidden[n], "messages.Record field %q: shown %v, hidden %v", n, view[n], hidden[n])
	}
	for n := range view {
		assert.True(t, record[n], "v1.Invocation field %q is not a Record's", n)
	}

	now := time.Unix(1_800_000_000, 0).UTC()
	next := now.Add(time.Minute)
	const uid, hash, streamName = "5f0c1e2a-uid-of-the-namespace", "sha256:hash-of-the-request", "RUNTIME_SERVERLESS_NAME"
	tries := []messages.CallbackAttempt{{At: now, StatusCode: 503, Error: "e", NextAt: &next}}
	full := messages.Record{InvocationID: "i", Namespace: "ns", Pool: "p", Mode: messages.ModeSync, State: messages.StateSucceeded, Worker: "w",
		Attempt: 2, Stream: streamName, Sequence: 4242, StreamBytes: 7,
		Response:        &messages.Response{StatusCode: 200, ContentType: "application/json", Headers: map[string]string{"h": "v"}, Body: json.RawMessage(`{"a":1}`), Error: "x"},
		ResponseBodyRef: &messages.ObjectRef{Bucket: "bucket-name", Name: "object-name", NUID: "nuid", Size: 1, Chunks: 1, Digest: "SHA-256=d"},
		Error:           "e", Retries: 1, RequestHash: hash, AcceptedAt: now, UpdatedAt: now, NamespaceUID: uid,
		Attempts: []messages.AttemptOutcome{{Attempt: 1, Worker: "w0", State: messages.AttemptHandedBack, StatusCode: 500, Error: "e",
			StartedAt: now, FinishedAt: now, RetryAt: &next}},
		Callback: &messages.CallbackStatus{URL: "https://x.example.com/", KeyID: uid, State: messages.CallbackPending, Attempts: tries,
			Events: []messages.CallbackEvent{messages.CallbackEventStart, messages.CallbackEventCompleted},
			Start:  &messages.CallbackDelivery{State: messages.CallbackDelivered, Attempts: tries}},
	}
	var want, got map[string]any
	b, err := json.Marshal(full)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &want))
	require.Len(t, want, len(record), "the test's Record sets every field")
	for n := range hidden {
		delete(want, n)
	}
	want["callback"].(map[string]any)["keyID"] = KeyID(uid)

	b, err = json.Marshal(Invocation(full))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &got))
	assert.Equal(t, want, got)
	for _, secret := range []string{uid, hash, streamName, "4242", "bucket-name"} {
		assert.NotContains(t, string(b), secret)
	}
}

// TestKeyID: the ID follows the UID without showing it.
func TestKeyID(t *testing.T) {
	assert.Empty(t, KeyID(""))
	a, b := KeyID("uid-a"), KeyID("uid-b")
	assert.Len(t, a, 16)
	assert.NotEqual(t, a, b)
	assert.Equal(t, a, KeyID("uid-a"))
	assert.NotContains(t, a, "uid-a")
}
