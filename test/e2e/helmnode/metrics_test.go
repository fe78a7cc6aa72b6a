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
	for _, c := range []struct{ component, port string }{
		{"controller", "metrics"},
		{"queue", "metrics"},
		{"scheduler", "metrics"}, // the extender's container
		{"webhook", "https"},
	} {
		t.Run(c.component, func(t *testing.T) {
			url := componentURL(ctx, t, c.component, c.port)
			scrapers.CheckClean(t, url)
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
