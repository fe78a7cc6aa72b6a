package mutate

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/api"
)

// A pool Pod resolves runplane's host names the cluster's way only: the
// worker sidecar dials NATS by name and presents its Pod-bound token, so
// an /etc/hosts entry or a resolver (or search domain) of the tenant's
// choosing would hand that token to a server of the tenant's. Each route
// is denied naming the field and what is allowed; the same fields stay
// free on Pods without a pool.
func TestPoolPodCannotRedirectRunplaneHosts(t *testing.T) {
	m := restrictedMutator(t)
	natsHost := "n" // restrictedMutator's NATS URL is nats://n:4222
	tests := []struct {
		name   string
		modify func(*corev1.PodSpec)
		want   string // "" when admitted
	}{
		{"hostAliases naming the NATS host", func(s *corev1.PodSpec) {
			s.HostAliases = []corev1.HostAlias{{IP: "10.0.0.66", Hostnames: []string{natsHost}}}
		}, `label runplane.io/pool: spec.hostAliases: must be empty on a pool Pod`},
		{"hostAliases naming another host", func(s *corev1.PodSpec) {
			s.HostAliases = []corev1.HostAlias{{IP: "10.0.0.66", Hostnames: []string{"models.internal"}}}
		}, `label runplane.io/pool: spec.hostAliases: must be empty on a pool Pod`},
		{"dnsPolicy None with the tenant's nameserver", func(s *corev1.PodSpec) {
			s.DNSPolicy = corev1.DNSNone
			s.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"10.0.0.66"}}
		}, `label runplane.io/pool: spec.dnsPolicy: is "None"; allowed on a pool Pod: ClusterFirst (the default), ClusterFirstWithHostNet, Default`},
		{"an extra nameserver beside the cluster's", func(s *corev1.PodSpec) {
			s.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"10.0.0.66"}, Options: []corev1.PodDNSConfigOption{{Name: "rotate"}}}
		}, `label runplane.io/pool: spec.dnsConfig.nameservers: must be empty on a pool Pod`},
		{"a search domain of the tenant's", func(s *corev1.PodSpec) {
			s.DNSConfig = &corev1.PodDNSConfig{Searches: []string{"evil.example"}}
		}, `label runplane.io/pool: spec.dnsConfig.searches: must be empty on a pool Pod`},
		{"resolver options only", func(s *corev1.PodSpec) {
			s.DNSConfig = &corev1.PodDNSConfig{Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: new("2")}}}
		}, ""},
		{"the node's resolver", func(s *corev1.PodSpec) { s.DNSPolicy = corev1.DNSDefault }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := func(labels map[string]string) *corev1.Pod {
				p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{compliant("main")}}}
				tt.modify(&p.Spec)
				return p
			}
			_, err := m.Mutate(context.Background(), pod(map[string]string{api.LabelPool: "echo"}), "ns")
			if tt.want == "" {
				require.NoError(t, err)
			} else {
				require.Error(t, err, "a pool Pod that re-points runplane's host names")
				assert.True(t, IsDenial(err), "a denial, not a failure: %v", err)
				assert.Contains(t, err.Error(), tt.want)
			}
			_, err = m.Mutate(context.Background(), pod(map[string]string{api.LabelGPUSpec: "g1.1"}), "ns")
			require.NoError(t, err, "a Pod without a pool keeps its own resolution")
		})
	}
}
