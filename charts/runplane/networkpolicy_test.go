package chart_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNetworkPolicies renders the chart's NetworkPolicies and checks who
// may reach which port of each runplane Pod (README.md, "Network
// policies"), and that networkPolicy.enabled=false renders none.
func TestNetworkPolicies(t *testing.T) {
	needHelm(t)
	objs := parse(t, mustRender(t, "--set", "networkPolicy.webhook.from[0].ipBlock.cidr=10.0.0.0/24"))
	policy := func(name string) networkingv1.NetworkPolicy {
		var p networkingv1.NetworkPolicy
		find(t, objs, "NetworkPolicy", name).into(t, &p)
		require.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, p.Spec.PolicyTypes, name)
		require.Equal(t, name[len("runplane-"):], p.Spec.PodSelector.MatchLabels["app.kubernetes.io/component"], name)
		return p
	}
	// from returns the peers of the rule for port; ok false when no rule names it.
	from := func(p networkingv1.NetworkPolicy, port string) (peers []networkingv1.NetworkPolicyPeer, ok bool) {
		for _, r := range p.Spec.Ingress {
			if slices.ContainsFunc(r.Ports, func(pp networkingv1.NetworkPolicyPort) bool { return pp.Port.String() == port }) {
				return r.From, true
			}
		}
		return nil, false
	}
	monitoring := []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{
		MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}}}}

	nats := policy("runplane-nats")
	client, ok := from(nats, "client")
	require.True(t, ok, "NATS client port")
	require.Len(t, client, 2)
	assert.Equal(t, "queue", client[0].PodSelector.MatchLabels["app.kubernetes.io/component"], "the queue")
	assert.Nil(t, client[0].NamespaceSelector, "the queue of the release namespace only")
	assert.NotNil(t, client[1].NamespaceSelector, "workers of any namespace")
	assert.Equal(t, "runplane.io/pool", client[1].PodSelector.MatchExpressions[0].Key, "workers labelled with a pool")
	mon, ok := from(nats, "monitor")
	require.True(t, ok)
	assert.Equal(t, monitoring, mon, "NATS monitor")
	cl, ok := from(nats, "cluster")
	require.True(t, ok)
	assert.Equal(t, "nats", cl[0].PodSelector.MatchLabels["app.kubernetes.io/component"])

	queue := policy("runplane-queue")
	peers, ok := from(queue, "http")
	require.True(t, ok)
	assert.Empty(t, peers, "the queue is open to every caller by default")
	peers, ok = from(queue, "metrics")
	require.True(t, ok, "the queue's metrics port")
	assert.Equal(t, monitoring, peers, "the queue's metrics: monitoring only, not its callers")

	webhook := policy("runplane-webhook")
	peers, ok = from(webhook, "https")
	require.True(t, ok)
	require.Len(t, peers, 2)
	assert.Equal(t, "10.0.0.0/24", peers[0].IPBlock.CIDR, "networkPolicy.webhook.from")
	assert.Equal(t, monitoring, peers[1:], "monitoring scrapes /metrics on the HTTPS port")
	peers, ok = from(webhook, "health")
	require.True(t, ok, "the webhook's probes")
	assert.Empty(t, peers)

	for _, name := range []string{"runplane-controller", "runplane-scheduler"} {
		peers, ok := from(policy(name), "metrics")
		require.True(t, ok, name)
		assert.Equal(t, monitoring, peers, name)
	}
	// The extender's verbs are on loopback: no policy names their port.
	_, ok = from(policy("runplane-scheduler"), "8443")
	assert.False(t, ok, "the extender's verb port is reachable")

	for _, o := range parse(t, mustRender(t, "--set", "networkPolicy.enabled=false")) {
		assert.NotEqual(t, "NetworkPolicy", o.kind(), "networkPolicy.enabled=false rendered %s", o.name())
	}
}
