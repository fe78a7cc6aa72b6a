package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/controllers/accessor"
)

// tokenFor makes ServiceAccount name in ns, optionally allowed to get PVC
// claim, and returns a short-lived token of it.
func tokenFor(t *testing.T, ctx context.Context, name, claim string) string {
	t.Helper()
	c := env.Client()
	_, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	if claim != "" {
		_, err = c.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, ResourceNames: []string{claim}, Verbs: []string{"get"}}}},
			metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = c.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	tr, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return tr.Status.Token
}

// fetch sends a request with a bearer token (none when empty) and returns
// status and body.
func fetch(ctx context.Context, method, url, token string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// get is fetch that ends the test on a transport error.
func get(t *testing.T, ctx context.Context, method, url, token string) (int, string) {
	t.Helper()
	status, body, err := fetch(ctx, method, url, token)
	require.NoError(t, err)
	return status, body
}

// The accessor of a PVC prepared on the real node runs there (the
// runplane image's runplane-accessor, the volume mounted read-only) and
// serves the prepared files to a token allowed to get the PVC — asking the
// real API server, which it reaches at the kubernetes Service like any Pod
// — and to no one else; it changes nothing.
func TestAccessorServesPreparedVolumeOnRealNode(t *testing.T) {
	need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := env.Client()
	pvc := fromImage(t, "browse")
	pvc.Annotations[api.AnnotationAccessor] = "enabled"
	_, err := c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{})
	require.NoError(t, err)
	waitPrepared(t, ctx, "browse")

	var got *corev1.PersistentVolumeClaim
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		got, err = c.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "browse", metav1.GetOptions{})
		return err == nil && got.Annotations[api.AnnotationAccessorPhase] == api.AccessorReady, err
	})
	require.NoError(t, err, "the accessor never became Ready: %v", got.Annotations)
	require.Equal(t, fmt.Sprintf("http://accessor-browse.%s.svc.cluster.local/", ns), got.Annotations[api.AnnotationAccessorURL])

	// Service VIPs live in the node's network namespace (kube-proxy), not
	// on the host: the Pod's own address, which the host routes to the node. The Deployment may still be
	// rolling out (the accessor is pinned to the node of a Pod mounting
	// the RWO claim, the prepare Job's, once there is one): wait until one
	// accessor Pod of the claim is left, Running, and it answers.
	// The accessor's NetworkPolicy admits Pods only, and the node enforces
	// it; this test asks from the host, which it admits with a policy of its
	// own (policies add up).
	admitHostToAccessor(t, ctx)
	reader := tokenFor(t, ctx, "browse-reader", "browse")
	var pod *corev1.Pod
	var status int
	var body string
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=runplane-accessor"})
		if err != nil {
			return false, err
		}
		var mine []*corev1.Pod
		for i := range pods.Items {
			if p := &pods.Items[i]; p.Spec.Volumes[0].PersistentVolumeClaim.ClaimName == "browse" {
				mine = append(mine, p)
			}
		}
		if len(mine) != 1 || mine[0].Status.Phase != corev1.PodRunning || mine[0].DeletionTimestamp != nil {
			return false, nil
		}
		pod = mine[0]
		status, body, err = fetch(ctx, http.MethodGet, fmt.Sprintf("http://%s:%d/files/weights/w.bin", pod.Status.PodIP, accessor.Port), reader)
		return err == nil && status == http.StatusOK, nil
	})
	require.NoError(t, err, "the accessor never served the file (last: %d %s)", status, body)
	require.Equal(t, "real-weights\n", body)
	require.Equal(t, node.Name, pod.Spec.NodeName)
	require.True(t, pod.Spec.Volumes[0].PersistentVolumeClaim.ReadOnly, "the accessor's claim is not read-only")
	require.True(t, pod.Spec.Containers[0].VolumeMounts[0].ReadOnly, "the accessor's mount is not read-only")
	base := fmt.Sprintf("http://%s:%d", pod.Status.PodIP, accessor.Port)

	stranger := tokenFor(t, ctx, "browse-stranger", "")

	status, body = get(t, ctx, http.MethodGet, base+"/files/?format=json", reader)
	require.Equal(t, http.StatusOK, status, body)
	var listing struct {
		Entries []struct{ Name, Type, Mode string } `json:"entries"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &listing), body)
	var names []string
	for _, e := range listing.Entries {
		names = append(names, e.Name)
	}
	require.ElementsMatch(t, []string{"README", "weights"}, names, body)

	// Refused: no token (401), a token whose owner may not get the PVC
	// (403, decided by the API server), and any write (405).
	status, body = get(t, ctx, http.MethodGet, base+"/files/README", "")
	require.Equal(t, http.StatusUnauthorized, status, body)
	status, body = get(t, ctx, http.MethodGet, base+"/files/README", stranger)
	require.Equal(t, http.StatusForbidden, status, body)
	require.Contains(t, body, "browse")
	for _, m := range []string{http.MethodPut, http.MethodPost, http.MethodDelete} {
		status, body = get(t, ctx, m, base+"/files/README", reader)
		require.Equal(t, http.StatusMethodNotAllowed, status, "%s: %s", m, body)
	}
	status, body = get(t, ctx, http.MethodGet, base+"/files/README", reader)
	require.Equal(t, http.StatusOK, status, body)
	require.True(t, strings.HasPrefix(body, "hello from the image"), body)
}

// admitHostToAccessor lets the host (this test) reach the accessors of ns.
func admitHostToAccessor(t *testing.T, ctx context.Context) {
	t.Helper()
	port := intstr.FromInt32(accessor.Port)
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-host-to-accessor"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "runplane-accessor"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: node.HostIP + "/32"}}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: &port}},
			}},
		},
	}
	_, err := env.Client().NetworkingV1().NetworkPolicies(ns).Create(ctx, np, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = env.Client().NetworkingV1().NetworkPolicies(ns).Delete(context.Background(), np.Name, metav1.DeleteOptions{})
	})
}
