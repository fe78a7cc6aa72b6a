package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/configfile"
	"github.com/runplane/runplane/internal/configfile/configfiletest"
	"github.com/runplane/runplane/webhook/mutate"
)

const header = "apiVersion: runplane.io/v1alpha1\nkind: WebhookConfiguration\ninjection:\n  image: runplane:1\n  natsURL: nats://nats:4222\n"

func TestDecode(t *testing.T) {
	configfiletest.Decode(t, []configfiletest.Case[WebhookConfiguration]{
		{Name: "required only: the defaults", Doc: header, Check: func(t *testing.T, c *WebhookConfiguration) {
			want := configfile.New[WebhookConfiguration]()
			want.Injection.Image, want.Injection.NATSURL = "runplane:1", "nats://nats:4222"
			assert.Equal(t, want, c)
			def := mutate.DefaultConfig()
			assert.Equal(t, def.Resources, c.Injection.Resources)
			assert.Equal(t, def.WorkloadPriorityClasses, c.Injection.WorkloadPriorityClasses)
			assert.Equal(t, []string{"runplane-webhook.runplane-system.svc", "runplane-webhook.runplane-system.svc.cluster.local"}, c.TLS.DNSNames)
			assert.Equal(t, time.Hour, c.TLS.CheckInterval.Duration)
		}},
		{Name: "a named container replaces its default, the others keep theirs", Doc: header + "  resources:\n    runplane-worker:\n      limits:\n        memory: 1Gi\n", Check: func(t *testing.T, c *WebhookConfiguration) {
			limits := c.Injection.Resources[api.SidecarContainerName].Limits
			assert.Equal(t, "1Gi", limits.Memory().String())
			assert.Nil(t, c.Injection.Resources[api.SidecarContainerName].Requests)
			assert.Equal(t, mutate.DefaultSidecarResources()[mutate.SSHInstallContainerName], c.Injection.Resources[mutate.SSHInstallContainerName])
		}},
		{Name: "no tiers: runplane-workload only", Doc: header + "  workloadPriorityClasses: []\n", Check: func(t *testing.T, c *WebhookConfiguration) {
			assert.Empty(t, c.Injection.WorkloadPriorityClasses)
			assert.Equal(t, []string{api.PriorityClassWorkload}, c.Injection.AllowedWorkloadPriorityClasses())
		}},
		{Name: "IP addresses only: no default names", Doc: header + "tls:\n  ipAddresses: [127.0.0.1]\n", Check: func(t *testing.T, c *WebhookConfiguration) {
			assert.Empty(t, c.TLS.DNSNames)
			assert.Equal(t, "127.0.0.1", c.TLS.IPs()[0].String())
		}},
		{Name: "names follow the namespace and Service", Doc: header + "namespace: rp\nservice:\n  name: wh\n", Check: func(t *testing.T, c *WebhookConfiguration) {
			assert.Equal(t, []string{"wh.rp.svc", "wh.rp.svc.cluster.local"}, c.TLS.DNSNames)
		}},
		{Name: "no image", Doc: "apiVersion: runplane.io/v1alpha1\nkind: WebhookConfiguration\ninjection:\n  natsURL: nats://n\n", Err: "injection config: image"},
		{Name: "no NATS", Doc: "apiVersion: runplane.io/v1alpha1\nkind: WebhookConfiguration\ninjection:\n  image: i\n", Err: "NATS URL must be set"},
		{Name: "unknown key named", Doc: header + "tls:\n  secretNmae: x\n", Err: `unknown field "tls.secretNmae"`},
		{Name: "another kind", Doc: "apiVersion: runplane.io/v1alpha1\nkind: QueueConfiguration\n", Err: "want runplane.io/v1alpha1, WebhookConfiguration"},
		{Name: "pull policy", Doc: header + "  imagePullPolicy: Sometimes\n", Err: "image pull policy must be Always, IfNotPresent or Never"},
		{Name: "bad IP", Doc: header + "tls:\n  ipAddresses: [localhost]\n", Err: `tls.ipAddresses: "localhost" is not an IP address`},
		{Name: "port", Doc: header + "service:\n  port: 70000\n", Err: "service.port: 70000: want 1-65535"},
		{Name: "negative resync", Doc: header + "webhooks:\n  resync: -1s\n", Err: "webhooks.resync: -1s: want a positive duration"},
		{Name: "a DeviceClass that is no name", Doc: header + "gpuDeviceClasses: [gpu.nvidia.com, \"GPU Class\"]\n", Err: `gpuDeviceClasses: "GPU Class" is not a DeviceClass name`},
		{Name: "URL unmanaged", Doc: header + "webhooks:\n  url: https://x\n", Err: "webhooks.url: only with webhooks.manage"},
		{Name: "sidecar resources: unknown container", Doc: header + "  resources:\n    runplane-sidecar: {}\n", Err: `unknown container "runplane-sidecar"; allowed: runplane-worker, runplane-ssh-install`},
		// SSH sessions run in the main container (no runplane-ssh sidecar).
		{Name: "sidecar resources: SSH", Doc: header + "  resources:\n    runplane-ssh: {}\n", Err: `"runplane-ssh" is no longer a container`},
		{Name: "sidecar resources: a GPU", Doc: header + "  resources:\n    runplane-worker: {requests: {nvidia.com/gpu: 1}}\n", Err: "unknown resource requests.nvidia.com/gpu"},
		{Name: "sidecar resources: above limits", Doc: header + "  resources:\n    runplane-worker: {requests: {cpu: 2}, limits: {cpu: 1}}\n", Err: "requests.cpu 2 is above limits.cpu 1"},
		{Name: "sidecar resources: zero", Doc: header + "  resources:\n    runplane-worker: {requests: {cpu: 0}}\n", Err: "requests.cpu must be positive"},
		{Name: "sidecar resources: not a quantity", Doc: header + "  resources:\n    runplane-worker: {requests: {memory: lots}}\n", Err: "quantities must match"},
		{Name: "sidecar resources: unknown key", Doc: header + "  resources:\n    runplane-worker: {x: {}}\n", Err: `unknown field "injection.resources.runplane-worker.x"`},
		{Name: "stock tier", Doc: header + "  workloadPriorityClasses: [runplane-stock]\n", Err: "must not include runplane-stock"},
		{Name: "DRA stock namespaces alone", Doc: header + "  draStockNamespaces: [team-a]\n", Err: "draStockNamespaces needs stockNamespaces"},
	})
}
