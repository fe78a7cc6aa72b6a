package apiview

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"
)

// TestRecordCoversRecord fails when messages.Record gains a JSON field
// that Record neither shows nor is known to hide, and when NewRecord
// drops one it shows.
func TestRecordCoversRecord(t *testing.T) {
	hidden := map[string]bool{"sequence": true, "streamBytes": true}
	names := func(t reflect.Type) map[string]bool {
		out := map[string]bool{}
		for _, f := range reflect.VisibleFields(t) {
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
				out[name] = true
			}
		}
		return out
	}
	view := names(reflect.TypeFor[Record]())
	for n := range names(reflect.TypeFor[messages.Record]()) {
		assert.True(t, view[n] != hidden[n], "messages.Record field %q: shown %v, hidden %v", n, view[n], hidden[n])
	}

	now := time.Unix(1_800_000_000, 0).UTC()
	full := messages.Record{InvocationID: "i", Namespace: "ns", Pool: "p", Mode: messages.ModeSync, State: messages.StateSucceeded, Worker: "w",
		Attempt: 2, Stream: "S", Sequence: 42, StreamBytes: 7, Response: &framework.Response{StatusCode: 200}, ResponseBodyRef: &messages.ObjectRef{Bucket: "b", Name: "n"},
		Error: "e", Retries: 1, Attempts: []messages.AttemptOutcome{{Attempt: 1, Worker: "w0"}}, RequestHash: "sha256:x", AcceptedAt: now,
		UpdatedAt: now, Callback: &messages.CallbackStatus{URL: "https://x.example.com/"}, NamespaceUID: "uid"}
	var want, got map[string]any
	b, err := json.Marshal(full)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &want))
	for n := range hidden {
		require.Contains(t, want, n, "the test's Record sets every field")
		delete(want, n)
	}
	require.Len(t, want, len(names(reflect.TypeFor[messages.Record]()))-len(hidden), "the test's Record sets every field")
	b, err = json.Marshal(NewRecord(full))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &got))
	assert.Equal(t, want, got)
}
