package egress

import (
	"maps"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
)

// PolicyName is the controller-owned NetworkPolicy of a namespace
// (networkPolicy mode).
const PolicyName = "runplane-egress"

// Policy is the desired NetworkPolicy of a namespace in networkPolicy mode:
// DNS to the cluster DNS Pods, NATS's client port, and every port but 53 of
// the internet outside the denied ranges; nothing else. It shares no slice or
// map with package state: the client decodes API answers into it in place.
func Policy(namespace string, s Settings) *networkingv1.NetworkPolicy {
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	natsPort := intstr.FromInt32(s.NATS.Port)
	var dnsPorts []networkingv1.NetworkPolicyPort
	for _, p := range s.DNS.Ports {
		port := intstr.FromInt32(p)
		dnsPorts = append(dnsPorts, networkingv1.NetworkPolicyPort{Protocol: &udp, Port: &port}, networkingv1.NetworkPolicyPort{Protocol: &tcp, Port: &port})
	}
	rules := []networkingv1.NetworkPolicyEgressRule{
		{To: []networkingv1.NetworkPolicyPeer{podsPeerNP(s.DNS.Namespace, s.DNS.PodLabels)}, Ports: dnsPorts},
		{To: natsPeersNP(s.NATS), Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &natsPort}}},
	}
	if public := publicPeers(deniedPrefixes(s.DeniedCIDRs)); len(public) > 0 {
		rules = append(rules, networkingv1.NetworkPolicyEgressRule{To: public, Ports: allPortsBut(dnsPort)})
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: PolicyName, Namespace: namespace,
			Labels: map[string]string{api.LabelManagedBy: api.ManagedByController}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{api.LabelEgress: api.EgressRestricted}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      rules,
		},
	}
}

// publicPeers are 0.0.0.0/0 and ::/0 except the denied ranges; a family a
// denied range covers whole has no peer (an except must be narrower than
// its CIDR).
func publicPeers(denied []netip.Prefix) []networkingv1.NetworkPolicyPeer {
	var peers []networkingv1.NetworkPolicyPeer
	for _, all := range []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")} {
		block := &networkingv1.IPBlock{CIDR: all.String()}
		whole := false
		for _, p := range denied {
			if p.Addr().Is4() != all.Addr().Is4() {
				continue
			}
			if p.Bits() == 0 {
				whole = true
				break
			}
			block.Except = append(block.Except, p.String())
		}
		if !whole {
			peers = append(peers, networkingv1.NetworkPolicyPeer{IPBlock: block})
		}
	}
	return peers
}

// allPortsBut is every TCP, UDP and SCTP port except one: a NetworkPolicy
// only allows, so "not port 53" is the ranges around it.
func allPortsBut(port int32) []networkingv1.NetworkPolicyPort {
	var out []networkingv1.NetworkPolicyPort
	for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP} {
		for _, r := range [][2]int32{{1, port - 1}, {port + 1, 65535}} {
			out = append(out, networkingv1.NetworkPolicyPort{Protocol: ptr.To(proto), Port: ptr.To(intstr.FromInt32(r[0])), EndPort: ptr.To(r[1])})
		}
	}
	return out
}

// natsPeersNP are the NATS Pods and, for an external NATS, its ipBlocks.
func natsPeersNP(n NATSEndpoint) []networkingv1.NetworkPolicyPeer {
	peers := []networkingv1.NetworkPolicyPeer{podsPeerNP(n.Namespace, n.PodLabels)}
	for _, p := range n.CIDRs {
		peers = append(peers, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: p.String()}})
	}
	return peers
}

func podsPeerNP(namespace string, podLabels map[string]string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: namespace}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: maps.Clone(podLabels)},
	}
}
