package queue_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/queue"
)

// TestSameNamedPoolsAreTwoSeries: two tenants' pools of the same name are
// two series of every per-pool metric, told apart by namespace (issue #30:
// 13 of 15 per-pool series had only pool, so team-a's echo and team-b's
// echo were counted as one).
func TestSameNamedPoolsAreTwoSeries(t *testing.T) {
	e := newEnv(t, func(c *queue.Config) { c.StaticPools = []string{"team-a/echo", "team-b/echo"} })
	for _, ns := range []string{"team-a", "team-b"} {
		e.tenantWorker(ns, "echo", ns+"-w", 1, nil)
	}
	calls := map[string]int{"team-a": 1, "team-b": 2}
	for ns, n := range calls {
		for range n {
			r := e.do("POST", "/v1/namespaces/"+ns+"/pools/echo/invocations", map[string]any{"mode": "sync", "timeoutSeconds": 30})
			require.Equal(t, http.StatusOK, r.code, "%s: %s", ns, r.raw)
		}
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m, err := e.metrics()
		require.NoError(c, err)
		for ns, n := range calls {
			for _, series := range []string{
				`runplane_ingress_invocations_total{mode="sync",namespace="%s",pool="echo"} %d`,
				`runplane_ingress_sync_seconds_count{namespace="%s",pool="echo"} %d`,
				`runplane_activator_invocations_accepted_total{namespace="%s",pool="echo"} %d`,
				`runplane_activator_dispatches_total{namespace="%s",pool="echo"} %d`,
				`runplane_activator_results_total{namespace="%s",pool="echo",state="succeeded"} %d`,
			} {
				want := fmt.Sprintf(series, ns, n)
				assert.True(c, slices.Contains(strings.Split(m, "\n"), want), "no line %s", want)
			}
		}
	}, 10*time.Second, 50*time.Millisecond)
}
