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
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// get sends a request with a bearer token (none when empty) and returns
// status and body.
func get(t *testing.T, ctx context.Context, method, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
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
	waitInjecting(t, ctx)
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

	// No Service VIPs without kube-proxy: the Pod's own address, which the
	// host reaches over the node's bridge.
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=runplane-accessor"})
	require.NoError(t, err)
	var pod *corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && p.Spec.Volumes[0].PersistentVolumeClaim.ClaimName == "browse" {
			pod = p
		}
	}
	require.NotNil(t, pod, "no running accessor Pod of browse")
	require.Equal(t, node.Name, pod.Spec.NodeName)
	require.True(t, pod.Spec.Volumes[0].PersistentVolumeClaim.ReadOnly, "the accessor's claim is not read-only")
	require.True(t, pod.Spec.Containers[0].VolumeMounts[0].ReadOnly, "the accessor's mount is not read-only")
	base := fmt.Sprintf("http://%s:%d", pod.Status.PodIP, accessor.Port)

	reader := tokenFor(t, ctx, "browse-reader", "browse")
	stranger := tokenFor(t, ctx, "browse-stranger", "")

	status, body := get(t, ctx, http.MethodGet, base+"/files/weights/w.bin", reader)
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, "real-weights\n", body)

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
