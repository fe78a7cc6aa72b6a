package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const header = "apiVersion: runplane.io/v1alpha1\nkind: QueueConfiguration\n"

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name, doc, err string
		check          func(t *testing.T, c *QueueConfiguration)
	}{
		{name: "empty: the defaults", doc: header, check: func(t *testing.T, c *QueueConfiguration) {
			assert.Equal(t, New(), c)
			assert.Equal(t, 15*time.Second, c.Workers.HeartbeatTimeout.Duration)
			assert.Equal(t, 5*time.Second, c.Workers.HeartbeatInterval.Duration, "the sidecars' default")
			assert.True(t, *c.LeaderElection.LeaderElect)
		}},
		{name: "durations and sections", doc: header + "workers:\n  heartbeatTimeout: 30s\nstream:\n  maxAge: 1h\nlimits:\n  poolMaxBacklog: -1\n" +
			"nats:\n  caFile: /ca\nleaderElection:\n  shards: 6\n  shardLeaseDuration: 10s\n", check: func(t *testing.T, c *QueueConfiguration) {
			assert.Equal(t, 30*time.Second, c.Workers.HeartbeatTimeout.Duration)
			assert.Equal(t, time.Hour, c.Stream.MaxAge.Duration)
			assert.Equal(t, -1, c.Limits.PoolMaxBacklog)
			q, err := c.Queue()
			require.NoError(t, err)
			assert.Equal(t, 30*time.Second, q.HeartbeatTimeout.Duration)
			assert.Equal(t, time.Hour, q.Stream.MaxAge.Duration)
			assert.Equal(t, []any{"/ca", 16, 6, 10 * time.Second}, []any{q.NATS.CAFile, q.NATS.Callout.Workers, q.LeaderElection.Shards, q.LeaderElection.ShardLeaseDuration.Duration})
		}},
		{name: "static pools: no leader election", doc: header + "staticPools: [ns/p]\ninsecureDisableCallerAuth: true\n", check: func(t *testing.T, c *QueueConfiguration) {
			assert.False(t, *c.LeaderElection.LeaderElect)
		}},
		{name: "metrics off", doc: header + "metrics:\n  bindAddress: \"0\"\n", check: func(t *testing.T, c *QueueConfiguration) {
			q, err := c.Queue()
			require.NoError(t, err)
			assert.Empty(t, q.MetricsListen)
		}},
		{name: "unknown key named", doc: header + "workers:\n  heartbeatTimeuot: 30s\n", err: `unknown field "workers.heartbeatTimeuot"`},
		{name: "another kind", doc: "apiVersion: v1\nkind: ConfigMap\n", err: "want runplane.io/v1alpha1, QueueConfiguration"},
		{name: "not a duration", doc: header + "stream:\n  maxAge: soon\n", err: "soon"},
		{name: "heartbeat below 3 intervals", doc: header + "workers:\n  heartbeatTimeout: 10s\n", err: "workers.heartbeatTimeout: heartbeat timeout 10s is below 3×"},
		{name: "static pools need no caller auth", doc: header + "staticPools: [p]\n", err: "staticPools: nothing authenticates callers"},
		{name: "static pools and leader election", doc: header + "staticPools: [p]\ninsecureDisableCallerAuth: true\nleaderElection:\n  leaderElect: true\n", err: "leaderElection.leaderElect: needs Kubernetes"},
		// Refused at load, not by a queue that retries opening its stream forever.
		{name: "stream refused at load", doc: header + "stream:\n  maxAge: 1m\n  duplicateWindow: 2m\n", err: "stream: duplicate window 2m0s must not exceed max age 1m0s"},
		{name: "too many shards", doc: header + "leaderElection:\n  shards: 65\n", err: "leaderElection.shards: 65: want 1 to 64"},
		{name: "shard Lease too short", doc: header + "leaderElection:\n  shardLeaseDuration: 2s\n", err: "leaderElection.shardLeaseDuration: 2s: want at least 5s"},
		{name: "negative attempts", doc: header + "workers:\n  maxAttempts: -1\n", err: "workers.maxAttempts: -1: want at least 1"},
		{name: "sample ratio", doc: header + "tracing:\n  sampleRatio: 2\n", err: "tracing.sampleRatio: 2: want 0 < ratio ≤ 1"},
		{name: "negative QPS", doc: header + "callerAuth:\n  tokenReviewQPS: -1\n", err: "callerAuth.tokenReviewQPS: -1: want > 0"},
		{name: "TLS secret needs names", doc: header + "nats:\n  bootstrap:\n    tlsSecret: s\n", err: "nats.bootstrap.tlsDNSNames: needed"},
		{name: "metrics Secret needs hosts", doc: header + "metrics:\n  tlsSecret: rp/m\n", err: "metrics.tlsHosts: needed with metrics.tlsSecret"},
		{name: "metrics Secret not namespace/name", doc: header + "metrics:\n  tlsSecret: m\n  tlsHosts: [q]\n", err: `metrics.tlsSecret: metrics TLS Secret "m": want namespace/name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Decode([]byte(tc.doc))
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			tc.check(t, c)
		})
	}
}
