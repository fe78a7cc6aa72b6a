package helmnode

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
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/hack/images"
	"github.com/runplane/runplane/test/cluster"
)

// invokeFromHost: a tenant's pool at zero (framework-echo), a ServiceAccount
// bound to the chart's runplane-invoker, and one sync invocation POSTed by
// the test process to the installed queue at its Pod's IP (the host routes
// the node's Pod subnet), with the ServiceAccount's token; without a token
// the ingress answers 401.
func invokeFromHost(ctx context.Context, t *testing.T) {
	const tenant, pool, caller = "team-host", "echo", "caller"
	client := env.Client()
	require.NoError(t, env.CreateNamespace(ctx, tenant))
	_, err := client.CoreV1().ServiceAccounts(tenant).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: caller}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = client.RbacV1().RoleBindings(tenant).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: caller},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "runplane-invoker"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: caller, Namespace: tenant}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	labels := map[string]string{api.LabelPool: pool}
	_, err = client.AppsV1().Deployments(tenant).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: pool, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers:                    []corev1.Container{{Name: "framework", Image: images.EchoRef, ImagePullPolicy: corev1.PullNever}},
					NodeSelector:                  map[string]string{cluster.RealNodeLabel: "true"},
					Tolerations:                   []corev1.Toleration{cluster.RealNodeToleration},
					TerminationGracePeriodSeconds: ptr.To[int64](1),
				},
			},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	tr, err := client.CoreV1().ServiceAccounts(tenant).CreateToken(ctx, caller, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	require.NoError(t, err)

	pods, err := client.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release + ",app.kubernetes.io/component=queue"})
	require.NoError(t, err)
	require.NotEmpty(t, pods.Items, "no queue Pod")
	base := fmt.Sprintf("http://%s:8080/v1/namespaces/%s/pools/%s", pods.Items[0].Status.PodIP, tenant, pool)
	call := func(method, url, token, body string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := (&http.Client{Timeout: 3 * time.Minute}).Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}

	code, body := call(http.MethodPost, base+"/invocations", "", `{"mode":"sync","payload":{}}`)
	require.Equal(t, http.StatusUnauthorized, code, "an invocation without a token: %s", body)
	// The queue learns pools from its informer: wait until it serves this one.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		code, body = call(http.MethodGet, base, tr.Status.Token, "")
		return code == http.StatusOK, nil
	})
	require.NoError(t, err, "the queue never served pool %s/%s: %d %s", tenant, pool, code, body)
	began := time.Now()
	code, body = call(http.MethodPost, base+"/invocations", tr.Status.Token, `{"mode":"sync","timeoutSeconds":120,"payload":{"from":"the host"}}`)
	t.Logf("sync invocation from the host (%s, the pool scaled from zero): %d %s", time.Since(began).Round(time.Millisecond), code, body)
	require.Equal(t, http.StatusOK, code, body)
	var rec struct {
		State    string `json:"state"`
		Worker   string `json:"worker"`
		Response struct {
			Body struct {
				Payload         map[string]string `json:"payload"`
				WorkerNamespace string            `json:"workerNamespace"`
			} `json:"body"`
		} `json:"response"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &rec))
	require.Equal(t, "succeeded", rec.State)
	require.Equal(t, "the host", rec.Response.Body.Payload["from"], "the echo of the payload")
	require.Equal(t, tenant, rec.Response.Body.WorkerNamespace)
	worker, err := client.CoreV1().Pods(tenant).Get(ctx, rec.Worker, metav1.GetOptions{})
	require.NoError(t, err, "the worker %q that answered", rec.Worker)
	require.Equal(t, env.RealNodes()[0].Name, worker.Spec.NodeName, "the worker ran on the real node")
}

// gpuTakeover: with every GPU of the node held by a stock placeholder, a
// Pod labelled runplane.io/gpu-spec: rn1 as a user writes it goes through
// the installed webhook (the spec's GPU, CPU, memory, placement and the
// runplane-scheduler) and the chart's scheduler and extender, which give it
// a placeholder's GPU: it runs on the node and one placeholder fewer does.
func gpuTakeover(ctx context.Context, t *testing.T) {
	const tenant = "team-gpu"
	client := env.Client()
	require.NoError(t, env.CreateNamespace(ctx, tenant))
	_, err := client.CoreV1().Pods(tenant).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "train", Labels: map[string]string{api.LabelGPUSpec: "rn1"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "main", Image: images.UserRef, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", "exec sleep 3600"}}},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	var pod *corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pod, err = client.CoreV1().Pods(tenant).Get(ctx, "train", metav1.GetOptions{})
		return err == nil && pod.Status.Phase == corev1.PodRunning, nil
	})
	require.NoError(t, err, "the GPU Pod never ran")
	require.Equal(t, "runplane-scheduler", pod.Spec.SchedulerName, "the webhook's scheduler")
	require.Equal(t, env.RealNodes()[0].Name, pod.Spec.NodeName)
	gpus := pod.Spec.Containers[0].Resources.Limits[api.DefaultGPUResource]
	require.EqualValues(t, 1, gpus.Value(), "the spec's GPU, injected by the webhook")
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(stockNS).List(ctx, metav1.ListOptions{LabelSelector: "runplane.io/stock=rn1"})
		if err != nil {
			return false, nil
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				running++
			}
		}
		return running == cluster.RealNodeGPUs-1, nil
	})
	require.NoError(t, err, "want %d placeholders running after the takeover", cluster.RealNodeGPUs-1)
}
