package kubetest_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/internal/callerauth"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/queuetest"
	"github.com/runplane/runplane/test/natsauth"
)

// TestCreateOnlyCallerCannotReadResults: a caller who may only create
// invocations of a pool gets 403 naming get when it re-posts another
// caller's invocation ID in sync mode (which would answer with the stored
// Record); an async re-post (an ack, no result) stays allowed, and the
// owner, who may get, reads its Record that way.
func TestCreateOnlyCallerCannotReadResults(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := "readback"
	require.NoError(t, env.CreateNamespace(ctx, ns))
	for name, verbs := range map[string][]string{"owner": {"create", "get", "update"}, "writer": {"create"}} {
		_, err := env.Client().RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{callerauth.Group}, Resources: []string{"pools/invocations"}, Verbs: verbs}}},
			metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = env.Client().RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	owner, writer := saToken(t, ns, "owner"), saToken(t, ns, "writer")
	_, err := env.Client().AppsV1().Deployments(ns).Create(ctx, deployment(ns, "workers", "echo", 0), metav1.CreateOptions{})
	require.NoError(t, err)

	srv := natsauth.JetStream(t, nil)
	base := queuetest.Run(t, queue.Config{NATS: queue.NATS{URL: srv.ClientURL()}, RESTConfig: env.RESTConfig(), Namespace: ns, DisableActivator: true}).Base
	invoke := "/v1/namespaces/" + ns + "/pools/echo/invocations"

	// The owner's invocation, made terminal (cancelled) so that a sync
	// re-post answers with its Record at once.
	require.Eventually(t, func() bool {
		code, _ := call(base, owner, "POST", invoke, map[string]any{"mode": "async", "invocationID": "secret-1"})
		return code == http.StatusAccepted
	}, 60*time.Second, 200*time.Millisecond, "the owner invokes")
	code, body := call(base, owner, "POST", "/v1/namespaces/"+ns+"/invocations/secret-1/cancel", nil)
	require.Equal(t, http.StatusOK, code, body)
	require.Eventually(t, func() bool {
		code, _ := call(base, writer, "POST", invoke, map[string]any{"mode": "async"})
		return code == http.StatusAccepted
	}, 60*time.Second, 200*time.Millisecond, "the writer invokes")

	code, body = call(base, writer, "POST", invoke, map[string]any{"mode": "sync", "invocationID": "secret-1", "timeoutSeconds": 1})
	assert.Equal(t, http.StatusForbidden, code, body)
	assert.Contains(t, body, "cannot get pools/invocations")
	assert.NotContains(t, body, "cancelled by request", "no Record in the refusal")

	code, body = call(base, writer, "POST", invoke, map[string]any{"mode": "async", "invocationID": "secret-1"})
	assert.Equal(t, http.StatusAccepted, code, "an async re-post is only an ack: %s", body)
	assert.NotContains(t, body, "cancelled by request")

	code, body = call(base, owner, "POST", invoke, map[string]any{"mode": "sync", "invocationID": "secret-1", "timeoutSeconds": 1})
	assert.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, "cancelled by request")
}
