package helmnode

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/hack/images"
	"github.com/runplane/runplane/test/cluster"
	"github.com/runplane/runplane/test/e2e/netprobe"
)

// chartPolicies proves the policies the chart installs on a node that
// enforces them (test/cluster runs kube-network-policies): from a tenant's
// plain Pod, its NetworkPolicies refuse NATS (client port: not a pool Pod;
// monitor port) and the queue's metrics port, and admit the
// queue's ingress (networkPolicy.queue.from is everyone); from a tenant's
// pool-like Pod (runplane.io/egress: restricted), its AdminNetworkPolicy
// runplane-egress admits the cluster DNS and refuses the apiserver and the
// queue. The helm test's invocation already showed a pool Pod reaching
// NATS's client port under both. One NATS server opens no cluster port
// (6222), so nothing here can show its policy: TestEgressOfPoolPods covers
// that port against runplane-egress. With networkPolicy.enabled=false the
// plain Pod reaches every refused target.
func chartPolicies(ctx context.Context, t *testing.T) {
	const tenant = "team-probe"
	require.NoError(t, env.CreateNamespace(ctx, tenant))
	t.Cleanup(func() {
		_ = env.Client().CoreV1().Namespaces().Delete(context.Background(), tenant, metav1.DeleteOptions{})
	})
	natsIP, _ := componentPod(ctx, t, "nats", "client")
	queueIP, queuePorts := componentPod(ctx, t, "queue", "http", "metrics")
	kube, err := env.Client().CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	require.NoError(t, err)
	apiserver := netprobe.TCP(kube.Spec.ClusterIP, int(kube.Spec.Ports[0].Port))

	plain := []netprobe.Target{
		netprobe.Allow("apiserver", apiserver),
		netprobe.Allow("queue-http", netprobe.TCP(queueIP, queuePorts["http"])),
		netprobe.Deny("queue-metrics", netprobe.TCP(queueIP, queuePorts["metrics"])),
		netprobe.Deny("nats-client", netprobe.TCP(natsIP, 4222)),
		netprobe.Deny("nats-monitor", netprobe.TCP(natsIP, 8222)),
	}
	pool := []netprobe.Target{
		netprobe.Allow("dns", "nslookup kubernetes.default.svc."+cluster.ClusterDomain+" >/dev/null 2>&1"),
		netprobe.Deny("apiserver", apiserver),
		netprobe.Deny("queue-http", netprobe.TCP(queueIP, queuePorts["http"])),
	}
	probers := []struct {
		name    string
		labels  map[string]string
		targets []netprobe.Target
	}{
		{"plain", nil, plain},
		{"pool", map[string]string{api.LabelEgress: api.EgressRestricted}, pool},
	}
	for _, pr := range probers {
		_, err := env.Client().CoreV1().Pods(tenant).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: pr.name, Labels: pr.labels},
			Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "main", Image: images.UserRef, ImagePullPolicy: corev1.PullNever,
					Command: []string{"sh", "-c", netprobe.Script(pr.targets)}}},
				NodeSelector:  map[string]string{cluster.RealNodeLabel: "true"},
				Tolerations:   []corev1.Toleration{cluster.RealNodeToleration},
				RestartPolicy: corev1.RestartPolicyNever,
			},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	for _, pr := range probers {
		p := &netprobe.Probe{T: t, Client: env.Client(), NS: tenant, Pod: pr.name}
		p.Expect(ctx, pr.name+" Pod under the chart's policies", netprobe.Want(pr.targets)...)
	}
}

// componentPod is the IP of the release's first Pod of component and the
// container ports it names.
func componentPod(ctx context.Context, t *testing.T, component string, ports ...string) (string, map[string]int) {
	t.Helper()
	pods, err := env.Client().CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/component=" + component + ",app.kubernetes.io/instance=" + release})
	require.NoError(t, err)
	require.NotEmpty(t, pods.Items, "no %s Pod in %s", component, releaseNS)
	pod := pods.Items[0]
	got := map[string]int{}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			got[p.Name] = int(p.ContainerPort)
		}
	}
	for _, name := range ports {
		require.NotZero(t, got[name], "%s Pod %s names no port %s", component, pod.Name, name)
	}
	require.NotEmpty(t, pod.Status.PodIP, "%s Pod %s has no IP", component, pod.Name)
	return pod.Status.PodIP, got
}
