package queue_test

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/sidecar/sidecartest"
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

// TestOldestQueuedTimestamp: a pool with nothing to run its invocations
// reports when its oldest waiting one was accepted (what the
// RunplaneQueueBacklogOld alert reads: the age of a backlog, which a count
// cannot tell), and the series goes once a worker has taken them all.
func TestOldestQueuedTimestamp(t *testing.T) {
	e := newEnv(t, nil)
	series := `runplane_activator_oldest_queued_timestamp_seconds{namespace="default",pool="echo"} `
	value := func() (string, bool) {
		m, err := e.metrics()
		require.NoError(t, err)
		for _, l := range strings.Split(m, "\n") {
			if v, ok := strings.CutPrefix(l, series); ok {
				return v, true
			}
		}
		return "", false
	}
	first := e.invoke(map[string]any{"mode": "async"})
	require.Equal(t, http.StatusAccepted, first.code, "%s", first.raw)
	accepted, err := time.Parse(time.RFC3339Nano, first.body["acceptedAt"].(string))
	require.NoError(t, err)
	// A later one does not move it: the oldest is what waited longest.
	require.Equal(t, http.StatusAccepted, e.invoke(map[string]any{"mode": "async"}).code)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		v, ok := value()
		require.True(c, ok, "no series %s", series)
		f, err := strconv.ParseFloat(v, 64)
		require.NoError(c, err)
		assert.InDelta(c, float64(accepted.UnixMilli())/1000, f, 0.001)
	}, 10*time.Second, 50*time.Millisecond)

	e.worker("w", 2, sidecartest.Echo)
	require.Eventually(t, func() bool { _, ok := value(); return !ok }, 10*time.Second, 50*time.Millisecond, "the series outlived the backlog")
}
