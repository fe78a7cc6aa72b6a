package queue_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/callback"
	"github.com/runplane/runplane/sidecar/sidecartest"
)

var testMasterKey = []byte("0123456789abcdef0123456789abcdef")

// receiver is a callback target: it answers codes in turn (the last one
// from then on) and keeps what it got.
type receiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	codes []int
	got   []received
}

type received struct {
	body                    []byte
	signature, deliv, event string
}

func newReceiver(t testing.TB, codes ...int) *receiver {
	rc := &receiver{codes: codes}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, received{body: b, signature: r.Header.Get(callback.SignatureHeader), deliv: r.Header.Get(callback.DeliveryHeader),
			event: r.Header.Get(callback.EventHeader)})
		code := rc.codes[min(len(rc.got), len(rc.codes))-1]
		rc.mu.Unlock()
		w.WriteHeader(code)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) received() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

func callbackEnv(t testing.TB, allowLoopback bool, attempts int) *env {
	return newEnv(t, func(c *queue.Config) {
		c.Callbacks = callback.Config{MasterKey: testMasterKey, Backoff: 20 * time.Millisecond, Delivery: callback.Delivery{MaxAttempts: attempts}}
		c.Namespaces = namespaceUIDs{"default": "uid-default"}
		if allowLoopback {
			c.Callbacks.AllowCIDRs = []string{"127.0.0.0/8"}
		}
	})
}

// namespaceUIDs stands for the API server's namespaces (-no-kube has none).
type namespaceUIDs map[string]string

func (u namespaceUIDs) UID(_ context.Context, ns string, _ bool) (string, error) {
	if id, ok := u[ns]; ok {
		return id, nil
	}
	return "", fmt.Errorf("namespace %q: %w", ns, callback.ErrNoNamespace)
}

// waitCallback waits until invocation id's callback is no longer pending.
func (e *env) waitCallback(id string) messages.Record {
	e.t.Helper()
	var rec messages.Record
	require.Eventually(e.t, func() bool {
		rec = e.record(id)
		return rec.Callback != nil && rec.Callback.State != messages.CallbackPending
	}, 20*time.Second, 20*time.Millisecond, "callback of %s settled", id)
	return rec
}

// TestCallbackDeliveredOnceSigned: a terminal invocation's Record is
// POSTed to its callbackURL once, signed with the namespace's key (which
// the signing-key endpoint hands out), and the attempt is in the Record.
func TestCallbackDeliveredOnceSigned(t *testing.T) {
	e := callbackEnv(t, true, 0)
	e.worker("w1", 1, sidecartest.Echo)
	rc := newReceiver(t, http.StatusOK)
	r := e.invoke(map[string]any{"mode": "async", "invocationID": "cb-1", "payload": map[string]int{"n": 1}, "callbackURL": rc.srv.URL + "/hook"})
	require.Equal(t, http.StatusAccepted, r.code, "%s", r.raw)
	rec := e.waitCallback("cb-1")
	assert.Equal(t, messages.CallbackDelivered, rec.Callback.State)
	require.Len(t, rec.Callback.Attempts, 1)
	assert.Equal(t, http.StatusOK, rec.Callback.Attempts[0].StatusCode)

	got := rc.received()
	require.Len(t, got, 1, "once per terminal state")
	var posted messages.Record
	require.NoError(t, json.Unmarshal(got[0].body, &posted))
	assert.Equal(t, messages.StateSucceeded, posted.State)
	assert.Equal(t, "default/cb-1/succeeded", got[0].deliv)

	kr := e.do("GET", "/v1/namespaces/default/callback-signing-key", nil)
	require.Equal(t, http.StatusOK, kr.code, "%s", kr.raw)
	key, err := hex.DecodeString(kr.body["key"].(string))
	require.NoError(t, err)
	require.NoError(t, callback.Verify(key, got[0].signature, got[0].body, time.Now(), 5*time.Minute))
	assert.Equal(t, callback.KeyID("uid-default"), kr.body["keyID"])
	assert.Equal(t, callback.KeyID("uid-default"), rec.Callback.KeyID, "the invocation names the key it is signed with")
	assert.Error(t, callback.Verify(callback.NamespaceKey(testMasterKey, "default", "uid-other"), got[0].signature, got[0].body, time.Now(), 5*time.Minute),
		"a namespace made again under the name does not verify it")
	assert.Error(t, callback.Verify(callback.NamespaceKey(testMasterKey, "other", "uid-default"), got[0].signature, got[0].body, time.Now(), 5*time.Minute),
		"another namespace's key does not verify it")
}

// TestCallbackRetriedOn500: a 500 is retried with backoff until a 2xx;
// every attempt is in the Record; a target that keeps failing is given up
// after the attempts allowed.
func TestCallbackRetriedOn500(t *testing.T) {
	e := callbackEnv(t, true, 3)
	e.worker("w1", 1, sidecartest.Echo)

	rc := newReceiver(t, 500, 500, 200)
	r := e.invoke(map[string]any{"mode": "async", "invocationID": "cb-2", "callbackURL": rc.srv.URL})
	require.Equal(t, http.StatusAccepted, r.code, "%s", r.raw)
	rec := e.waitCallback("cb-2")
	assert.Equal(t, messages.CallbackDelivered, rec.Callback.State)
	var codes []int
	for _, a := range rec.Callback.Attempts {
		codes = append(codes, a.StatusCode)
	}
	assert.Equal(t, []int{500, 500, 200}, codes)
	assert.Len(t, rc.received(), 3)

	bad := newReceiver(t, 503)
	r = e.invoke(map[string]any{"mode": "async", "invocationID": "cb-3", "callbackURL": bad.srv.URL})
	require.Equal(t, http.StatusAccepted, r.code, "%s", r.raw)
	rec = e.waitCallback("cb-3")
	assert.Equal(t, messages.CallbackFailed, rec.Callback.State)
	assert.Len(t, rec.Callback.Attempts, 3)
	assert.Len(t, bad.received(), 3)
}

// TestCallbackPrivateTargetRefused: without the chart's allowance, a
// loopback, private or link-local callback target is refused with 400 and
// nothing is enqueued.
func TestCallbackPrivateTargetRefused(t *testing.T) {
	e := callbackEnv(t, false, 0)
	rc := newReceiver(t, http.StatusOK)
	for _, u := range []string{rc.srv.URL, "http://10.0.0.1/hook", "http://169.254.169.254/latest", "https://api.default.svc/"} {
		r := e.invoke(map[string]any{"mode": "async", "callbackURL": u})
		assert.Equal(t, http.StatusBadRequest, r.code, "%s: %s", u, r.raw)
		assert.Contains(t, r.body["detail"], "callbackURL", u)
	}
	assert.Empty(t, rc.received())
}

// TestCallbackPendingSurvivesRestart: a callback still pending when the
// queue stops (its target failed, the retry not yet due) is delivered by
// the queue that starts next, from the Record alone.
func TestCallbackPendingSurvivesRestart(t *testing.T) {
	e := newEnv(t, func(c *queue.Config) {
		c.Callbacks = callback.Config{MasterKey: testMasterKey, Delivery: callback.Delivery{AllowCIDRs: []string{"127.0.0.0/8"}}, Backoff: time.Second}
	})
	e.worker("w1", 1, sidecartest.Echo)
	rc := newReceiver(t, 500, 200)
	r := e.invoke(map[string]any{"mode": "async", "invocationID": "cb-r", "callbackURL": rc.srv.URL})
	require.Equal(t, http.StatusAccepted, r.code, "%s", r.raw)
	require.Eventually(t, func() bool {
		rec := e.record("cb-r")
		return rec.Callback != nil && len(rec.Callback.Attempts) == 1
	}, 20*time.Second, 20*time.Millisecond, "first attempt recorded")
	e.stop()
	e.startQueue()
	rec := e.waitCallback("cb-r")
	assert.Equal(t, messages.CallbackDelivered, rec.Callback.State)
	assert.Len(t, rec.Callback.Attempts, 2)
	assert.Len(t, rc.received(), 2)
}

// TestCallbackStartEvent: callbackEvents [start, completed] POSTs the
// start (once the invocation runs) and then the completion, each once,
// each recorded; without callbackEvents only the completion goes; an
// unknown event, or events without a callback, are a 400.
func TestCallbackStartEvent(t *testing.T) {
	e := callbackEnv(t, true, 0)
	e.worker("w1", 1, sidecartest.Echo)
	rc := newReceiver(t, http.StatusOK)
	r := e.invoke(map[string]any{"mode": "async", "invocationID": "cb-s", "callbackURL": rc.srv.URL, "callbackEvents": []string{"start", "completed"}})
	require.Equal(t, http.StatusAccepted, r.code, "%s", r.raw)
	rec := e.waitCallback("cb-s")
	assert.Equal(t, messages.CallbackDelivered, rec.Callback.State)
	require.NotNil(t, rec.Callback.Start)
	assert.Equal(t, messages.CallbackDelivered, rec.Callback.Start.State)
	require.Len(t, rec.Callback.Start.Attempts, 1)
	got := rc.received()
	require.Len(t, got, 2)
	assert.Equal(t, []string{"start", "completed"}, []string{got[0].event, got[1].event})
	assert.Equal(t, []string{"default/cb-s/start", "default/cb-s/succeeded"}, []string{got[0].deliv, got[1].deliv})
	var started messages.Record
	require.NoError(t, json.Unmarshal(got[0].body, &started))
	assert.Contains(t, []messages.State{messages.StateRunning, messages.StateSucceeded}, started.State)
	kr := e.do("GET", "/v1/namespaces/default/callback-signing-key", nil)
	require.Equal(t, http.StatusOK, kr.code, "%s", kr.raw)
	key, err := hex.DecodeString(kr.body["key"].(string))
	require.NoError(t, err)
	require.NoError(t, callback.Verify(key, got[0].signature, got[0].body, time.Now(), 5*time.Minute))

	plain := newReceiver(t, http.StatusOK)
	r = e.invoke(map[string]any{"mode": "async", "invocationID": "cb-c", "callbackURL": plain.srv.URL})
	require.Equal(t, http.StatusAccepted, r.code, "%s", r.raw)
	rec = e.waitCallback("cb-c")
	assert.Nil(t, rec.Callback.Start)
	require.Len(t, plain.received(), 1)
	assert.Equal(t, "completed", plain.received()[0].event)

	for _, body := range []map[string]any{
		{"mode": "async", "callbackURL": rc.srv.URL, "callbackEvents": []string{"output"}},
		{"mode": "async", "callbackURL": rc.srv.URL, "callbackEvents": []string{"start", "start"}},
		{"mode": "async", "callbackEvents": []string{"start"}},
	} {
		r := e.invoke(body)
		assert.Equal(t, http.StatusBadRequest, r.code, "%v: %s", body, r.raw)
		assert.Contains(t, r.body["detail"], "callbackEvents", body)
	}
}
