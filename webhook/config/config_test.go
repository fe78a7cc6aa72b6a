package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/webhook/mutate"
)

const header = "apiVersion: runplane.io/v1alpha1\nkind: WebhookConfiguration\ninjection:\n  image: runplane:1\n  natsURL: nats://nats:4222\n"

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name, doc, err string
		check          func(t *testing.T, c *WebhookConfiguration)
	}{
		{name: "required only: the defaults", doc: header, check: func(t *testing.T, c *WebhookConfiguration) {
			want := New()
			want.Injection.Image, want.Injection.NATSURL = "runplane:1", "nats://nats:4222"
			assert.Equal(t, want, c)
			def := mutate.DefaultConfig()
			assert.Equal(t, def.Resources, c.Injection.Resources)
			assert.Equal(t, def.WorkloadPriorityClasses, c.Injection.WorkloadPriorityClasses)
			assert.Equal(t, []string{"runplane-webhook.runplane-system.svc", "runplane-webhook.runplane-system.svc.cluster.local"}, c.TLS.DNSNames)
			assert.Equal(t, time.Hour, c.TLS.CheckInterval.Duration)
		}},
		{name: "a named container replaces its default, the others keep theirs", doc: header + "  resources:\n    runplane-worker:\n      limits:\n        memory: 1Gi\n", check: func(t *testing.T, c *WebhookConfiguration) {
			limits := c.Injection.Resources[api.SidecarContainerName].Limits
			assert.Equal(t, "1Gi", limits.Memory().String())
			assert.Nil(t, c.Injection.Resources[api.SidecarContainerName].Requests)
			assert.Equal(t, mutate.DefaultSidecarResources()[mutate.SSHInstallContainerName], c.Injection.Resources[mutate.SSHInstallContainerName])
		}},
		{name: "no tiers: runplane-workload only", doc: header + "  workloadPriorityClasses: []\n", check: func(t *testing.T, c *WebhookConfiguration) {
			assert.Empty(t, c.Injection.WorkloadPriorityClasses)
			assert.Equal(t, []string{api.PriorityClassWorkload}, c.Injection.AllowedWorkloadPriorityClasses())
		}},
		{name: "IP addresses only: no default names", doc: header + "tls:\n  ipAddresses: [127.0.0.1]\n", check: func(t *testing.T, c *WebhookConfiguration) {
			assert.Empty(t, c.TLS.DNSNames)
			assert.Equal(t, "127.0.0.1", c.TLS.IPs()[0].String())
		}},
		{name: "names follow the namespace and Service", doc: header + "namespace: rp\nservice:\n  name: wh\n", check: func(t *testing.T, c *WebhookConfiguration) {
			assert.Equal(t, []string{"wh.rp.svc", "wh.rp.svc.cluster.local"}, c.TLS.DNSNames)
		}},
		{name: "no image", doc: "apiVersion: runplane.io/v1alpha1\nkind: WebhookConfiguration\ninjection:\n  natsURL: nats://n\n", err: "injection config: image"},
		{name: "no NATS", doc: "apiVersion: runplane.io/v1alpha1\nkind: WebhookConfiguration\ninjection:\n  image: i\n", err: "NATS URL must be set"},
		{name: "unknown key named", doc: header + "tls:\n  secretNmae: x\n", err: `unknown field "tls.secretNmae"`},
		{name: "another kind", doc: "apiVersion: runplane.io/v1alpha1\nkind: QueueConfiguration\n", err: "want runplane.io/v1alpha1, WebhookConfiguration"},
		{name: "pull policy", doc: header + "  imagePullPolicy: Sometimes\n", err: "image pull policy must be Always, IfNotPresent or Never"},
		{name: "bad IP", doc: header + "tls:\n  ipAddresses: [localhost]\n", err: `tls.ipAddresses: "localhost" is not an IP address`},
		{name: "port", doc: header + "service:\n  port: 70000\n", err: "service.port: 70000: want 1-65535"},
		{name: "negative resync", doc: header + "webhooks:\n  resync: -1s\n", err: "webhooks.resync: -1s: want a positive duration"},
		{name: "a DeviceClass that is no name", doc: header + "gpuDeviceClasses: [gpu.nvidia.com, \"GPU Class\"]\n", err: `gpuDeviceClasses: "GPU Class" is not a DeviceClass name`},
		{name: "URL unmanaged", doc: header + "webhooks:\n  url: https://x\n", err: "webhooks.url: only with webhooks.manage"},
		{name: "sidecar resources: unknown container", doc: header + "  resources:\n    runplane-sidecar: {}\n", err: `unknown container "runplane-sidecar"; allowed: runplane-worker, runplane-ssh-install`},
		// SSH sessions run in the main container (no runplane-ssh sidecar).
		{name: "sidecar resources: SSH", doc: header + "  resources:\n    runplane-ssh: {}\n", err: `"runplane-ssh" is no longer a container`},
		{name: "sidecar resources: a GPU", doc: header + "  resources:\n    runplane-worker: {requests: {nvidia.com/gpu: 1}}\n", err: "unknown resource requests.nvidia.com/gpu"},
		{name: "sidecar resources: above limits", doc: header + "  resources:\n    runplane-worker: {requests: {cpu: 2}, limits: {cpu: 1}}\n", err: "requests.cpu 2 is above limits.cpu 1"},
		{name: "sidecar resources: zero", doc: header + "  resources:\n    runplane-worker: {requests: {cpu: 0}}\n", err: "requests.cpu must be positive"},
		{name: "sidecar resources: not a quantity", doc: header + "  resources:\n    runplane-worker: {requests: {memory: lots}}\n", err: "quantities must match"},
		{name: "sidecar resources: unknown key", doc: header + "  resources:\n    runplane-worker: {x: {}}\n", err: `unknown field "injection.resources.runplane-worker.x"`},
		{name: "stock tier", doc: header + "  workloadPriorityClasses: [runplane-stock]\n", err: "must not include runplane-stock"},
		{name: "DRA stock namespaces alone", doc: header + "  draStockNamespaces: [team-a]\n", err: "draStockNamespaces needs stockNamespaces"},
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

// TestDefaultTwice: defaults apply once; a second pass (webhook.Run's on
// a loaded configuration) changes nothing.
func TestDefaultTwice(t *testing.T) {
	c := New()
	again := New()
	again.Default()
	assert.Equal(t, c, again)
}
