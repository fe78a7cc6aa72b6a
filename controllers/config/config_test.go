package config

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/controllers/egress"
)

const header = "apiVersion: runplane.io/v1alpha1\nkind: ControllerConfiguration\nimage: runplane:1\n"

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name, doc, err string
		check          func(t *testing.T, c *ControllerConfiguration)
	}{
		{name: "image only: the defaults", doc: header, check: func(t *testing.T, c *ControllerConfiguration) {
			want := New()
			want.Image = "runplane:1"
			assert.Equal(t, want, c)
			assert.Equal(t, 6*time.Hour, c.PrepareDeadline.Duration)
			assert.True(t, *c.LeaderElection.LeaderElect)
			assert.Equal(t, egress.DefaultSettings(), c.Egress, "the egress defaults are egress.DefaultSettings")
		}},
		{name: "the NATS namespace follows the namespace", doc: header + "namespace: rp\n", check: func(t *testing.T, c *ControllerConfiguration) {
			assert.Equal(t, "rp", c.Egress.NATS.Namespace)
		}},
		{name: "egress", doc: header + "egress:\n  enforcement: networkPolicy\n  dns:\n    ports: [53, 1053]\n  nats:\n    podLabels: {app: nats}\n    cidrs: [192.168.1.7/32]\n  deniedCIDRs: [203.0.113.0/24, 2001:db8::/32]\n",
			check: func(t *testing.T, c *ControllerConfiguration) {
				assert.Equal(t, egress.EnforcementNetworkPolicy, c.Egress.Enforcement)
				assert.Equal(t, []int32{53, 1053}, c.Egress.DNS.Ports)
				assert.Equal(t, egress.DefaultSettings().DNS.PodLabels, c.Egress.DNS.PodLabels)
				assert.Equal(t, egress.NATSEndpoint{Namespace: "runplane-system", PodLabels: map[string]string{"app": "nats"}, Port: 4222,
					CIDRs: []netip.Prefix{netip.MustParsePrefix("192.168.1.7/32")}}, c.Egress.NATS)
				assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("2001:db8::/32")}, c.Egress.DeniedCIDRs)
			}},
		{name: "accessor namespaces", doc: header + "accessorAllowedNamespaces: team=a\n", check: func(t *testing.T, c *ControllerConfiguration) {
			sel, err := c.AccessorNamespaces()
			require.NoError(t, err)
			assert.Equal(t, map[string]string{"team": "a"}, sel.MatchLabels)
		}},
		{name: "metrics certificate", doc: header + "metrics:\n  tlsSecret: rp/m\n  tlsHosts: [m.rp.svc]\n", check: func(t *testing.T, c *ControllerConfiguration) {
			cert, err := c.Metrics.ServingCert()
			require.NoError(t, err)
			assert.Equal(t, "m", cert.Secret.Name)
			assert.Equal(t, []string{"m.rp.svc"}, cert.Hosts)
		}},
		{name: "no image", doc: "apiVersion: runplane.io/v1alpha1\nkind: ControllerConfiguration\n", err: "image: required"},
		{name: "unknown key named", doc: header + "egress:\n  nats:\n    prot: 4222\n", err: `unknown field "egress.nats.prot"`},
		{name: "another kind", doc: "apiVersion: runplane.io/v1alpha1\nkind: WebhookConfiguration\n", err: "want runplane.io/v1alpha1, ControllerConfiguration"},
		{name: "enforcement", doc: header + "egress:\n  enforcement: cilium\n", err: `egress: enforcement "cilium": allowed values are "adminNetworkPolicy", "networkPolicy"`},
		{name: "not a CIDR", doc: header + "egress:\n  deniedCIDRs: [10.0.0.0/33]\n", err: "10.0.0.0/33"},
		{name: "host bits", doc: header + "egress:\n  nats:\n    cidrs: [192.168.1.7/24]\n", err: "nats.cidrs: 192.168.1.7/24 has host bits set"},
		{name: "bad label", doc: header + "egress:\n  dns:\n    podLabels: {\"a b\": c}\n", err: "dns.podLabels"},
		{name: "port", doc: header + "egress:\n  nats:\n    port: 70000\n", err: "nats.port 70000"},
		{name: "selector", doc: header + "accessorAllowedNamespaces: team near a\n", err: `accessorAllowedNamespaces "team near a": `},
		{name: "metrics Secret", doc: header + "metrics:\n  tlsSecret: m\n  tlsHosts: [m]\n", err: `metrics.tlsSecret: metrics TLS Secret "m": want namespace/name`},
		{name: "negative deadline", doc: header + "prepareDeadline: -1h\n", err: "prepareDeadline: -1h0m0s: want a positive duration"},
		{name: "metrics hosts", doc: header + "metrics:\n  tlsSecret: rp/m\n", err: "metrics.tlsHosts: needed with metrics.tlsSecret"},
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
