package kubetest_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/callback"
	"github.com/runplane/runplane/queue/queuetest"
	"github.com/runplane/runplane/test/natsauth"
)

// TestCallbackKeyFollowsNamespaceUID: a namespace's callback signing key
// is its own, not its name's: deleted and made again under the same name
// (by another tenant, maybe), the namespace gets another key, so its new
// owner can neither verify nor forge the callbacks of the old one; nor can
// it read, stream, cancel or re-post the old one's Records (404, 409), while
// its own are stamped with its own UID.
func TestCallbackKeyFollowsNamespaceUID(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := "cb-remade"
	require.NoError(t, env.CreateNamespace(ctx, ns))
	nsObj, err := env.Client().CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	require.NoError(t, err)
	uid1 := string(nsObj.UID)
	_, err = env.Client().AppsV1().Deployments(ns).Create(ctx, deployment(ns, "workers", "echo", 0), metav1.CreateOptions{})
	require.NoError(t, err)

	srv := natsauth.JetStream(t, nil)
	master := []byte("0123456789abcdef0123456789abcdef")
	// The ingress only: nothing is delivered, the key is what matters.
	base := queuetest.Run(t, queue.Config{NATS: queue.NATS{URL: srv.ClientURL()}, RESTConfig: env.RESTConfig(), InsecureDisableCallerAuth: true,
		DisableActivator: true, Callbacks: callback.Config{MasterKey: master}}).Base
	type signingKey struct{ Key, KeyID string }
	key := func() (int, signingKey) {
		code, body := call(base, "", "GET", "/v1/namespaces/"+ns+"/callback-signing-key", nil)
		var k signingKey
		if code == 200 {
			require.NoError(t, json.Unmarshal([]byte(body), &k), body)
		}
		return code, k
	}

	var code int
	require.Eventually(t, func() bool {
		code, _ = call(base, "", "POST", "/v1/namespaces/"+ns+"/pools/echo/invocations",
			map[string]any{"mode": "async", "invocationID": "old-owner", "callbackURL": "https://hooks.example.com/runplane"})
		return code == 202
	}, 60*time.Second, 200*time.Millisecond, "the pool known, the invocation accepted (last: %d)", code)
	code, k1 := key()
	require.Equal(t, 200, code)
	assert.Equal(t, callback.KeyID(uid1), k1.KeyID)
	assert.Equal(t, hex.EncodeToString(callback.NamespaceKey(master, ns, uid1)), k1.Key)

	require.NoError(t, env.Client().CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}))
	require.Eventually(t, func() bool {
		_, err := env.Client().CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, 2*time.Minute, 200*time.Millisecond, "namespace deleted")
	code, _ = key()
	assert.Equal(t, 404, code, "no namespace, no key")

	require.NoError(t, env.CreateNamespace(ctx, ns))
	code, k2 := key()
	require.Equal(t, 200, code)
	assert.NotEqual(t, k1.KeyID, k2.KeyID, "another namespace")
	assert.NotEqual(t, k1.Key, k2.Key, "the namespace made again under the name has another key")

	// The old owner's Record is not the new owner's: not found, on every
	// path, as if it had never been.
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/namespaces/" + ns + "/invocations/old-owner"},
		{"GET", "/v1/namespaces/" + ns + "/invocations/old-owner/stream"},
		{"POST", "/v1/namespaces/" + ns + "/invocations/old-owner/cancel"},
	} {
		code, body := call(base, "", c.method, c.path, nil)
		assert.Equal(t, 404, code, "%s %s: %s", c.method, c.path, body)
		assert.NotContains(t, body, "hooks.example.com", c.path)
	}
	// The new owner's own invocations are its own.
	_, err = env.Client().AppsV1().Deployments(ns).Create(ctx, deployment(ns, "workers", "echo", 0), metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		code, _ = call(base, "", "POST", "/v1/namespaces/"+ns+"/pools/echo/invocations", map[string]any{"mode": "async", "invocationID": "new-owner", "callbackURL": "https://hooks.example.com/runplane"})
		return code == 202
	}, 60*time.Second, 200*time.Millisecond, "the pool known again, the invocation accepted (last: %d)", code)
	code, body := call(base, "", "GET", "/v1/namespaces/"+ns+"/invocations/new-owner", nil)
	require.Equal(t, 200, code, body)
	var rec messages.Record
	require.NoError(t, json.Unmarshal([]byte(body), &rec))
	require.NotNil(t, rec.Callback, body)
	assert.Equal(t, k2.KeyID, rec.Callback.KeyID, "stamped with the new namespace's UID: its callback is signed with the new key")

	// Nor can a re-post of the old owner's ID answer it (or run it again).
	code, body = call(base, "", "POST", "/v1/namespaces/"+ns+"/pools/echo/invocations",
		map[string]any{"mode": "async", "invocationID": "old-owner", "callbackURL": "https://hooks.example.com/runplane"})
	assert.Equal(t, 409, code, body)
	assert.NotContains(t, body, "hooks.example.com")
}
