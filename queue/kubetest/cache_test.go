package kubetest_test

import (
	"context"
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
	watches := func(t require.TestingT, resource string) int {
		n, err := c.Watches(context.Background(), resource, "namespace")
		require.NoError(t, err)
		return n
	}
	pods0, rss0 := watches(t, "pods"), watches(t, "replicasets")

	reg := prometheus.NewRegistry()
	queuetest.Run(t, queue.Config{NATS: queue.NATS{URL: natsauth.JetStream(t, nil).ClientURL()}, InsecureDisableCallerAuth: true,
		RESTConfig: c.RESTConfig(), Namespace: ns, Registry: reg, Tick: 100 * time.Millisecond,
		LeaderElection: shard.LeaderElection{LeaderElect: ptr.To(false), Shards: 3}})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		mfs, err := reg.Gather()
		require.NoError(c, err)
		rebuilt := 0.0
		for _, mf := range mfs {
			if mf.GetName() == "runplane_activator_rebuilt" {
				rebuilt = mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		assert.Equal(c, 3.0, rebuilt, "shards rebuilt")
	}, 30*time.Second, 50*time.Millisecond, "three shards rebuilt")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Greater(c, watches(c, "pods"), pods0)
		assert.Greater(c, watches(c, "replicasets"), rss0)
	}, 30*time.Second, 100*time.Millisecond)
	assert.Equal(t, 1, watches(t, "pods")-pods0, "Pod watches")
	assert.Equal(t, 1, watches(t, "replicasets")-rss0, "ReplicaSet watches")
}
