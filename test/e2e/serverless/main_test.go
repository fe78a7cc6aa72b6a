// Package serverless is the end-to-end test of the serverless path on the
// local control plane and test/stack: webhook (injects the sidecar), queue
// (ingress + activator, scaling the pool's Deployment) and local workers
// (each kwok Pod of a pool runs runplane-sidecar + framework-echo as
// processes), NATS with the queue's auth callout as in the chart.
package serverless

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/test/cluster"
	"github.com/runplane/runplane/test/kit"
	"github.com/runplane/runplane/test/localworkers"
	"github.com/runplane/runplane/test/stack"
	"github.com/runplane/runplane/webhook"
)

const ns = "e2e"

// st is everything the tests talk to.
var st *stack.Stack

func TestMain(m *testing.M) {
	stack.Main(m, cluster.Options{Nodes: []cluster.Node{{Name: "node-0", Pods: 200}}}, func(ctx context.Context, c *cluster.Cluster) (stack.Options, error) {
		// The whole serverless flow runs where Pod Security "restricted" is
		// enforced and a compute ResourceQuota applies (restricted_test.go).
		if err := c.CreateNamespace(ctx, ns); err != nil {
			return stack.Options{}, err
		}
		return stack.Options{
			// restricted_test.go's stock placeholders live in ns.
			Webhook: func(w *webhook.Config) { w.Injection.StockNamespaces = append(w.Injection.StockNamespaces, ns) },
			Queue: func(q *queue.Config) {
				q.InsecureDisableCallerAuth, q.Namespace = true, ns
				q.HeartbeatTimeout.Duration, q.Backoff, q.Tick = 4*time.Second, 200*time.Millisecond, 200*time.Millisecond
			},
			Workers: &localworkers.Config{
				SidecarArgs: []string{"-heartbeat-interval", "1s", "-probe-interval", "100ms", "-fetch-wait", "500ms", "-shutdown-grace", "10s", "-ack-wait", "3s"},
				Namespace:   ns, StopGrace: 15 * time.Second,
			},
		}, restrictNamespace(ctx, c, ns)
	}, func(s *stack.Stack) { st = s })
}

// pool creates a pool Deployment running framework-echo.
func pool(t testing.TB, name string, replicas int32, concurrency int, ann map[string]string) {
	t.Helper()
	labels := map[string]string{api.LabelPool: name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Annotations: ann},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{api.AnnotationConcurrency: strconv.Itoa(concurrency)}},
				Spec: corev1.PodSpec{
					Containers:                    []corev1.Container{restrictedContainer("framework", "framework-echo:e2e")},
					TerminationGracePeriodSeconds: ptr.To[int64](0),
				},
			},
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := st.Cluster.Client().AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
	require.NoError(t, err, "create pool %s", name)
	t.Cleanup(func() {
		_ = st.Cluster.Client().AppsV1().Deployments(ns).Delete(context.Background(), name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
	})
	// Let the queue learn the pool before invoking it.
	require.Eventually(t, func() bool { return kit.HTTPOK(t.Context(), st.QueueURL+"/v1/namespaces/"+ns+"/pools/"+name) }, 30*time.Second, 100*time.Millisecond,
		"queue does not know pool %s", name)
}

// invoke posts an invocation and decodes the JSON answer into out.
func invoke(t testing.TB, poolName string, body map[string]any, out any) int {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(st.QueueURL+"/v1/namespaces/"+ns+"/pools/"+poolName+"/invocations", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Errorf("invoke %s: %v", poolName, err)
		return 0
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil {
		err := json.Unmarshal(data, out)
		assert.NoError(t, err, "invoke %s: HTTP %d, body %s: %v", poolName, resp.StatusCode, data, err)
	}
	return resp.StatusCode
}

func getJSON(t *testing.T, url string, out any) int {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err, "GET %s: %v", url, err)
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	require.NoError(t, json.Unmarshal(data, out), "GET %s: HTTP %d %s", url, resp.StatusCode, data, err)
	return resp.StatusCode
}

func replicas(t *testing.T, name string) int32 {
	t.Helper()
	sc, err := st.Cluster.Client().AppsV1().Deployments(ns).GetScale(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err, "scale of %s: %v", name, err)
	return sc.Spec.Replicas
}

func poolPods(t *testing.T, name string) []corev1.Pod {
	t.Helper()
	l, err := st.Cluster.Client().CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: api.LabelPool + "=" + name})
	require.NoError(t, err)
	var out []corev1.Pod
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}
