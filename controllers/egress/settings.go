package egress

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

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
	Namespace string
	PodLabels map[string]string
	Port      int32
	CIDRs     []netip.Prefix
}

// DNSEndpoint is the cluster DNS restricted Pods may query: its Pods, and
// the ports they listen on (Service target ports: policies see the Pod's
// address and port).
type DNSEndpoint struct {
	Namespace string
	PodLabels map[string]string
	Ports     []int32
}

// Settings are the egress restriction's settings, shared by the controller
// (networkPolicy mode), AdminPolicy, make dev and the chart (whose values
// mirror DefaultSettings; charts/runplane's tests check that).
type Settings struct {
	Enforcement Enforcement
	// Priority of the AdminNetworkPolicy (0-1000, lower wins;
	// OVN-Kubernetes accepts 0-99).
	Priority int32
	NATS     NATSEndpoint
	DNS      DNSEndpoint
	// DeniedCIDRs are denied besides DeniedIPv4 and DeniedIPv6: public
	// ranges of the cluster's Pods, nodes or Services.
	DeniedCIDRs []netip.Prefix
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

// Validate checks every field, naming the flag that sets it.
func (s Settings) Validate() error {
	var errs []error
	if !slices.Contains(Enforcements, s.Enforcement) {
		errs = append(errs, fmt.Errorf("egress-enforcement %q: allowed values are %q, %q", s.Enforcement, EnforcementAdminNetworkPolicy, EnforcementNetworkPolicy))
	}
	if s.Priority < 0 || s.Priority > 1000 {
		errs = append(errs, fmt.Errorf("egress priority %d: allowed values are 0-1000", s.Priority))
	}
	if s.NATS.Namespace == "" || len(s.NATS.PodLabels) == 0 || !validPort(s.NATS.Port) {
		errs = append(errs, fmt.Errorf("NATS endpoint needs a namespace, pod labels and a port in 1-65535 (got nats-namespace %q, nats-pod-labels %v, nats-port %d)",
			s.NATS.Namespace, s.NATS.PodLabels, s.NATS.Port))
	}
	if s.DNS.Namespace == "" || len(s.DNS.PodLabels) == 0 || len(s.DNS.Ports) == 0 || slices.ContainsFunc(s.DNS.Ports, func(p int32) bool { return !validPort(p) }) {
		errs = append(errs, fmt.Errorf("cluster DNS needs a namespace, pod labels and ports in 1-65535 (got dns-namespace %q, dns-pod-labels %v, dns-ports %v)",
			s.DNS.Namespace, s.DNS.PodLabels, s.DNS.Ports))
	}
	for _, p := range s.DeniedCIDRs {
		if !p.IsValid() {
			errs = append(errs, fmt.Errorf("egress-denied-cidrs: %v is not a CIDR", p))
		}
	}
	for _, p := range s.NATS.CIDRs {
		switch {
		case !p.IsValid():
			errs = append(errs, fmt.Errorf("nats-cidrs: %v is not a CIDR", p))
		case p != p.Masked():
			// The allow would open the whole range: say so rather than guess.
			errs = append(errs, fmt.Errorf("nats-cidrs: %v has host bits set (the range is %v; a single address is /32 or /128)", p, p.Masked()))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	return nil
}

func validPort(p int32) bool { return p > 0 && p <= 65535 }

// AddFlags registers the controller's egress flags on fs, defaulting to
// DefaultSettings. The NATS flags keep their names; the rest are new.
func (s *Settings) AddFlags(fs *flag.FlagSet) {
	def := DefaultSettings()
	*s = def
	fs.Func("egress-enforcement", fmt.Sprintf("what restricts runplane.io/egress Pods: %s (the chart's AdminNetworkPolicy; the controller keeps no namespaced policy) or %s (a NetworkPolicy per namespace, which a tenant's own policy can lift) (default %s)",
		EnforcementAdminNetworkPolicy, EnforcementNetworkPolicy, def.Enforcement), func(v string) error {
		s.Enforcement = Enforcement(v)
		if !slices.Contains(Enforcements, s.Enforcement) {
			return fmt.Errorf("allowed values are %q, %q", EnforcementAdminNetworkPolicy, EnforcementNetworkPolicy)
		}
		return nil
	})
	fs.StringVar(&s.NATS.Namespace, "nats-namespace", def.NATS.Namespace, "namespace of the NATS Pods restricted egress may reach")
	labelsFlag(fs, &s.NATS.PodLabels, "nats-pod-labels", "labels of the NATS Pods, k=v[,k=v]")
	fs.Func("nats-port", fmt.Sprintf("NATS client port (default %d)", def.NATS.Port), func(v string) error { return portFlag(&s.NATS.Port, v) })
	cidrsFlag(fs, &s.NATS.CIDRs, "nats-cidrs", "addresses of an external NATS that is no Pod of the cluster, comma-separated CIDRs: restricted Pods may reach their nats-port")
	fs.StringVar(&s.DNS.Namespace, "dns-namespace", def.DNS.Namespace, "namespace of the cluster DNS Pods restricted egress may query")
	labelsFlag(fs, &s.DNS.PodLabels, "dns-pod-labels", "labels of the cluster DNS Pods, k=v[,k=v]")
	fs.Func("dns-ports", fmt.Sprintf("ports the cluster DNS Pods listen on (UDP and TCP), comma-separated (default %s)", joinPorts(def.DNS.Ports)), func(v string) error {
		s.DNS.Ports = nil
		for _, f := range strings.Split(v, ",") {
			var p int32
			if err := portFlag(&p, f); err != nil {
				return err
			}
			s.DNS.Ports = append(s.DNS.Ports, p)
		}
		return nil
	})
	cidrsFlag(fs, &s.DeniedCIDRs, "egress-denied-cidrs", "ranges restricted Pods may not reach besides the private, shared, link-local and translation ranges, comma-separated CIDRs (the cluster's public Pod, node or Service ranges)")
}

func cidrsFlag(fs *flag.FlagSet, dst *[]netip.Prefix, name, usage string) {
	fs.Func(name, usage, func(v string) error {
		*dst = nil
		if v == "" {
			return nil
		}
		for _, f := range strings.Split(v, ",") {
			p, err := netip.ParsePrefix(strings.TrimSpace(f))
			if err != nil {
				return fmt.Errorf("%q is not a CIDR: %w", f, err)
			}
			*dst = append(*dst, p)
		}
		return nil
	})
}

func labelsFlag(fs *flag.FlagSet, dst *map[string]string, name, usage string) {
	fs.Func(name, fmt.Sprintf("%s (default %s)", usage, labels.Set(*dst).String()), func(v string) error {
		set, err := labels.ConvertSelectorToLabelsMap(v)
		if err != nil {
			return fmt.Errorf("%q: %w", v, err)
		}
		if len(set) == 0 {
			return fmt.Errorf("%q: no label", v)
		}
		*dst = maps.Clone(map[string]string(set))
		return nil
	})
}

func portFlag(dst *int32, v string) error {
	p, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
	if err != nil || !validPort(int32(p)) {
		return fmt.Errorf("%q is not a port in 1-65535", v)
	}
	*dst = int32(p)
	return nil
}

func joinPorts(ports []int32) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, ",")
}
