package helmnode

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/test/scrape"
)

// scrapeEveryComponent: each component's /metrics, at its Pod's IP and the
// container port its ServiceMonitor scrapes, read from the test process as
// a Prometheus outside the cluster would: admitted by the chart's
// NetworkPolicies as networkPolicy.monitoring (the host's address, see
// values()) and by RBAC as a ServiceAccount bound to the chart's
// runplane-metrics-reader: 200 and promlint-clean (401/403 to the
// anonymous and to a ServiceAccount without the role).
func scrapeEveryComponent(ctx context.Context, t *testing.T) {
	scrapers, err := scrape.New(ctx, env)
	require.NoError(t, err)
	// Where the chart's ServiceMonitor verifies the certificate: the Secret
	// holding the CA bundle, and the name the certificate must cover.
	for _, c := range []struct{ component, port, caSecret, serverName string }{
		{"controller", "metrics", "runplane-controller-metrics-tls", "runplane-controller-metrics." + releaseNS + ".svc"},
		{"queue", "metrics", "runplane-queue-metrics-tls", "runplane-queue-metrics." + releaseNS + ".svc"},
		{"scheduler", "metrics", "runplane-extender-metrics-tls", "runplane-extender." + releaseNS + ".svc"}, // the extender's container
		{"webhook", "https", "runplane-webhook-tls", "runplane-webhook." + releaseNS + ".svc"},
	} {
		t.Run(c.component, func(t *testing.T) {
			url := componentURL(ctx, t, c.component, c.port)
			scrapers.CheckClean(t, url)
			sec, err := env.Client().CoreV1().Secrets(releaseNS).Get(ctx, c.caSecret, metav1.GetOptions{})
			require.NoError(t, err)
			scrapers.CheckVerified(t, url, c.serverName, sec.Data["ca-bundle.crt"])
			if c.component == "queue" {
				scrapers.NATSServers(t, url, 3) // the chart's default nats.bundled.replicas
			}
		})
	}
}

// componentURL is https://<Pod IP>:<container port named port>/metrics of
// the release's first Pod of component.
func componentURL(ctx context.Context, t *testing.T, component, port string) string {
	t.Helper()
	pods, err := env.Client().CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/instance=" + release + ",app.kubernetes.io/component=" + component})
	require.NoError(t, err)
	require.NotEmpty(t, pods.Items, "no %s Pod", component)
	p := pods.Items[0]
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == port {
				return fmt.Sprintf("https://%s/metrics", net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(cp.ContainerPort))))
			}
		}
	}
	require.FailNow(t, "no port", "Pod %s has no container port %s", p.Name, port)
	return ""
}
