package realnode

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	npav1alpha1 "sigs.k8s.io/network-policy-api/apis/v1alpha1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/controllers/egress"
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
	// egressSettings restrict pool Pods (restrictEgress).
	egressSettings egress.Settings
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

// restrictEgress applies the product's egress restriction, the
// AdminNetworkPolicy runplane-egress the chart ships (egress.AdminPolicy),
// which the node enforces: the stack's NATS, on the host's address inside
// the denied private ranges and no Pod, is an external NATS at its address
// (the chart's nats.external.egress.cidrs). Every pool Pod of every test
// runs under it; the controllers get the same settings.
func restrictEgress(ctx context.Context, ns *server.Server) error {
	s := egress.DefaultSettings()
	s.NATS.Port = int32(ns.Addr().(*net.TCPAddr).Port)
	s.NATS.CIDRs = []netip.Prefix{netip.PrefixFrom(netip.MustParseAddr(node.HostIP), 32)}
	scheme := runtime.NewScheme()
	if err := npav1alpha1.Install(scheme); err != nil {
		return err
	}
	c, err := client.New(env.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	if err := egress.ApplyAdminPolicy(ctx, c, s); err != nil {
		return fmt.Errorf("restricting egress: %w", err)
	}
	egressSettings = s
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
