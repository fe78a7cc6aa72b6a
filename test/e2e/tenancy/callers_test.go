package tenancy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/internal/callerauth"
	"github.com/runplane/runplane/internal/refusal"
)

// TestCallersAuthorizedByRBAC: a tenant grants invoke rights with an
// ordinary Role; another tenant's token, a forged token and no token are
// refused with 403, 401 and 401.
func TestCallersAuthorizedByRBAC(t *testing.T) {
	ctx := context.Background()
	tenant(t, "caller-a", "client")
	tenant(t, "caller-b", "client")
	_, err := env.Client().RbacV1().Roles("caller-a").Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "invoke-echo"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{callerauth.Group}, Resources: []string{"pools/invocations"},
			ResourceNames: []string{"echo"}, Verbs: []string{"create", "get"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = env.Client().RbacV1().RoleBindings("caller-a").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "invoke-echo"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "invoke-echo"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "caller-a", Name: "client"}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	// A short deny cache: the first checks may run before RBAC has seen the new binding.
	gate, err := callerauth.New(env.Client(), callerauth.Options{DenyCacheTTL: 200 * time.Millisecond})
	require.NoError(t, err)
	tokenA := token(t, "caller-a", "client", nil, nil)
	tokenB := token(t, "caller-b", "client", nil, nil)
	invoke := func(pool string) callerauth.Request {
		return callerauth.Request{Verb: "create", Namespace: "caller-a", Pool: pool, Subresource: callerauth.SubresourceInvocations}
	}
	cases := []struct {
		name       string
		token      string
		req        callerauth.Request
		wantStatus int // 0: allowed
	}{
		{name: "own pool", token: tokenA, req: invoke("echo")},
		{name: "pool not granted", token: tokenA, req: invoke("other"), wantStatus: http.StatusForbidden},
		{name: "cancel not granted", token: tokenA, req: callerauth.Request{Verb: "delete", Namespace: "caller-a", Pool: "echo",
			Subresource: callerauth.SubresourceInvocations}, wantStatus: http.StatusForbidden},
		{name: "another tenant", token: tokenB, req: invoke("echo"), wantStatus: http.StatusForbidden},
		{name: "forged token", token: tokenA[:len(tokenA)-8] + "AAAAAAAA", req: invoke("echo"), wantStatus: http.StatusUnauthorized},
		{name: "no token", req: invoke("echo"), wantStatus: http.StatusUnauthorized},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/", nil)
			if tc.token != "" {
				r.Header.Set("Authorization", "Bearer "+tc.token)
			}
			// RBAC caches of a fresh RoleBinding settle within a moment.
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				u, err := gate.Check(r.Clone(ctx), tc.req)
				if tc.wantStatus == 0 {
					require.NoError(c, err)
					assert.Equal(c, "system:serviceaccount:caller-a:client", u.GetName())
					return
				}
				var ref *refusal.Error
				require.ErrorAs(c, err, &ref)
				assert.Equal(c, tc.wantStatus, ref.Status)
			}, 10*time.Second, 100*time.Millisecond)
		})
	}
}
