package chart_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestMetricsForReadersOnly: every ServiceMonitor scrapes HTTPS with the
// scraper's bearer token (each /metrics answers only a scraper RBAC allows
// get on /metrics); the queue's is its own port on a Service of its own,
// never the ingress's; no PodMonitor sends a token to tenants' Pods; the
// ClusterRole runplane-metrics-reader grants get on /metrics and is bound to
// metrics.readers; and every component that serves metrics may review its
// scrapers.
func TestMetricsForReadersOnly(t *testing.T) {
	needHelm(t)
	objs := parse(t, mustRender(t, append(withMonitoring,
		"--set", "metrics.readers[0].kind=ServiceAccount", "--set", "metrics.readers[0].name=prometheus-k8s",
		"--set", "metrics.readers[0].namespace=monitoring")...))
	type endpoint struct {
		Port, Scheme, BearerTokenFile string
		TLSConfig                     map[string]any `json:"tlsConfig"`
	}
	monitors := 0
	for _, o := range objs {
		assert.NotEqual(t, "PodMonitor", o.kind(), "a PodMonitor sends the scraper's token to Pods tenants control")
		if o.kind() != "ServiceMonitor" {
			continue
		}
		monitors++
		var sm struct {
			Spec struct{ Endpoints []endpoint } `json:"spec"`
		}
		o.into(t, &sm)
		require.Len(t, sm.Spec.Endpoints, 1, o.name())
		ep := sm.Spec.Endpoints[0]
		assert.Equal(t, "https", ep.Scheme, "%s: the token travels over TLS", o.name())
		assert.Equal(t, "/var/run/secrets/kubernetes.io/serviceaccount/token", ep.BearerTokenFile, "%s: the scraper's token", o.name())
		// Verified: the CA of the component's Secret, for its Service's name.
		assert.NotContains(t, ep.TLSConfig, "insecureSkipVerify", o.name())
		assert.Contains(t, ep.TLSConfig, "ca", o.name())
		assert.Regexp(t, `^runplane-[a-z-]+\.runplane-system\.svc$`, ep.TLSConfig["serverName"], o.name())
	}
	assert.Equal(t, 4, monitors)

	var sm struct {
		Spec struct{ Endpoints []endpoint } `json:"spec"`
	}
	find(t, objs, "ServiceMonitor", "runplane-queue").into(t, &sm)
	assert.Equal(t, "metrics", sm.Spec.Endpoints[0].Port)
	portNames := func(name string) []string {
		var svc corev1.Service
		find(t, objs, "Service", name).into(t, &svc)
		var names []string
		for _, p := range svc.Spec.Ports {
			names = append(names, p.Name)
		}
		return names
	}
	assert.Equal(t, []string{"http"}, portNames("runplane-queue"), "the ingress Service (any type) publishes no metrics")
	assert.Equal(t, []string{"metrics"}, portNames("runplane-queue-metrics"))
	assert.Equal(t, []string{"https"}, portNames("runplane-webhook"), "the webhook's /metrics is on its HTTPS port")

	var reader rbacv1.ClusterRole
	find(t, objs, "ClusterRole", "runplane-metrics-reader").into(t, &reader)
	assert.Equal(t, []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}, reader.Rules)
	var binding rbacv1.ClusterRoleBinding
	find(t, objs, "ClusterRoleBinding", "runplane-metrics-reader").into(t, &binding)
	assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus-k8s", Namespace: "monitoring"}}, binding.Subjects)
	for _, o := range parse(t, mustRender(t)) {
		assert.False(t, o.kind() == "ClusterRoleBinding" && o.name() == "runplane-metrics-reader", "bound to nobody without metrics.readers")
	}

	for _, role := range []string{"runplane-webhook", "runplane-controller", "runplane-queue", "runplane-scheduler"} {
		var cr rbacv1.ClusterRole
		find(t, objs, "ClusterRole", role).into(t, &cr)
		for _, want := range []rbacv1.PolicyRule{
			{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
			{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
		} {
			assert.True(t, slices.ContainsFunc(cr.Rules, func(r rbacv1.PolicyRule) bool {
				return slices.Equal(r.APIGroups, want.APIGroups) && slices.Equal(r.Resources, want.Resources) && slices.Contains(r.Verbs, "create")
			}), "%s may not create %s: its /metrics filter cannot review scrapers", role, want.Resources[0])
		}
	}
}
