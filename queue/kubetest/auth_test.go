package kubetest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/runplane/runplane/queue/activator"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/internal/callerauth"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/queuetest"
	"github.com/runplane/runplane/test/natsauth"
)

// call sends a request with bearer token tok ("" for none); a transport
// error is code 0 (safe inside require.Eventually).
func call(base, tok, method, path string, body any) (int, string) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		return 0, err.Error()
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}

func saToken(t *testing.T, ns, sa string) string {
	t.Helper()
	ctx := t.Context()
	_, err := env.Client().CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
	require.NoError(t, err)
	tr, err := env.Client().CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return tr.Status.Token
}

// TestIngressCallerAuth: the ingress, on the real apiserver, serves only
// callers whose bearer token the apiserver accepts and whom RBAC lets do
// the verb on the pool: a token with runplane-invoker bound in namespace A
// invokes, reads and cancels A's invocations; a token of namespace B gets
// 403 on A's pools and invocations (the same answer for an ID that exists
// and one that does not); no token and a forged token get 401.
func TestIngressCallerAuth(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	a, b := "auth-a", "auth-b"
	for _, n := range []string{a, b} {
		require.NoError(t, env.CreateNamespace(ctx, n))
	}
	// The chart's runplane-invoker (charts/runplane/templates/queue).
	_, err := env.Client().RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "runplane-invoker"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{callerauth.Group}, Resources: []string{"pools/invocations"}, Verbs: []string{"create", "get", "update"}},
			{APIGroups: []string{callerauth.Group}, Resources: []string{"pools"}, Verbs: []string{"get"}},
		}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = env.Client().RbacV1().RoleBindings(a).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "client-invokes"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "runplane-invoker"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: a, Name: "client"}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	tokA, tokB := saToken(t, a, "client"), saToken(t, b, "client")

	srv := natsauth.JetStream(t, nil)
	tn := &tenants{t: t, natsURL: srv.ClientURL(), pool: "echo"}
	_, err = env.Client().AppsV1().Deployments(a).Create(ctx, deployment(a, "workers", tn.pool, 1), metav1.CreateOptions{})
	require.NoError(t, err)
	tn.kubelet(a)

	base := queuetest.Run(t, queue.Config{NATS: queue.NATS{URL: srv.ClientURL()}, RESTConfig: env.RESTConfig(), Namespace: a,
		CallerAuth: callerauth.Options{DenyCacheTTL: 200 * time.Millisecond}, Decisions: activator.Decisions{Workers: activator.Workers{HeartbeatTimeout: metav1.Duration{Duration: 2 * time.Second}}}, Tick: 100 * time.Millisecond}).Base
	invokeA := "/v1/namespaces/" + a + "/pools/echo/invocations"

	// The invoker's first call may precede RBAC's view of the new binding.
	var rec struct{ State, InvocationID string }
	require.Eventually(t, func() bool {
		code, body := call(base, tokA, "POST", invokeA, map[string]any{"mode": "sync", "invocationID": "a-1", "timeoutSeconds": 30})
		return code == 200 && json.Unmarshal([]byte(body), &rec) == nil
	}, 60*time.Second, 200*time.Millisecond, "the invoker of namespace A invokes A's pool")
	assert.Equal(t, "succeeded", rec.State)
	code, body := call(base, tokA, "GET", "/v1/namespaces/"+a+"/invocations/a-1", nil)
	assert.Equal(t, 200, code, body)
	code, body = call(base, tokA, "GET", "/v1/namespaces/"+a+"/pools/echo", nil)
	assert.Equal(t, 200, code, body)

	forged := tokA[:len(tokA)-8] + "AAAAAAAA"
	for _, tc := range []struct {
		name, tok, method, path string
		body                    any
		want                    int
		contains                []string
	}{
		{"no token", "", "POST", invokeA, map[string]any{"mode": "async"}, 401, []string{"bearer token"}},
		{"forged token", forged, "POST", invokeA, map[string]any{"mode": "async"}, 401, []string{"bearer token"}},
		{"no token on the alias", "", "POST", "/api/v1/serverless/invocations", map[string]any{"mode": "async", "namespace": a, "serverlessRequestID": "echo"}, 401, nil},
		{"no token on a read", "", "GET", "/v1/namespaces/" + a + "/invocations/a-1", nil, 401, nil},
		{"B invokes A's pool", tokB, "POST", invokeA, map[string]any{"mode": "async"}, 403, []string{"create", "pools/invocations", `"echo"`, `namespace "auth-a"`}},
		{"B through the alias", tokB, "POST", "/api/v1/serverless/invocations", map[string]any{"mode": "async", "namespace": a, "serverlessRequestID": "echo"}, 403, []string{"create"}},
		{"B reads A's pool", tokB, "GET", "/v1/namespaces/" + a + "/pools/echo", nil, 403, []string{"get", "pools", `namespace "auth-a"`}},
		{"B reads A's invocation", tokB, "GET", "/v1/namespaces/" + a + "/invocations/a-1", nil, 403, []string{"get", "pools/invocations", `namespace "auth-a"`}},
		{"B cancels A's invocation", tokB, "POST", "/v1/namespaces/" + a + "/invocations/a-1/cancel", nil, 403, []string{"update", "pools/invocations"}},
		{"no token on a stream", "", "GET", "/v1/namespaces/" + a + "/invocations/a-1/stream", nil, 401, nil},
		{"B streams A's invocation", tokB, "GET", "/v1/namespaces/" + a + "/invocations/a-1/stream", nil, 403, []string{"get", "pools/invocations", `namespace "auth-a"`}},
		{"B streams A's pool", tokB, "POST", invokeA, map[string]any{"stream": true}, 403, []string{"create", "pools/invocations"}},
		{"B reads A's callback key", tokB, "GET", "/v1/namespaces/" + a + "/callback-signing-key", nil, 403, []string{"get", "pools/callbacksigningkey"}},
		{"A's invoker reads A's callback key", tokA, "GET", "/v1/namespaces/" + a + "/callback-signing-key", nil, 403, []string{"get", "pools/callbacksigningkey"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := call(base, tc.tok, tc.method, tc.path, tc.body)
			require.Equal(t, tc.want, code, body)
			var e struct{ Error string }
			require.NoError(t, json.Unmarshal([]byte(body), &e), body)
			for _, c := range tc.contains {
				assert.Contains(t, e.Error, c)
			}
		})
	}
	// A streams its finished invocation: the chunks (none: a JSON answer) and the result.
	code, body = call(base, tokA, "GET", "/v1/namespaces/"+a+"/invocations/a-1/stream", nil)
	assert.Equal(t, 200, code, body)
	assert.Contains(t, body, "event: result")
	// B cannot tell A's existing invocation from a missing one, streamed or not.
	_, existingStream := call(base, tokB, "GET", "/v1/namespaces/"+a+"/invocations/a-1/stream", nil)
	_, missingStream := call(base, tokB, "GET", "/v1/namespaces/"+a+"/invocations/never-posted/stream", nil)
	assert.Equal(t, existingStream, missingStream, "same answer for an existing and a missing ID's stream")
	// B cannot tell A's existing invocation from a missing one.
	_, existing := call(base, tokB, "GET", "/v1/namespaces/"+a+"/invocations/a-1", nil)
	_, missing := call(base, tokB, "GET", "/v1/namespaces/"+a+"/invocations/never-posted", nil)
	assert.Equal(t, existing, missing, "same answer for an existing and a missing ID")
	assert.False(t, strings.Contains(existing, "a-1"))
	code, body = call(base, tokA, "GET", "/v1/namespaces/"+a+"/invocations/never-posted", nil)
	assert.Equal(t, 404, code, "A, who may read every pool of A, learns that an ID does not exist: %s", body)
}
