package egress

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/utils/ptr"
	npav1alpha1 "sigs.k8s.io/network-policy-api/apis/v1alpha1"
)

// TestDeniedRanges checks the denied ranges against addresses that must and
// must not be reachable.
func TestDeniedRanges(t *testing.T) {
	tests := []struct {
		addr   string
		denied bool
	}{
		{"10.96.0.10", true},         // cluster service
		{"172.20.1.1", true},         // RFC 1918
		{"172.32.0.1", false},        // just outside 172.16/12
		{"192.168.1.1", true},        // RFC 1918
		{"100.64.0.1", true},         // CGNAT
		{"169.254.169.254", true},    // cloud metadata
		{"0.0.0.0", true},            // the host's own listeners
		{"224.0.0.251", true},        // multicast (mDNS)
		{"8.8.8.8", false},           // public
		{"fd00::1", true},            // unique local
		{"fe80::1", true},            // link local
		{"64:ff9b::a9fe:a9fe", true}, // NAT64 of 169.254.169.254
		{"64:ff9b:1::a00:1", true},   // local-use NAT64
		{"2002:a00:1::1", true},      // 6to4 of 10.0.0.1
		{"2001:4860::8888", false},   // public
		{"203.0.113.7", true},        // DeniedCIDRs below
	}
	prefixes := deniedPrefixes([]netip.Prefix{netip.MustParsePrefix("203.0.113.9/24")})
	for _, tt := range tests {
		a := netip.MustParseAddr(tt.addr)
		got := slices.ContainsFunc(prefixes, func(p netip.Prefix) bool { return p.Contains(a) })
		assert.Equal(t, tt.denied, got, "%s denied", tt.addr)
	}
	assert.Contains(t, prefixes, netip.MustParsePrefix("203.0.113.0/24"), "an extra range in canonical form")
}

func TestSettingsValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Settings)
		want   string
	}{
		{"defaults", func(*Settings) {}, ""},
		{"no labels", func(s *Settings) { s.NATS.PodLabels = nil }, "nats.podLabels"},
		{"bad label", func(s *Settings) { s.DNS.PodLabels = map[string]string{"a b": "c"} }, "dns.podLabels"},
		{"no port", func(s *Settings) { s.NATS.Port = 0 }, "nats.port"},
		{"no namespace", func(s *Settings) { s.NATS.Namespace = "" }, "nats.namespace"},
		{"no DNS port", func(s *Settings) { s.DNS.Ports = nil }, "dns.ports"},
		{"DNS port out of range", func(s *Settings) { s.DNS.Ports = []int32{70000} }, "dns.ports"},
		{"mode", func(s *Settings) { s.Enforcement = "calico" }, `enforcement "calico": allowed values are "adminNetworkPolicy", "networkPolicy"`},
		{"priority", func(s *Settings) { s.Priority = 1001 }, "0-1000"},
		{"NATS CIDRs", func(s *Settings) {
			s.NATS.CIDRs = []netip.Prefix{netip.MustParsePrefix("192.168.1.7/32"), netip.MustParsePrefix("fd00::/64")}
		}, ""},
		{"NATS CIDR host bits", func(s *Settings) { s.NATS.CIDRs = []netip.Prefix{netip.MustParsePrefix("192.168.1.7/24")} }, "nats.cidrs: 192.168.1.7/24 has host bits set"},
		{"NATS CIDR invalid", func(s *Settings) { s.NATS.CIDRs = []netip.Prefix{{}} }, "nats.cidrs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := DefaultSettings()
			tt.modify(&s)
			err := s.Validate()
			if tt.want == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// TestNetworkPolicy: networkPolicy mode's policy allows DNS only to the
// cluster DNS Pods (the old one allowed port 53 to any address), closes
// NAT64 and the extra ranges, and never opens port 53 to the internet.
func TestNetworkPolicy(t *testing.T) {
	s := DefaultSettings()
	s.DeniedCIDRs = []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("2001:db8::/32")}
	np := Policy("team-a", s)
	require.Len(t, np.Spec.Egress, 3)
	for _, r := range np.Spec.Egress {
		require.NotEmpty(t, r.To, "a rule without destinations allows every address: %+v", r)
		require.NotEmpty(t, r.Ports, "a rule without ports allows every port: %+v", r)
	}
	dns := np.Spec.Egress[0]
	assert.Equal(t, map[string]string{"kubernetes.io/metadata.name": "kube-system"}, dns.To[0].NamespaceSelector.MatchLabels)
	assert.Equal(t, map[string]string{"k8s-app": "kube-dns"}, dns.To[0].PodSelector.MatchLabels)
	public := np.Spec.Egress[2]
	require.Len(t, public.To, 2)
	assert.Equal(t, "0.0.0.0/0", public.To[0].IPBlock.CIDR)
	assert.Contains(t, public.To[0].IPBlock.Except, "203.0.113.0/24")
	assert.Equal(t, "::/0", public.To[1].IPBlock.CIDR)
	assert.Subset(t, public.To[1].IPBlock.Except, []string{"64:ff9b::/96", "64:ff9b:1::/48", "2001:db8::/32", "fc00::/7"})
	for _, p := range public.Ports {
		assert.False(t, p.Port.IntVal <= 53 && 53 <= ptr.Deref(p.EndPort, p.Port.IntVal), "port 53 open to the internet: %+v", p)
	}
	covered := func(proto string, port int32) bool {
		return slices.ContainsFunc(public.Ports, func(p networkingv1.NetworkPolicyPort) bool {
			return string(*p.Protocol) == proto && p.Port.IntVal <= port && port <= *p.EndPort
		})
	}
	for _, port := range []int32{1, 52, 54, 443, 65535} {
		assert.True(t, covered("TCP", port) && covered("UDP", port), "port %d closed to the internet", port)
	}

	// A denied range that covers a family drops that family's peer (an
	// except must be narrower than its CIDR).
	s.DeniedCIDRs = []netip.Prefix{netip.MustParsePrefix("::/0")}
	public = Policy("team-a", s).Spec.Egress[2]
	require.Len(t, public.To, 1)
	assert.Equal(t, "0.0.0.0/0", public.To[0].IPBlock.CIDR)
}

// TestAdminPolicy: the rules in their order, and extra ranges beyond one
// peer's 25 CIDRs spread over more peers.
func TestAdminPolicy(t *testing.T) {
	s := DefaultSettings()
	for i := range 30 {
		s.DeniedCIDRs = append(s.DeniedCIDRs, netip.PrefixFrom(netip.AddrFrom4([4]byte{203, 0, byte(i), 0}), 24))
	}
	anp := AdminPolicy(s)
	assert.Equal(t, "runplane-egress", anp.Name)
	assert.Equal(t, int32(10), anp.Spec.Priority)
	require.NotNil(t, anp.Spec.Subject.Pods)
	assert.Empty(t, anp.Spec.Subject.Pods.NamespaceSelector.MatchLabels, "every namespace")
	assert.Equal(t, map[string]string{"runplane.io/egress": "restricted"}, anp.Spec.Subject.Pods.PodSelector.MatchLabels)
	var names []string
	var actions []npav1alpha1.AdminNetworkPolicyRuleAction
	for _, r := range anp.Spec.Egress {
		names, actions = append(names, r.Name), append(actions, r.Action)
	}
	assert.Equal(t, []string{"allow-nats", "allow-cluster-dns", "deny-pods-and-nodes", "deny-other-dns", "deny-private-networks"}, names)
	assert.Equal(t, []npav1alpha1.AdminNetworkPolicyRuleAction{"Allow", "Allow", "Deny", "Deny", "Deny"}, actions)
	assert.Equal(t, []npav1alpha1.AdminNetworkPolicyPort{{PortNumber: &npav1alpha1.Port{Protocol: "TCP", Port: 4222}}}, *anp.Spec.Egress[0].Ports)
	assert.Len(t, *anp.Spec.Egress[1].Ports, 2, "UDP and TCP 53")
	assert.Nil(t, anp.Spec.Egress[2].Ports, "every port of every Pod")
	denied := anp.Spec.Egress[4].To
	total := 0
	for _, peer := range denied {
		assert.LessOrEqual(t, len(peer.Networks), 25, "one peer holds at most 25 networks")
		total += len(peer.Networks)
	}
	assert.Equal(t, len(DeniedIPv4)+len(DeniedIPv6)+30, total)
	assert.Contains(t, denied[len(denied)-1].Networks, npav1alpha1.CIDR("203.0.29.0/24"))
}

// TestExternalNATS: an external NATS's CIDRs join the NATS rule, on the NATS
// port only, in both modes (the denied ranges would close a private one).
func TestExternalNATS(t *testing.T) {
	s := DefaultSettings()
	s.NATS.CIDRs = []netip.Prefix{netip.MustParsePrefix("192.168.1.7/32"), netip.MustParsePrefix("fd00:1::/64")}
	anp := AdminPolicy(s).Spec.Egress[0]
	require.Equal(t, "allow-nats", anp.Name)
	require.Len(t, anp.To, 2)
	assert.NotNil(t, anp.To[0].Pods)
	assert.Equal(t, []npav1alpha1.CIDR{"192.168.1.7/32", "fd00:1::/64"}, anp.To[1].Networks)
	assert.Equal(t, []npav1alpha1.AdminNetworkPolicyPort{{PortNumber: &npav1alpha1.Port{Protocol: "TCP", Port: 4222}}}, *anp.Ports)

	np := Policy("team-a", s).Spec.Egress[1]
	require.Len(t, np.To, 3)
	assert.NotNil(t, np.To[0].PodSelector)
	assert.Equal(t, &networkingv1.IPBlock{CIDR: "192.168.1.7/32"}, np.To[1].IPBlock)
	assert.Equal(t, &networkingv1.IPBlock{CIDR: "fd00:1::/64"}, np.To[2].IPBlock)
	require.Len(t, np.Ports, 1)
	assert.Equal(t, int32(4222), np.Ports[0].Port.IntVal)

	assert.Len(t, AdminPolicy(DefaultSettings()).Spec.Egress[0].To, 1, "no CIDRs: the Pods only")
}
