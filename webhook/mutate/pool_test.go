package mutate

import (
	"context"
	"errors"
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
		{"the node's network, outside every egress policy", func(s *corev1.PodSpec) { s.HostNetwork = true },
			`label runplane.io/pool: spec.hostNetwork: must not be true on a pool Pod`},
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

// The worker sidecar gets NATS's server name and the CA bundle of the
// Pod's admission, and only the sidecar: no main container learns them.
// While the CA is not to be had, a pool Pod fails admission (an error, not
// a denial: the ReplicaSet retries) instead of getting a sidecar that
// would dial without verifying.
func TestPoolSidecarVerifiesNATS(t *testing.T) {
	m := restrictedMutator(t)
	m.Config.NATSServerName = "runplane-nats.runplane-system.svc"
	bundle := "-----BEGIN CERTIFICATE-----\nca\n-----END CERTIFICATE-----\n"
	var caErr error
	m.NATSCA = func() ([]byte, error) { return []byte(bundle), caErr }
	pod := func() *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{api.LabelPool: "echo"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{compliant("main")}}}
	}
	res, err := m.Mutate(context.Background(), pod(), "ns")
	require.NoError(t, err)
	env := func(c corev1.Container) map[string]string {
		out := map[string]string{}
		for _, e := range c.Env {
			out[e.Name] = e.Value
		}
		return out
	}
	var sidecar *corev1.Container
	for i, c := range res.Pod.Spec.InitContainers {
		if c.Name == api.SidecarContainerName {
			sidecar = &res.Pod.Spec.InitContainers[i]
		}
	}
	require.NotNil(t, sidecar)
	assert.Equal(t, m.Config.NATSServerName, env(*sidecar)[api.EnvNATSServerName])
	assert.Equal(t, bundle, env(*sidecar)[api.EnvNATSCA])
	for _, c := range res.Pod.Spec.Containers {
		assert.NotContains(t, env(c), api.EnvNATSCA, "container %s", c.Name)
		assert.NotContains(t, env(c), api.EnvNATSServerName, "container %s", c.Name)
	}

	caErr = errors.New("not published yet")
	_, err = m.Mutate(context.Background(), pod(), "ns")
	require.ErrorContains(t, err, "not published yet")
	assert.False(t, IsDenial(err), "a missing CA is the platform's failure, not the user's")
}
