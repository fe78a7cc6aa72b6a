package realnode

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/runplane/runplane/test/cluster"
)

// Pods on the real node have what the chart's Pods need: cluster DNS, the
// apiserver behind the kubernetes Service, and other Pods behind their
// Services by name — and the kubelet stays out of their reach.
func TestServicesAndDNSFromPods(t *testing.T) {
	need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := env.Client()

	web := realPod("web", "mkdir -p /www && echo hello-from-web > /www/index.html && exec httpd -f -p 8080 -h /www", 0)
	web.Labels = map[string]string{"app": "web"}
	web.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
		PeriodSeconds: 1,
	}
	_, err := c.CoreV1().Pods(ns).Create(ctx, web, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.ServiceSpec{Selector: web.Labels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.CoreV1().Services(ns).Delete(context.Background(), "web", metav1.DeleteOptions{})
		_ = c.CoreV1().Pods(ns).Delete(context.Background(), "web", metav1.DeleteOptions{})
	})
	waitReady(t, ctx, "web")

	svc, err := c.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	// Each step prints a marker only when it worked (busybox's wget crashes
	// in Debian's static build, so nc speaks plain TCP and HTTP/1.0); the
	// kubelet probe prints one either way: the connection must fail.
	script := `set -u
nslookup kubernetes.default.svc.` + cluster.ClusterDomain + ` && echo dns-ok
nslookup web.` + ns + `.svc.` + cluster.ClusterDomain + `
nc -w 5 10.96.0.1 443 </dev/null && echo apiserver-ok
printf 'GET /index.html HTTP/1.0\r\n\r\n' | nc -w 5 ` + svc.Spec.ClusterIP + ` 80 | tail -n 1 && echo service-ok
if nc -w 3 ` + node.InternalIP + ` 10250 </dev/null; then echo kubelet-reachable; else echo kubelet-refused; fi
echo done`
	client := realPod("client", script, 0)
	_, err = c.CoreV1().Pods(ns).Create(ctx, client, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.CoreV1().Pods(ns).Delete(context.Background(), "client", metav1.DeleteOptions{}) })
	log := logsWhen(t, ctx, ns, "client", "done")
	assert.Contains(t, log, "dns-ok", "cluster DNS")
	assert.Contains(t, log, "10.96.0.1", "kubernetes.default.svc resolves to the Service's ClusterIP")
	assert.Contains(t, log, "\napiserver-ok", "the apiserver through the kubernetes Service")
	assert.Contains(t, log, "Name:\tweb."+ns+".svc."+cluster.ClusterDomain+"\nAddress: "+svc.Spec.ClusterIP, "a Service resolves to its ClusterIP")
	assert.Contains(t, log, "hello-from-web\nservice-ok", "a Pod through its Service's ClusterIP")
	assert.Contains(t, log, "kubelet-refused", "a Pod reached the kubelet's API")
}

// waitReady waits until Pod name in ns is Ready.
func waitReady(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p, err := env.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		require.NoError(c, err)
		ready := false
		for _, cond := range p.Status.Conditions {
			ready = ready || (cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue)
		}
		assert.True(c, ready, "pod %s not Ready: %s", name, p.Status.Phase)
	}, 2*time.Minute, 200*time.Millisecond)
}
