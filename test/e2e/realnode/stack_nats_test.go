package realnode

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/natstls"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/stream"
	"github.com/runplane/runplane/test/natsauth"
)

// natsAuth is the stack's NATS trust: the queue's user (which tests use to
// watch the queue's own Records) and the callout's keys.
var (
	natsAuth natsauth.Auth
	natsURL  string
)

// startNATS runs NATS with runplane's auth callout on the node's host
// address, the only address Pods reach: the sidecars present their
// projected ServiceAccount tokens, which the queue's callout reviews (and
// on admitting a worker, creates its dispatch consumer).
func startNATS(ctx context.Context) (*server.Server, error) {
	a, err := natsauth.Write(filepath.Join(env.Dir(), "nats-auth"))
	if err != nil {
		return nil, err
	}
	ns, err := natsauth.Start(filepath.Join(env.Dir(), "nats"), node.HostIP, a, queue.WorkerExports(stream.Config{}))
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	natsAuth, natsURL = a, ns.ClientURL()
	go func() {
		<-ctx.Done()
		ns.Shutdown()
	}()
	return ns, nil
}

// admitNATSOnHost lets the egress-restricted Pods of namespace n reach
// NATS's client port on the host. The node enforces the egress
// controller's runplane-egress, which admits NATS only as Pods and denies
// private addresses such as the host's; policies add up, so this one
// admits the stack's NATS, which is no Pod.
func admitNATSOnHost(ctx context.Context, n string, ns *server.Server) error {
	port := intstr.FromInt32(int32(ns.Addr().(*net.TCPAddr).Port))
	tcp := corev1.ProtocolTCP
	_, err := env.Client().NetworkingV1().NetworkPolicies(n).Create(ctx, &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-nats-on-host"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{api.LabelEgress: api.EgressRestricted}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: node.HostIP + "/32"}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("admitting NATS on the host in %s: %w", n, err)
	}
	return nil
}

// withNATS gives the queue its NATS URL, credentials and callout.
func withNATS(cfg queue.Config, ns *server.Server) queue.Config {
	cfg.NATSURL, cfg.NATSTrustFile, cfg.NATSTLS = ns.ClientURL(), natsAuth.TrustFile, natsAuth.Client
	return cfg
}

// publishNATSCA publishes the server's CA bundle for the webhook, as the
// chart's queue does.
func publishNATSCA(ctx context.Context) error {
	ca, err := os.ReadFile(natsAuth.Client.CAFile)
	if err != nil {
		return err
	}
	return natstls.PublishCA(ctx, env.Client(), api.DefaultNamespace, ca, nil)
}

// connectNATS connects as the queue's user: tests watch the sidecars'
// Events and the queue's Records as the queue sees them.
func connectNATS(t testing.TB) *nats.Conn {
	t.Helper()
	asQueue, err := natsAuth.QueueOption()
	require.NoError(t, err)
	nc, err := nats.Connect(natsURL, asQueue)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}
