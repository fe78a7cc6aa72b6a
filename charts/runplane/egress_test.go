package chart_test

import (
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	npav1alpha1 "sigs.k8s.io/network-policy-api/apis/v1alpha1"

	"github.com/runplane/runplane/controllers/egress"
)

// controllerEgress is the egress settings the chart gives the controller,
// read by the controller's own loader.
func controllerEgress(t *testing.T, objs []object) egress.Settings {
	t.Helper()
	return controllerConfig(t, objs).Egress
}

// TestEgressMirrorsGo: the chart's defaults are egress.DefaultSettings (what
// make dev runs), and in each mode the chart renders what the Go code builds:
// in adminNetworkPolicy mode the AdminNetworkPolicy is egress.AdminPolicy of
// the settings the controller gets; in networkPolicy mode there is none and
// the controller keeps the policies.
func TestEgressMirrorsGo(t *testing.T) {
	needHelm(t)
	objs := parse(t, mustRender(t))
	got := controllerEgress(t, objs)
	want := egress.DefaultSettings()
	want.NATS = egress.NATSEndpoint{Namespace: releaseNamespace, Port: 4222, PodLabels: map[string]string{
		"app.kubernetes.io/component": "nats", "app.kubernetes.io/instance": "runplane", "app.kubernetes.io/name": "runplane"}}
	assert.Equal(t, want, got, "the chart's default egress settings differ from egress.DefaultSettings")

	for _, c := range []struct {
		name     string
		args     []string
		priority int32
	}{
		{"default", nil, 10},
		{"denied CIDRs", []string{"--set", "egress.deniedCIDRs={203.0.113.0/24,2001:db8::/32,10.0.0.0/8,203.0.113.0/24}", "--set", "egress.priority=42",
			"--set", "egress.dns.ports={53,1053}"}, 42},
		{"many denied CIDRs", []string{"--set", "egress.deniedCIDRs={" + strings.Join(manyCIDRs(30), ",") + "}"}, 10},
		{"external NATS", []string{"--values", "testdata/values-external.yaml", "--set", "egress.enforcement=adminNetworkPolicy"}, 10},
		{"full", []string{"--values", "testdata/values-full.yaml"}, 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			objs := parse(t, mustRender(t, c.args...))
			s := controllerEgress(t, objs)
			require.NoError(t, s.Validate())
			require.Equal(t, c.priority, s.Priority)
			var anp npav1alpha1.AdminNetworkPolicy
			find(t, objs, "AdminNetworkPolicy", egress.AdminPolicyName).into(t, &anp)
			wantANP := egress.AdminPolicy(s)
			assert.True(t, apiequality.Semantic.DeepEqual(wantANP.Spec, anp.Spec), "the chart's AdminNetworkPolicy differs from egress.AdminPolicy.\nchart:\n%s\ngo:\n%s",
				toYAML(anp.Spec), toYAML(wantANP.Spec))
		})
	}

	objs = parse(t, mustRender(t, "--set", "egress.enforcement=networkPolicy"))
	for _, o := range objs {
		assert.NotEqual(t, "AdminNetworkPolicy", o.kind(), "networkPolicy mode rendered an AdminNetworkPolicy")
	}
	assert.Equal(t, egress.EnforcementNetworkPolicy, controllerEgress(t, objs).Enforcement)
}

func manyCIDRs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 51, byte(i), 0}), 24).String()
	}
	return out
}

// networkPolicyCRDs are the AdminNetworkPolicy and BaselineAdminNetworkPolicy
// CRDs, experimental channel (the networks and nodes peers the chart's
// policy uses), of the network-policy-api version runplane's Go types come
// from: the module cache's copy. The chart ships no CRD: the network plugin
// that implements the API installs it.
func networkPolicyCRDs(t *testing.T) []string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/network-policy-api").Output()
	require.NoError(t, err, "go list -m sigs.k8s.io/network-policy-api")
	dir := filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "experimental")
	return []string{
		filepath.Join(dir, "policy.networking.k8s.io_adminnetworkpolicies.yaml"),
		filepath.Join(dir, "policy.networking.k8s.io_baselineadminnetworkpolicies.yaml"),
	}
}
