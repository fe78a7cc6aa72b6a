package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/configfile"
	"github.com/runplane/runplane/internal/configfile/configfiletest"
)

const header = "apiVersion: runplane.io/v1alpha1\nkind: QueueConfiguration\n"

func TestDecode(t *testing.T) {
	configfiletest.Decode(t, []configfiletest.Case[QueueConfiguration]{
		{Name: "empty: the defaults", Doc: header, Check: func(t *testing.T, c *QueueConfiguration) {
			assert.Equal(t, configfile.New[QueueConfiguration](), c)
			assert.Equal(t, 15*time.Second, c.Workers.HeartbeatTimeout.Duration)
			assert.Equal(t, 5*time.Second, c.Workers.HeartbeatInterval.Duration, "the sidecars' default")
			assert.True(t, *c.LeaderElection.LeaderElect)
		}},
		{Name: "durations and sections", Doc: header + "workers:\n  heartbeatTimeout: 30s\nstream:\n  maxAge: 1h\nlimits:\n  poolMaxBacklog: -1\n" +
			"nats:\n  caFile: /ca\nleaderElection:\n  shards: 6\n  shardLeaseDuration: 10s\n", Check: func(t *testing.T, c *QueueConfiguration) {
			assert.Equal(t, 30*time.Second, c.Workers.HeartbeatTimeout.Duration)
			assert.Equal(t, time.Hour, c.Stream.MaxAge.Duration)
			assert.Equal(t, -1, c.Limits.PoolMaxBacklog)
			q, err := c.Queue()
			require.NoError(t, err)
			assert.Equal(t, 30*time.Second, q.HeartbeatTimeout.Duration)
			assert.Equal(t, time.Hour, q.Stream.MaxAge.Duration)
			assert.Equal(t, []any{"/ca", 16, 6, 10 * time.Second}, []any{q.NATS.CAFile, q.NATS.Callout.Workers, q.LeaderElection.Shards, q.LeaderElection.ShardLeaseDuration.Duration})
		}},
		{Name: "static pools: no leader election", Doc: header + "staticPools: [ns/p]\ninsecureDisableCallerAuth: true\n", Check: func(t *testing.T, c *QueueConfiguration) {
			assert.False(t, *c.LeaderElection.LeaderElect)
		}},
		{Name: "metrics off", Doc: header + "metrics:\n  bindAddress: \"0\"\n", Check: func(t *testing.T, c *QueueConfiguration) {
			q, err := c.Queue()
			require.NoError(t, err)
			assert.Empty(t, q.MetricsListen)
		}},
		{Name: "unknown key named", Doc: header + "workers:\n  heartbeatTimeuot: 30s\n", Err: `unknown field "workers.heartbeatTimeuot"`},
		{Name: "another kind", Doc: "apiVersion: v1\nkind: ConfigMap\n", Err: "want runplane.io/v1alpha1, QueueConfiguration"},
		{Name: "not a duration", Doc: header + "stream:\n  maxAge: soon\n", Err: "soon"},
		{Name: "heartbeat below 3 intervals", Doc: header + "workers:\n  heartbeatTimeout: 10s\n", Err: "workers.heartbeatTimeout: heartbeat timeout 10s is below 3×"},
		{Name: "static pools need no caller auth", Doc: header + "staticPools: [p]\n", Err: "staticPools: nothing authenticates callers"},
		{Name: "static pools and leader election", Doc: header + "staticPools: [p]\ninsecureDisableCallerAuth: true\nleaderElection:\n  leaderElect: true\n", Err: "leaderElection.leaderElect: needs Kubernetes"},
		// Refused at load, not by a queue that retries opening its stream forever.
		{Name: "stream refused at load", Doc: header + "stream:\n  maxAge: 1m\n  duplicateWindow: 2m\n", Err: "stream: duplicate window 2m0s must not exceed max age 1m0s"},
		{Name: "too many shards", Doc: header + "leaderElection:\n  shards: 65\n", Err: "leaderElection.shards: 65: want 1 to 64"},
		{Name: "shard Lease too short", Doc: header + "leaderElection:\n  shardLeaseDuration: 2s\n", Err: "leaderElection.shardLeaseDuration: 2s: want at least 5s"},
		{Name: "negative attempts", Doc: header + "workers:\n  maxAttempts: -1\n", Err: "workers.maxAttempts: -1: want at least 1"},
		{Name: "sample ratio", Doc: header + "tracing:\n  sampleRatio: 2\n", Err: "tracing.sampleRatio: 2: want 0 < ratio ≤ 1"},
		{Name: "negative QPS", Doc: header + "callerAuth:\n  tokenReviewQPS: -1\n", Err: "callerAuth.tokenReviewQPS: -1: want > 0"},
		{Name: "TLS secret needs names", Doc: header + "nats:\n  bootstrap:\n    tlsSecret: s\n", Err: "nats.bootstrap.tlsDNSNames: needed"},
		{Name: "metrics Secret needs hosts", Doc: header + "metrics:\n  tlsSecret: rp/m\n", Err: "metrics.tlsHosts: needed with metrics.tlsSecret"},
		{Name: "body budgets", Doc: header + "limits:\n  replicaMaxBodyBytes: 536870912\n  namespaceMaxBodyBytes: 134217728\n", Check: func(t *testing.T, c *QueueConfiguration) {
			q, err := c.Queue()
			require.NoError(t, err)
			assert.Equal(t, []int64{512 << 20, 128 << 20}, []int64{q.Limits.ReplicaMaxBodyBytes, q.Limits.NamespaceMaxBodyBytes})
		}},
		{Name: "namespace body share below one body", Doc: header + "limits:\n  namespaceMaxBodyBytes: 67108864\n",
			Err: "limits.namespaceMaxBodyBytes: 67108864 is below the largest request body, 90527064"},
		{Name: "namespace body share above the replica's", Doc: header + "limits:\n  replicaMaxBodyBytes: 100000000\n  namespaceMaxBodyBytes: 134217728\n",
			Err: "limits.namespaceMaxBodyBytes: 134217728: want at most limits.replicaMaxBodyBytes (100000000)"},
		{Name: "namespace body share unbounded under a bounded replica", Doc: header + "limits:\n  namespaceMaxBodyBytes: -1\n",
			Err: "limits.namespaceMaxBodyBytes: -1: want at most limits.replicaMaxBodyBytes"},
		{Name: "metrics Secret not namespace/name", Doc: header + "metrics:\n  tlsSecret: m\n  tlsHosts: [q]\n", Err: `metrics.tlsSecret: metrics TLS Secret "m": want namespace/name`},
	})
}
