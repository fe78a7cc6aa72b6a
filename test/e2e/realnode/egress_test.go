package realnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/test/cluster"
	"github.com/runplane/runplane/test/e2e/netprobe"
)

// closingListener accepts and closes every connection until the test ends.
func closingListener(t *testing.T, ln net.Listener) int {
	t.Helper()
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err == nil {
				_ = c.Close()
			}
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// nodeAddress adds addr/32 to the node's loopback for the test.
func nodeAddress(t *testing.T, addr string) {
	t.Helper()
	remove, err := node.AddLocalAddress(addr + "/32")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, remove()) })
}

// nodeListener listens on the node's addr:port for the test.
func nodeListener(t *testing.T, addr string, port int) int {
	t.Helper()
	ln, err := node.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(port)))
	require.NoError(t, err)
	return closingListener(t, ln)
}

// TestEgressOfPoolPods: a pool Pod (runplane.io/egress: restricted) of a
// tenant, under the product's AdminNetworkPolicy (test/stack's
// restrictEgress), reaches NATS's client port (the stack's NATS on the
// host by its CIDR, and a Pod labelled as NATS), the cluster DNS and the
// public internet, and nothing else the issue names: cloud metadata at
// 169.254.169.254, another tenant's Pod, NATS's monitor and cluster ports,
// the kubelet and any other port of the node, a port-53 listener that is
// not the cluster DNS, a private address outside the allowed set (the
// host's, another port). The same again once the tenant adds its own
// allow-all egress NetworkPolicy: in networkPolicy mode that policy lifted
// every denial (checked by hand: see SECURITY.md).
//
// The node enforces what it queues (test/cluster realnode_netpol.go): its
// Pods' forwarded connections and those they open to the node itself.
func TestEgressOfPoolPods(t *testing.T) {
	need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	tenant, other := netpolNamespace(t, ctx, "egress-tenant"), netpolNamespace(t, ctx, "egress-other")
	otherPod := startNetpolServer(t, ctx, other)

	// A Pod labelled as the NATS Pods, in their namespace, listening on
	// the client port and NATS's monitor (8222) and cluster (6222) ports.
	natsPort := int(egressSettings.NATS.Port)
	lookalike := realPod("egress-nats", fmt.Sprintf("mkdir -p /www && httpd -p 8222 -h /www && httpd -p 6222 -h /www && httpd -p %d -h /www && sleep 3600", natsPort), 0)
	lookalike.Labels = egressSettings.NATS.PodLabels
	natsNS := egressSettings.NATS.Namespace
	natsPod := startServerPod(t, ctx, lookalike, natsNS, int32(natsPort))
	t.Cleanup(func() {
		_ = env.Client().CoreV1().Pods(natsNS).Delete(context.Background(), lookalike.Name, metav1.DeleteOptions{})
	})

	// Listeners of the node (its namespace): cloud metadata, a public
	// address (TEST-NET-2, in no denied range) with a DNS port and
	// another, the node's own address.
	const metadata, public = "169.254.169.254", "198.51.100.53"
	nodeAddress(t, metadata)
	nodeAddress(t, public)
	nodeListener(t, metadata, 80)
	nodeListener(t, public, 53)
	publicPort := nodeListener(t, public, 8053)
	nodePort := nodeListener(t, node.InternalIP, 0)
	// The host, where NATS listens: another port of the same address.
	hostLn, err := net.Listen("tcp", net.JoinHostPort(node.HostIP, "0"))
	require.NoError(t, err)
	hostPort := closingListener(t, hostLn)

	targets := []netprobe.Target{
		netprobe.Allow("nats", netprobe.TCP(node.HostIP, natsPort)),
		netprobe.Allow("nats-pod", netprobe.TCP(natsPod, natsPort)),
		netprobe.Allow("dns", "nslookup kubernetes.default.svc."+cluster.ClusterDomain+" >/dev/null 2>&1"),
		netprobe.Allow("public", netprobe.TCP(public, publicPort)),
		netprobe.Deny("metadata", netprobe.TCP(metadata, 80)),
		netprobe.Deny("other-tenant", netprobe.TCP(otherPod, 8080)),
		netprobe.Deny("nats-monitor", netprobe.TCP(natsPod, 8222)),
		netprobe.Deny("nats-cluster", netprobe.TCP(natsPod, 6222)),
		// test/cluster drops Pods' connections to the kubelet besides: "node"
		// is the product's denial of the node's address.
		netprobe.Deny("kubelet", netprobe.TCP(node.InternalIP, 10250)),
		netprobe.Deny("node", netprobe.TCP(node.InternalIP, nodePort)),
		netprobe.Deny("other-dns", netprobe.TCP(public, 53)),
		netprobe.Deny("host", netprobe.TCP(node.HostIP, hostPort)),
	}
	pod := realPod("prober", netprobe.Script(targets), 0)
	pod.Labels = map[string]string{api.LabelEgress: api.EgressRestricted}
	createPod(t, ctx, tenant, pod)
	p := &netprobe.Probe{T: t, Client: env.Client(), NS: tenant, Pod: "prober"}
	want := netprobe.Want(targets)
	p.Expect(ctx, "pool Pod under runplane-egress", want...)

	p.Mark(ctx)
	_, err = env.Client().NetworkingV1().NetworkPolicies(tenant).Create(ctx, &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant-allow-all"},
		Spec: networkingv1.NetworkPolicySpec{
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	p.Expect(ctx, "the tenant's own allow-all egress NetworkPolicy", want...)
}
