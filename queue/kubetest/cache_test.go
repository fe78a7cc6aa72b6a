package kubetest_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/queuetest"
	"github.com/runplane/runplane/queue/shard"
	"github.com/runplane/runplane/test/cluster"
	"github.com/runplane/runplane/test/natsauth"
)

// TestShardsShareTheManagersCache: a replica running three activator
// shards watches the pools' Pods and ReplicaSets once, through its
// manager's cache (issue 32: each shard's activator ran a client-go
// informer factory of its own, three Pod watches and three Pod caches).
// Counted by the API server (its own, so no other test's watch counts) once
// every shard has rebuilt: each starts watching before it rebuilds.
func TestShardsShareTheManagersCache(t *testing.T) {
	const ns = "shared-cache"
	c := cluster.ForTest(t, ns)
	watches := func(resource string) int {
		n, err := c.Watches(t.Context(), resource, "namespace")
		require.NoError(t, err)
		return n
	}
	pods0, rss0 := watches("pods"), watches("replicasets")

	reg := prometheus.NewRegistry()
	queuetest.Run(t, queue.Config{NATS: queue.NATS{URL: natsauth.JetStream(t, nil).ClientURL()}, InsecureDisableCallerAuth: true,
		RESTConfig: c.RESTConfig(), Namespace: ns, Registry: reg, Tick: 100 * time.Millisecond,
		LeaderElection: shard.LeaderElection{LeaderElect: ptr.To(false), Shards: 3}})
	require.Eventually(t, func() bool {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() == "runplane_activator_rebuilt" {
				return mf.GetMetric()[0].GetGauge().GetValue() == 3
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "three shards rebuilt")
	require.Eventually(t, func() bool { return watches("pods") > pods0 && watches("replicasets") > rss0 }, 30*time.Second, 100*time.Millisecond)
	assert.Equal(t, 1, watches("pods")-pods0, "Pod watches")
	assert.Equal(t, 1, watches("replicasets")-rss0, "ReplicaSet watches")
}
