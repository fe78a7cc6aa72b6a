package egress

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestDeniedRanges checks the denied ranges against addresses that must and
// must not be reachable.
func TestDeniedRanges(t *testing.T) {
	tests := []struct {
		addr   string
		denied bool
	}{
		{"10.96.0.10", true},       // cluster service
		{"172.20.1.1", true},       // RFC 1918
		{"172.32.0.1", false},      // just outside 172.16/12
		{"192.168.1.1", true},      // RFC 1918
		{"100.64.0.1", true},       // CGNAT
		{"169.254.169.254", true},  // cloud metadata
		{"8.8.8.8", false},         // public
		{"fd00::1", true},          // unique local
		{"fe80::1", true},          // link local
		{"2001:4860::8888", false}, // public
	}
	var prefixes []netip.Prefix
	for _, c := range slices.Concat(DeniedIPv4, DeniedIPv6) {
		prefixes = append(prefixes, netip.MustParsePrefix(c))
	}
	for _, tt := range tests {
		a := netip.MustParseAddr(tt.addr)
		got := slices.ContainsFunc(prefixes, func(p netip.Prefix) bool { return p.Contains(a) })
		assert.Equal(t, tt.denied, got, "%s denied", tt.addr)
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		nats NATSEndpoint
		ok   bool
	}{
		{"complete", NATSEndpoint{Namespace: "runplane-system", PodLabels: map[string]string{"app": "nats"}, Port: 4222}, true},
		{"no labels", NATSEndpoint{Namespace: "runplane-system", Port: 4222}, false},
		{"no port", NATSEndpoint{Namespace: "runplane-system", PodLabels: map[string]string{"app": "nats"}}, false},
		{"no namespace", NATSEndpoint{PodLabels: map[string]string{"app": "nats"}, Port: 4222}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := (Options{NATS: tt.nats}).validate()
			if tt.ok {
				assert.NoError(t, err)
			} else {
				assert.Error(t, err)
			}
		})
	}
}
