package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/extender/ledger"
	"github.com/runplane/runplane/internal/configfile"
	"github.com/runplane/runplane/internal/configfile/configfiletest"
)

const header = "apiVersion: runplane.io/v1alpha1\nkind: ExtenderConfiguration\n"

func TestDecode(t *testing.T) {
	configfiletest.Decode(t, []configfiletest.Case[ExtenderConfiguration]{
		{Name: "empty: the defaults", Doc: header, Check: func(t *testing.T, c *ExtenderConfiguration) {
			assert.Equal(t, configfile.New[ExtenderConfiguration](), c)
			assert.Equal(t, "127.0.0.1:8443", c.Addr)
			assert.True(t, *c.LeaderElection.LeaderElect)
			assert.Equal(t, 15*time.Second, c.LeaderElection.LeaseDuration.Duration)
			assert.Equal(t, []corev1.ResourceName{api.DefaultGPUResource}, c.ManagedResources)
			assert.Equal(t, api.DefaultPauseImage, c.ReservationImage)
			def := ledger.Defaults()
			assert.Equal(t, []any{def.MaxEvictionsPerPod, def.MaxEvictionsPerNode, def.PreemptBackoff},
				[]any{c.Preemption.MaxEvictionsPerPod, c.Preemption.MaxEvictionsPerNode, c.Preemption.Backoff.Duration}, "the ledger's bounds")
		}},
		{Name: "following a Lease: no election of its own", Doc: header + "leaderElection:\n  followLease: rp/runplane-scheduler\n", Check: func(t *testing.T, c *ExtenderConfiguration) {
			assert.False(t, *c.LeaderElection.LeaderElect)
		}},
		{Name: "the chart's", Doc: header + "addr: 127.0.0.1:8443\nmetrics:\n  bindAddress: :8444\n  tlsSecret: rp/runplane-extender-metrics-tls\n  tlsHosts: [runplane-extender.rp.svc]\n" +
			"tls:\n  certFile: /tls/tls.crt\n  keyFile: /tls/tls.key\nmanagedResources: [nvidia.com/gpu, nvidia.com/mig-1g.10gb]\nstock:\n  namespace: runplane-stock\n",
			Check: func(t *testing.T, c *ExtenderConfiguration) {
				assert.Equal(t, []corev1.ResourceName{api.DefaultGPUResource, "nvidia.com/mig-1g.10gb"}, c.ManagedResources)
				assert.Equal(t, 10*time.Second, c.Stock.StatusPeriod.Duration)
			}},
		{Name: "unknown key named", Doc: header + "leaderElection:\n  followLeases: a/b\n", Err: `unknown field "leaderElection.followLeases"`},
		{Name: "a flag's old name", Doc: header + "stockNamespace: x\n", Err: `unknown field "stockNamespace"`},
		{Name: "another kind", Doc: "apiVersion: runplane.io/v1alpha1\nkind: WebhookConfiguration\n", Err: "want runplane.io/v1alpha1, ExtenderConfiguration"},
		{Name: "follow and elect", Doc: header + "leaderElection:\n  leaderElect: true\n  followLease: a/b\n", Err: "leaderElection.followLease: not with leaderElection.leaderElect: true"},
		{Name: "follow: not namespace/name", Doc: header + "leaderElection:\n  followLease: runplane-scheduler\n", Err: `leaderElection.followLease: "runplane-scheduler": want namespace/name`},
		{Name: "lease shorter than renewal", Doc: header + "leaderElection:\n  leaseDuration: 5s\n", Err: "leaderElection.leaseDuration: 5s: want more than leaderElection.renewDeadline 10s"},
		{Name: "certificate without key", Doc: header + "tls:\n  certFile: /c\n", Err: "tls: certFile and keyFile together or neither"},
		{Name: "metrics Secret on addr", Doc: header + "metrics:\n  tlsSecret: a/b\n  tlsHosts: [x]\n", Err: "metrics.tlsSecret: needs metrics.bindAddress"},
		{Name: "metrics Secret without hosts", Doc: header + "metrics:\n  bindAddress: :8444\n  tlsSecret: a/b\n", Err: "metrics.tlsHosts: needed with metrics.tlsSecret"},
		{Name: "address", Doc: header + "pprofAddr: localhost\n", Err: `pprofAddr: "localhost": want host:port`},
		{Name: "negative duration", Doc: header + "claimTimeout: -1s\n", Err: "claimTimeout: -1s: want a positive duration"},
		{Name: "negative cap", Doc: header + "preemption:\n  maxEvictionsPerNode: -1\n", Err: "preemption.maxEvictionsPerNode: -1: want a positive number"},
		{Name: "resource name", Doc: header + "managedResources: [\"nvidia.com/gpu x\"]\n", Err: `managedResources: "nvidia.com/gpu x"`},
	})
}
