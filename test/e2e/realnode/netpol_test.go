package realnode

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/runplane/runplane/test/cluster"
	"github.com/runplane/runplane/test/e2e/netprobe"
)

// The real node enforces NetworkPolicy, AdminNetworkPolicy and
// BaselineAdminNetworkPolicy (test/cluster runs kube-network-policies on
// it). Without the enforcer these tests fail: with its iptables rules but
// no enforcer every new Pod connection is dropped (the "works without the
// policy" steps fail), and without the rules nothing is ever blocked (the
// "blocked" barriers time out).

// netpolServer serves hello-netpol over HTTP on 8080 and prints what one
// client sends to 9090 (its input never ends: busybox nc quits at the end
// of its input).
const netpolServer = `mkdir -p /www && echo hello-netpol > /www/index.html && httpd -p 8080 -h /www && sleep 3600 | nc -l -p 9090`

// getHello is a shell condition: a new connection to ip:8080 gets the page.
func getHello(ip string) string {
	return `printf 'GET /index.html HTTP/1.0\r\n\r\n' | nc -w 2 ` + ip + ` 8080 2>/dev/null | grep -q hello-netpol`
}

// A namespace's default-deny-ingress NetworkPolicy blocks new connections
// to its Pods that worked before it, and leaves established ones alone.
func TestNetworkPolicyDeniesIngressButKeepsEstablishedConnections(t *testing.T) {
	need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	srvNS, cliNS := netpolNamespace(t, ctx, "np-ingress-srv"), netpolNamespace(t, ctx, "np-ingress-cli")
	srv := startNetpolServer(t, ctx, srvNS)

	// The client checks a new connection works, opens a long one and says
	// "first" on it, then waits until new connections are blocked (the
	// barrier: the policy is enforced) and says "second" on the old one.
	script := `if ` + getHello(srv) + `; then echo before-ok; else echo before-fail; fi
( echo first; until ! ` + getHello(srv) + `; do sleep 0.3; done; echo blocked-now >&2; echo second; sleep 5 ) | nc ` + srv + ` 9090
echo client-done`
	createPod(t, ctx, cliNS, realPod("client", script, 0))
	require.Contains(t, logsWhen(t, ctx, cliNS, "client", "before-"), "before-ok", "a new connection without any policy")
	logsWhen(t, ctx, srvNS, "server", "first")

	_, err := env.Client().NetworkingV1().NetworkPolicies(srvNS).Create(ctx, &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "default-deny-ingress"},
		Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	logsWhen(t, ctx, cliNS, "client", "blocked-now")
	t.Log(logsWhen(t, ctx, cliNS, "client", "client-done"))
	require.Contains(t, logsWhen(t, ctx, srvNS, "server", "second"), "first\nsecond", "the established connection carried on")
}

// Egress: a namespace's NetworkPolicy blocks; a BaselineAdminNetworkPolicy
// Deny blocks until the tenant allows the traffic with its own
// NetworkPolicy; an AdminNetworkPolicy Deny blocks even then. Cluster DNS
// works throughout.
func TestEgressDeniedByNetworkPolicyAndAdminNetworkPolicyDespiteTenantAllowAll(t *testing.T) {
	need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	srvNS, tenant := netpolNamespace(t, ctx, "np-egress-srv"), netpolNamespace(t, ctx, "np-egress-tenant")
	srv := startNetpolServer(t, ctx, srvNS)

	// Rounds of: a new connection to the server, a cluster DNS lookup.
	prober := `i=0
while true; do
  i=$((i+1))
  if ` + getHello(srv) + `; then echo "R $i srv ok"; else echo "R $i srv fail"; fi
  if nslookup kubernetes.default.svc.` + cluster.ClusterDomain + ` >/dev/null 2>&1; then echo "R $i dns ok"; else echo "R $i dns fail"; fi
  sleep 0.2
done`
	createPod(t, ctx, tenant, realPod("prober", prober, 0))
	p := &netprobe.Probe{T: t, Client: env.Client(), NS: tenant, Pod: "prober"}
	p.Expect(ctx, "no policy", "srv ok", "dns ok")

	p.Mark(ctx)
	nps := env.Client().NetworkingV1().NetworkPolicies(tenant)
	// Egress only to DNS (port 53) in the cluster DNS's namespace.
	udp, tcp, dnsPort := corev1.ProtocolUDP, corev1.ProtocolTCP, intstr.FromInt32(53)
	_, err := nps.Create(ctx, &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "egress-dns-only"},
		Spec: networkingv1.NetworkPolicySpec{
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "kube-system"}},
				}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dnsPort}, {Protocol: &tcp, Port: &dnsPort}},
			}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	p.Expect(ctx, "namespace egress NetworkPolicy", "srv fail", "dns ok")
	p.Mark(ctx)
	require.NoError(t, nps.Delete(ctx, "egress-dns-only", metav1.DeleteOptions{}))
	p.Expect(ctx, "policy deleted", "srv ok", "dns ok")

	denyToServer := fmt.Sprintf(`
subject: {namespaces: {matchLabels: {%[1]s: %[2]s}}}
egress:
- name: deny-server
  action: Deny
  to: [{namespaces: {matchLabels: {%[1]s: %[3]s}}}]`, corev1.LabelMetadataName, tenant, srvNS)
	p.Mark(ctx)
	createPolicyAPI(t, ctx, "baselineadminnetworkpolicies", "BaselineAdminNetworkPolicy", "default", denyToServer)
	p.Expect(ctx, "BaselineAdminNetworkPolicy Deny", "srv fail", "dns ok")

	allowAll := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant-allow-all"},
		Spec: networkingv1.NetworkPolicySpec{
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{}},
		},
	}
	p.Mark(ctx)
	_, err = nps.Create(ctx, allowAll, metav1.CreateOptions{})
	require.NoError(t, err)
	p.Expect(ctx, "tenant allow-all over the baseline (the tenant may lift a baseline)", "srv ok", "dns ok")

	p.Mark(ctx)
	createPolicyAPI(t, ctx, "adminnetworkpolicies", "AdminNetworkPolicy", "e2e-deny-"+tenant, "priority: 10\n"+denyToServer)
	p.Expect(ctx, "AdminNetworkPolicy Deny despite the tenant's allow-all", "srv fail", "dns ok")
}

// netpolNamespace creates a namespace for one test, deleted after it.
func netpolNamespace(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	require.NoError(t, env.CreateNamespace(ctx, name))
	t.Cleanup(func() {
		_ = env.Client().CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

func createPod(t *testing.T, ctx context.Context, ns string, pod *corev1.Pod) {
	t.Helper()
	_, err := env.Client().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
}

// startNetpolServer runs netpolServer as Pod "server" in ns and returns its IP
// once it is Ready.
func startNetpolServer(t *testing.T, ctx context.Context, ns string) string {
	t.Helper()
	return startServerPod(t, ctx, realPod("server", netpolServer, 0), ns, 8080)
}

// startServerPod creates pod in ns and returns its IP once it listens on
// readyPort.
func startServerPod(t *testing.T, ctx context.Context, pod *corev1.Pod, ns string, readyPort int32) string {
	t.Helper()
	pod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(readyPort)}},
		PeriodSeconds: 1,
	}
	createPod(t, ctx, ns, pod)
	var ip string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := env.Client().CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ip = p.Status.PodIP
				return ip != "", nil
			}
		}
		return false, nil
	})
	require.NoError(t, err, "%s in %s never Ready", pod.Name, ns)
	return ip
}

// createPolicyAPI creates a cluster-scoped policy.networking.k8s.io/v1alpha1
// object with spec (YAML), deleted after the test.
func createPolicyAPI(t *testing.T, ctx context.Context, resource, kind, name, spec string) {
	t.Helper()
	var s map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(spec), &s))
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "policy.networking.k8s.io/v1alpha1", "kind": kind,
		"metadata": map[string]any{"name": name}, "spec": s,
	}}
	dyn, err := dynamic.NewForConfig(env.RESTConfig())
	require.NoError(t, err)
	r := dyn.Resource(schema.GroupVersionResource{Group: "policy.networking.k8s.io", Version: "v1alpha1", Resource: resource})
	_, err = r.Create(ctx, obj, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Delete(context.Background(), name, metav1.DeleteOptions{}) })
}
