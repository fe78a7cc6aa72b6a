package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/runplane/runplane/api"
)

// Enforcement names the object kind that restricts the egress of
// runplane.io/egress: restricted Pods.
type Enforcement string

const (
	// EnforcementAdminNetworkPolicy: one cluster-scoped AdminNetworkPolicy
	// (AdminPolicy), which the chart ships; namespace NetworkPolicies, the
	// tenants' included, cannot lift it. The controller keeps no namespaced
	// object (it removes the ones networkPolicy mode left).
	EnforcementAdminNetworkPolicy Enforcement = "adminNetworkPolicy"
	// EnforcementNetworkPolicy: the controller keeps the NetworkPolicy
	// PolicyName in every namespace with restricted Pods, for network
	// plugins without AdminNetworkPolicy. NetworkPolicies are additive: a
	// tenant's own policy that allows more lifts the restriction.
	EnforcementNetworkPolicy Enforcement = "networkPolicy"
)

// Enforcements are the allowed values of Settings.Enforcement.
var Enforcements = []Enforcement{EnforcementAdminNetworkPolicy, EnforcementNetworkPolicy}

// NATSEndpoint is where restricted Pods may reach NATS: its Pods, and the
// CIDRs of an external NATS that is no Pod of the cluster (a private
// address, which the denied ranges would close), on its client port.
type NATSEndpoint struct {
	Namespace string            `json:"namespace,omitempty"`
	PodLabels map[string]string `json:"podLabels,omitempty"`
	Port      int32             `json:"port,omitempty"`
	CIDRs     []netip.Prefix    `json:"cidrs,omitempty"`
}

// DNSEndpoint is the cluster DNS restricted Pods may query: its Pods, and
// the ports they listen on (Service target ports: policies see the Pod's
// address and port).
type DNSEndpoint struct {
	Namespace string            `json:"namespace,omitempty"`
	PodLabels map[string]string `json:"podLabels,omitempty"`
	Ports     []int32           `json:"ports,omitempty"`
}

// Settings are the egress restriction's settings, shared by the controller
// (networkPolicy mode; the key egress of its configuration file,
// controllers/config), AdminPolicy, make dev and the chart (whose values
// mirror DefaultSettings; charts/runplane's tests check that).
type Settings struct {
	Enforcement Enforcement `json:"enforcement,omitempty"`
	// Priority of the AdminNetworkPolicy (0-1000, lower wins;
	// OVN-Kubernetes accepts 0-99).
	Priority int32        `json:"priority,omitempty"`
	NATS     NATSEndpoint `json:"nats"`
	DNS      DNSEndpoint  `json:"dns"`
	// DeniedCIDRs are denied besides DeniedIPv4 and DeniedIPv6: public
	// ranges of the cluster's Pods, nodes or Services.
	DeniedCIDRs []netip.Prefix `json:"deniedCIDRs,omitempty"`
}

// DefaultSettings are the chart's defaults (values.yaml, egress and the
// bundled NATS's port).
func DefaultSettings() Settings {
	return Settings{
		Enforcement: EnforcementAdminNetworkPolicy,
		Priority:    10,
		NATS:        NATSEndpoint{Namespace: api.DefaultNamespace, PodLabels: map[string]string{"app.kubernetes.io/name": "nats"}, Port: 4222},
		DNS:         DNSEndpoint{Namespace: "kube-system", PodLabels: map[string]string{"k8s-app": "kube-dns"}, Ports: []int32{53}},
	}
}

// Validate checks every field, naming its key in the controller's
// configuration file.
func (s Settings) Validate() error {
	var errs []error
	if !slices.Contains(Enforcements, s.Enforcement) {
		errs = append(errs, fmt.Errorf("enforcement %q: allowed values are %q, %q", s.Enforcement, EnforcementAdminNetworkPolicy, EnforcementNetworkPolicy))
	}
	if s.Priority < 0 || s.Priority > 1000 {
		errs = append(errs, fmt.Errorf("priority %d: allowed values are 0-1000", s.Priority))
	}
	if s.NATS.Namespace == "" || len(s.NATS.PodLabels) == 0 || !validPort(s.NATS.Port) {
		errs = append(errs, fmt.Errorf("nats: needs a namespace, pod labels and a port in 1-65535 (got nats.namespace %q, nats.podLabels %v, nats.port %d)",
			s.NATS.Namespace, s.NATS.PodLabels, s.NATS.Port))
	}
	if s.DNS.Namespace == "" || len(s.DNS.PodLabels) == 0 || len(s.DNS.Ports) == 0 || slices.ContainsFunc(s.DNS.Ports, func(p int32) bool { return !validPort(p) }) {
		errs = append(errs, fmt.Errorf("dns: cluster DNS needs a namespace, pod labels and ports in 1-65535 (got dns.namespace %q, dns.podLabels %v, dns.ports %v)",
			s.DNS.Namespace, s.DNS.PodLabels, s.DNS.Ports))
	}
	if _, err := labels.ValidatedSelectorFromSet(s.NATS.PodLabels); err != nil {
		errs = append(errs, fmt.Errorf("nats.podLabels: %w", err))
	}
	if _, err := labels.ValidatedSelectorFromSet(s.DNS.PodLabels); err != nil {
		errs = append(errs, fmt.Errorf("dns.podLabels: %w", err))
	}
	for _, p := range s.DeniedCIDRs {
		if !p.IsValid() {
			errs = append(errs, fmt.Errorf("deniedCIDRs: %v is not a CIDR", p))
		}
	}
	for _, p := range s.NATS.CIDRs {
		switch {
		case !p.IsValid():
			errs = append(errs, fmt.Errorf("nats.cidrs: %v is not a CIDR", p))
		case p != p.Masked():
			// The allow would open the whole range: say so rather than guess.
			errs = append(errs, fmt.Errorf("nats.cidrs: %v has host bits set (the range is %v; a single address is /32 or /128)", p, p.Masked()))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	return nil
}

func validPort(p int32) bool { return p > 0 && p <= 65535 }
