package egress

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	npav1alpha1 "sigs.k8s.io/network-policy-api/apis/v1alpha1"

	"github.com/runplane/runplane/api"
)

// AdminPolicyName names the cluster-scoped AdminNetworkPolicy.
const AdminPolicyName = "runplane-egress"

// maxNetworks is the most CIDRs one AdminNetworkPolicy peer holds.
const maxNetworks = 25

// dnsPort is DNS's port: restricted Pods query the cluster DNS only.
const dnsPort = 53

// AdminPolicy is the AdminNetworkPolicy (policy.networking.k8s.io/v1alpha1,
// experimental channel: networks and nodes peers) that restricts every
// runplane.io/egress: restricted Pod of every namespace. Its rules, first
// match wins, all ahead of any NetworkPolicy:
//  1. Allow TCP to the client port of the NATS Pods and NATS.CIDRs.
//  2. Allow UDP and TCP to the cluster DNS Pods' ports.
//  3. Deny every Pod (other tenants', NATS's monitor and cluster ports,
//     the DNS Pods' other ports) and node.
//  4. Deny port 53 anywhere else: DNS goes to the cluster DNS.
//  5. Deny the private, shared, link-local and translation ranges and
//     Settings.DeniedCIDRs (nodes, the kubelet and cloud metadata by
//     address: not every implementation matches nodes by address).
//
// What no rule matches (the public internet) passes to NetworkPolicies,
// which may restrict it further but never lift rules 3-5. The chart renders
// the same object (templates/egress.yaml); make dev applies this one.
func AdminPolicy(s Settings) *npav1alpha1.AdminNetworkPolicy {
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	var dnsPorts []npav1alpha1.AdminNetworkPolicyPort
	for _, p := range s.DNS.Ports {
		dnsPorts = append(dnsPorts, portNumber(udp, p), portNumber(tcp, p))
	}
	var denied []npav1alpha1.AdminNetworkPolicyEgressPeer
	for chunk := range slices.Chunk(deniedPrefixes(s.DeniedCIDRs), maxNetworks) {
		networks := make([]npav1alpha1.CIDR, len(chunk))
		for i, p := range chunk {
			networks[i] = npav1alpha1.CIDR(p.String())
		}
		denied = append(denied, npav1alpha1.AdminNetworkPolicyEgressPeer{Networks: networks})
	}
	return &npav1alpha1.AdminNetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: npav1alpha1.GroupVersion.String(), Kind: "AdminNetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: AdminPolicyName},
		Spec: npav1alpha1.AdminNetworkPolicySpec{
			Priority: s.Priority,
			Subject: npav1alpha1.AdminNetworkPolicySubject{Pods: &npav1alpha1.NamespacedPod{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{api.LabelEgress: api.EgressRestricted}},
			}},
			Egress: []npav1alpha1.AdminNetworkPolicyEgressRule{
				{
					Name: "allow-nats", Action: npav1alpha1.AdminNetworkPolicyRuleActionAllow,
					To:    natsPeers(s.NATS),
					Ports: &[]npav1alpha1.AdminNetworkPolicyPort{portNumber(tcp, s.NATS.Port)},
				},
				{
					Name: "allow-cluster-dns", Action: npav1alpha1.AdminNetworkPolicyRuleActionAllow,
					To:    []npav1alpha1.AdminNetworkPolicyEgressPeer{podsPeer(s.DNS.Namespace, s.DNS.PodLabels)},
					Ports: &dnsPorts,
				},
				{
					Name: "deny-pods-and-nodes", Action: npav1alpha1.AdminNetworkPolicyRuleActionDeny,
					To: []npav1alpha1.AdminNetworkPolicyEgressPeer{{Namespaces: &metav1.LabelSelector{}}, {Nodes: &metav1.LabelSelector{}}},
				},
				{
					Name: "deny-other-dns", Action: npav1alpha1.AdminNetworkPolicyRuleActionDeny,
					To:    []npav1alpha1.AdminNetworkPolicyEgressPeer{{Networks: []npav1alpha1.CIDR{"0.0.0.0/0", "::/0"}}},
					Ports: &[]npav1alpha1.AdminNetworkPolicyPort{portNumber(udp, dnsPort), portNumber(tcp, dnsPort)},
				},
				{Name: "deny-private-networks", Action: npav1alpha1.AdminNetworkPolicyRuleActionDeny, To: denied},
			},
		},
	}
}

// natsPeers are the NATS Pods and, for an external NATS, its networks.
func natsPeers(n NATSEndpoint) []npav1alpha1.AdminNetworkPolicyEgressPeer {
	peers := []npav1alpha1.AdminNetworkPolicyEgressPeer{podsPeer(n.Namespace, n.PodLabels)}
	for chunk := range slices.Chunk(n.CIDRs, maxNetworks) {
		networks := make([]npav1alpha1.CIDR, len(chunk))
		for i, p := range chunk {
			networks[i] = npav1alpha1.CIDR(p.String())
		}
		peers = append(peers, npav1alpha1.AdminNetworkPolicyEgressPeer{Networks: networks})
	}
	return peers
}

func podsPeer(namespace string, podLabels map[string]string) npav1alpha1.AdminNetworkPolicyEgressPeer {
	return npav1alpha1.AdminNetworkPolicyEgressPeer{Pods: &npav1alpha1.NamespacedPod{
		NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: namespace}},
		PodSelector:       metav1.LabelSelector{MatchLabels: maps.Clone(podLabels)},
	}}
}

func portNumber(protocol corev1.Protocol, port int32) npav1alpha1.AdminNetworkPolicyPort {
	return npav1alpha1.AdminNetworkPolicyPort{PortNumber: &npav1alpha1.Port{Protocol: protocol, Port: port}}
}

// ErrAdminPolicyNotServed: the cluster serves no AdminNetworkPolicy (the
// network plugin's CRDs are not installed).
var ErrAdminPolicyNotServed = errors.New("the cluster serves no " + npav1alpha1.GroupVersion.String() + " AdminNetworkPolicy")

// ApplyAdminPolicy creates or updates AdminPolicy(s) with a client whose
// scheme knows policy.networking.k8s.io/v1alpha1 (npav1alpha1.Install):
// what the chart does, for make dev and tests without helm.
func ApplyAdminPolicy(ctx context.Context, c client.Client, s Settings) error {
	if err := s.Validate(); err != nil {
		return err
	}
	want := AdminPolicy(s)
	anp := &npav1alpha1.AdminNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: want.Name}}
	_, err := controllerutil.CreateOrUpdate(ctx, c, anp, func() error {
		anp.Spec = want.Spec
		return nil
	})
	if meta.IsNoMatchError(err) {
		return fmt.Errorf("%w: %w", ErrAdminPolicyNotServed, err)
	}
	if err != nil {
		return fmt.Errorf("AdminNetworkPolicy %s: %w", want.Name, err)
	}
	return nil
}
