package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/extender/ledger"
)

const header = "apiVersion: runplane.io/v1alpha1\nkind: ExtenderConfiguration\n"

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name, doc, err string
		check          func(t *testing.T, c *ExtenderConfiguration)
	}{
		{name: "empty: the defaults", doc: header, check: func(t *testing.T, c *ExtenderConfiguration) {
			assert.Equal(t, New(), c)
			assert.Equal(t, "127.0.0.1:8443", c.Addr)
			assert.True(t, *c.LeaderElection.LeaderElect)
			assert.Equal(t, 15*time.Second, c.LeaderElection.LeaseDuration.Duration)
			assert.Equal(t, []corev1.ResourceName{api.DefaultGPUResource}, c.ManagedResources)
			assert.Equal(t, api.DefaultPauseImage, c.ReservationImage)
			def := ledger.Defaults()
			assert.Equal(t, []any{def.MaxEvictionsPerPod, def.MaxEvictionsPerNode, def.PreemptBackoff},
				[]any{c.Preemption.MaxEvictionsPerPod, c.Preemption.MaxEvictionsPerNode, c.Preemption.Backoff.Duration}, "the ledger's bounds")
		}},
		{name: "following a Lease: no election of its own", doc: header + "leaderElection:\n  followLease: rp/runplane-scheduler\n", check: func(t *testing.T, c *ExtenderConfiguration) {
			assert.False(t, *c.LeaderElection.LeaderElect)
		}},
		{name: "the chart's", doc: header + "addr: 127.0.0.1:8443\nmetrics:\n  bindAddress: :8444\n  tlsSecret: rp/runplane-extender-metrics-tls\n  tlsHosts: [runplane-extender.rp.svc]\n" +
			"tls:\n  certFile: /tls/tls.crt\n  keyFile: /tls/tls.key\nmanagedResources: [nvidia.com/gpu, nvidia.com/mig-1g.10gb]\nstock:\n  namespace: runplane-stock\n",
			check: func(t *testing.T, c *ExtenderConfiguration) {
				assert.Equal(t, []corev1.ResourceName{api.DefaultGPUResource, "nvidia.com/mig-1g.10gb"}, c.ManagedResources)
				assert.Equal(t, 10*time.Second, c.Stock.StatusPeriod.Duration)
			}},
		{name: "unknown key named", doc: header + "leaderElection:\n  followLeases: a/b\n", err: `unknown field "leaderElection.followLeases"`},
		{name: "a flag's old name", doc: header + "stockNamespace: x\n", err: `unknown field "stockNamespace"`},
		{name: "another kind", doc: "apiVersion: runplane.io/v1alpha1\nkind: WebhookConfiguration\n", err: "want runplane.io/v1alpha1, ExtenderConfiguration"},
		{name: "follow and elect", doc: header + "leaderElection:\n  leaderElect: true\n  followLease: a/b\n", err: "leaderElection.followLease: not with leaderElection.leaderElect: true"},
		{name: "follow: not namespace/name", doc: header + "leaderElection:\n  followLease: runplane-scheduler\n", err: `leaderElection.followLease: "runplane-scheduler": want namespace/name`},
		{name: "lease shorter than renewal", doc: header + "leaderElection:\n  leaseDuration: 5s\n", err: "leaderElection.leaseDuration: 5s: want more than leaderElection.renewDeadline 10s"},
		{name: "certificate without key", doc: header + "tls:\n  certFile: /c\n", err: "tls: certFile and keyFile together or neither"},
		{name: "metrics Secret on addr", doc: header + "metrics:\n  tlsSecret: a/b\n  tlsHosts: [x]\n", err: "metrics.tlsSecret: needs metrics.bindAddress"},
		{name: "metrics Secret without hosts", doc: header + "metrics:\n  bindAddress: :8444\n  tlsSecret: a/b\n", err: "metrics.tlsHosts: needed with metrics.tlsSecret"},
		{name: "address", doc: header + "pprofAddr: localhost\n", err: `pprofAddr: "localhost": want host:port`},
		{name: "negative duration", doc: header + "claimTimeout: -1s\n", err: "claimTimeout: -1s: want a positive duration"},
		{name: "negative cap", doc: header + "preemption:\n  maxEvictionsPerNode: -1\n", err: "preemption.maxEvictionsPerNode: -1: want a positive number"},
		{name: "resource name", doc: header + "managedResources: [\"nvidia.com/gpu x\"]\n", err: `managedResources: "nvidia.com/gpu x"`},
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

// TestDefaultTwice: defaults apply once; a second pass (extender.Start's
// on a loaded configuration) changes nothing.
func TestDefaultTwice(t *testing.T) {
	again := New()
	again.Default()
	assert.Equal(t, New(), again)
}
