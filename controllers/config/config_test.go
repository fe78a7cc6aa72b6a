package config

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/controllers/egress"
	"github.com/runplane/runplane/internal/configfile"
	"github.com/runplane/runplane/internal/configfile/configfiletest"
)

const header = "apiVersion: runplane.io/v1alpha1\nkind: ControllerConfiguration\nimage: runplane:1\n"

func TestDecode(t *testing.T) {
	configfiletest.Decode(t, []configfiletest.Case[ControllerConfiguration]{
		{Name: "image only: the defaults", Doc: header, Check: func(t *testing.T, c *ControllerConfiguration) {
			want := configfile.New[ControllerConfiguration]()
			want.Image = "runplane:1"
			assert.Equal(t, want, c)
			assert.Equal(t, 6*time.Hour, c.PrepareDeadline.Duration)
			assert.True(t, *c.LeaderElection.LeaderElect)
			assert.Equal(t, egress.DefaultSettings(), c.Egress, "the egress defaults are egress.DefaultSettings")
		}},
		{Name: "the NATS namespace follows the namespace", Doc: header + "namespace: rp\n", Check: func(t *testing.T, c *ControllerConfiguration) {
			assert.Equal(t, "rp", c.Egress.NATS.Namespace)
		}},
		{Name: "egress", Doc: header + "egress:\n  enforcement: networkPolicy\n  dns:\n    ports: [53, 1053]\n  nats:\n    podLabels: {app: nats}\n    cidrs: [192.168.1.7/32]\n  deniedCIDRs: [203.0.113.0/24, 2001:db8::/32]\n",
			Check: func(t *testing.T, c *ControllerConfiguration) {
				assert.Equal(t, egress.EnforcementNetworkPolicy, c.Egress.Enforcement)
				assert.Equal(t, []int32{53, 1053}, c.Egress.DNS.Ports)
				assert.Equal(t, egress.DefaultSettings().DNS.PodLabels, c.Egress.DNS.PodLabels)
				assert.Equal(t, egress.NATSEndpoint{Namespace: "runplane-system", PodLabels: map[string]string{"app": "nats"}, Port: 4222,
					CIDRs: []netip.Prefix{netip.MustParsePrefix("192.168.1.7/32")}}, c.Egress.NATS)
				assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("2001:db8::/32")}, c.Egress.DeniedCIDRs)
			}},
		{Name: "accessor namespaces", Doc: header + "accessorAllowedNamespaces: team=a\n", Check: func(t *testing.T, c *ControllerConfiguration) {
			sel, err := c.AccessorNamespaces()
			require.NoError(t, err)
			assert.Equal(t, map[string]string{"team": "a"}, sel.MatchLabels)
		}},
		{Name: "metrics certificate", Doc: header + "metrics:\n  tlsSecret: rp/m\n  tlsHosts: [m.rp.svc]\n", Check: func(t *testing.T, c *ControllerConfiguration) {
			cert, err := c.Metrics.ServingCert()
			require.NoError(t, err)
			assert.Equal(t, "m", cert.Secret.Name)
			assert.Equal(t, []string{"m.rp.svc"}, cert.Hosts)
		}},
		{Name: "no image", Doc: "apiVersion: runplane.io/v1alpha1\nkind: ControllerConfiguration\n", Err: "image: required"},
		{Name: "unknown key named", Doc: header + "egress:\n  nats:\n    prot: 4222\n", Err: `unknown field "egress.nats.prot"`},
		{Name: "another kind", Doc: "apiVersion: runplane.io/v1alpha1\nkind: WebhookConfiguration\n", Err: "want runplane.io/v1alpha1, ControllerConfiguration"},
		{Name: "enforcement", Doc: header + "egress:\n  enforcement: cilium\n", Err: `egress: enforcement "cilium": allowed values are "adminNetworkPolicy", "networkPolicy"`},
		{Name: "not a CIDR", Doc: header + "egress:\n  deniedCIDRs: [10.0.0.0/33]\n", Err: "10.0.0.0/33"},
		{Name: "host bits", Doc: header + "egress:\n  nats:\n    cidrs: [192.168.1.7/24]\n", Err: "nats.cidrs: 192.168.1.7/24 has host bits set"},
		{Name: "bad label", Doc: header + "egress:\n  dns:\n    podLabels: {\"a b\": c}\n", Err: "dns.podLabels"},
		{Name: "port", Doc: header + "egress:\n  nats:\n    port: 70000\n", Err: "nats.port 70000"},
		{Name: "selector", Doc: header + "accessorAllowedNamespaces: team near a\n", Err: `accessorAllowedNamespaces "team near a": `},
		{Name: "metrics Secret", Doc: header + "metrics:\n  tlsSecret: m\n  tlsHosts: [m]\n", Err: `metrics.tlsSecret: metrics TLS Secret "m": want namespace/name`},
		{Name: "negative deadline", Doc: header + "prepareDeadline: -1h\n", Err: "prepareDeadline: -1h0m0s: want a positive duration"},
		{Name: "metrics hosts", Doc: header + "metrics:\n  tlsSecret: rp/m\n", Err: "metrics.tlsHosts: needed with metrics.tlsSecret"},
	})
}
