package controllers_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/controllers/accessor"
	"github.com/runplane/runplane/internal/filebrowser"
	"github.com/runplane/runplane/internal/filebrowser/claimauth"
)

// TestAccessorAuthorizesEveryRequest runs the accessor's handler (as
// cmd/runplane-accessor builds it: the API server's address and CA file,
// no credential of its own) against the real API server: every request
// needs a bearer token whose owner may get the PVC. On BASE the accessor
// had no authentication: every request below was a 200.
func TestAccessorAuthorizesEveryRequest(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, "")
	other := ns + "-other"
	ensureNamespace(t, other)
	createPVC(t, pvc(ns, "data", nil))

	// The accessor reaches the API server with the cluster's CA, which
	// every namespace publishes in a ConfigMap (mounted by the Deployment).
	require.Eventually(t, func() bool {
		cm, err := client().CoreV1().ConfigMaps(ns).Get(ctx, accessor.RootCAConfigMap, metav1.GetOptions{})
		return err == nil && cm.Data["ca.crt"] != ""
	}, 30*time.Second, tick, "the kube-root-ca.crt ConfigMap")

	vol := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(vol, "model.bin"), []byte("weights"), 0o644))
	fb, err := filebrowser.New(vol)
	require.NoError(t, err)
	t.Cleanup(func() { _ = fb.Close() })
	rc, err := claimauth.RESTClient(&rest.Config{Host: env.RESTConfig().Host, TLSClientConfig: rest.TLSClientConfig{CAFile: env.CAFile()}})
	require.NoError(t, err)
	gate, err := claimauth.New(claimauth.Claim{Namespace: ns, Name: "data"}, claimauth.SelfReviewer{Client: rc}, claimauth.Options{})
	require.NoError(t, err)
	srv := httptest.NewServer(gate.Wrap(fb))
	t.Cleanup(srv.Close)

	// reader may get the PVC "data"; nobody has no grant; stranger may get
	// every PVC of its own namespace.
	reader := serviceAccountToken(t, ns, "reader")
	nobody := serviceAccountToken(t, ns, "nobody")
	stranger := serviceAccountToken(t, other, "stranger")
	grantGetPVC(t, ns, "reader", ns, "reader", []string{"data"})
	grantGetPVC(t, other, "all-pvcs", other, "stranger", nil)

	type answer struct {
		status int
		body   string
	}
	call := func(path, token string) answer {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return answer{resp.StatusCode, string(b)}
	}
	cases := []struct {
		name   string
		path   string
		token  string
		status int
		want   string
	}{
		{name: "no token", path: "/files/model.bin", status: 401, want: "bearer token is required"},
		{name: "forged token", path: "/files/model.bin", token: "not-a-token", status: 401, want: "not accepted"},
		{name: "health needs a token too", path: "/healthz", status: 401, want: "bearer token is required"},
		{name: "no get on the PVC", path: "/files/model.bin", token: nobody, status: 403,
			want: `cannot get persistentvolumeclaims \"data\" in namespace \"` + ns + `\"`},
		{name: "another namespace's token", path: "/archive/", token: stranger, status: 403, want: "cannot get persistentvolumeclaims"},
		{name: "granted", path: "/files/model.bin", token: reader, status: 200, want: "weights"},
		{name: "granted listing", path: "/files/?format=json", token: reader, status: 200, want: `"model.bin"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := call(tc.path, tc.token)
			assert.Equal(t, tc.status, got.status, got.body)
			assert.Contains(t, got.body, tc.want)
			if tc.status != 200 {
				var e map[string]string
				assert.NoError(t, json.Unmarshal([]byte(got.body), &e), "a JSON error body")
				assert.NotContains(t, got.body, "weights")
			}
		})
	}

	// A RoleBinding granted later takes effect within the deny TTL (2s).
	grantGetPVC(t, ns, "nobody", ns, "nobody", []string{"data"})
	assert.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 200, call("/files/model.bin", nobody).status)
	}, 10*time.Second, 200*time.Millisecond, "the new grant honoured")
}

func serviceAccountToken(t *testing.T, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	_, err := client().CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	tr, err := client().CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return tr.Status.Token
}

// grantGetPVC lets saNS/sa get the PVCs named (all when names is nil) in ns.
func grantGetPVC(t *testing.T, ns, role, saNS, sa string, names []string) {
	t.Helper()
	ctx := context.Background()
	_, err := client().RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"get"}, ResourceNames: names}}},
		metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = client().RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: saNS, Name: sa}}}, metav1.CreateOptions{})
	require.NoError(t, err)
}
