package webhook

import (
	"testing"

	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/runplane/runplane/api"
)

func TestConfigurationsShape(t *testing.T) {
	m, v := Configurations(ConfigurationOptions{Namespace: "rp", URL: "https://127.0.0.1:9443", CABundle: []byte("ca")})
	wantLabels := map[string]string{
		"gpu-spec.runplane.io": api.LabelGPUSpec, "stock.runplane.io": api.LabelStock,
		"pool.runplane.io": api.LabelPool, "ssh.runplane.io": api.LabelSSH, "storage-gate.runplane.io": "",
		"credentials.runplane.io": "",
	}
	require.Len(t, m.Webhooks, len(wantLabels))
	for _, w := range m.Webhooks {
		label, ok := wantLabels[w.Name]
		require.True(t, ok, "unexpected webhook %s", w.Name)
		require.Equal(t, admissionregistrationv1.Fail, *w.FailurePolicy, w.Name)
		require.Equal(t, admissionregistrationv1.SideEffectClassNone, *w.SideEffects, w.Name)
		require.EqualValues(t, 5, *w.TimeoutSeconds, w.Name)
		require.Equal(t, admissionregistrationv1.IfNeededReinvocationPolicy, *w.ReinvocationPolicy, w.Name)
		require.Equal(t, "https://127.0.0.1:9443"+MutatePodsPath, *w.ClientConfig.URL, w.Name)
		require.Equal(t, "ca", string(w.ClientConfig.CABundle), w.Name)
		require.Equal(t, []string{"kube-system", "rp"}, w.NamespaceSelector.MatchExpressions[0].Values, w.Name)
		if label == "" {
			// No label exempts a Pod from these: selected by a CEL condition alone.
			require.Len(t, w.MatchConditions, 1, "%s: want a match condition", w.Name)
			require.Empty(t, w.ObjectSelector.MatchExpressions, "%s: a label selector a tenant could sidestep", w.Name)
			require.Empty(t, w.ObjectSelector.MatchLabels, "%s: a label selector a tenant could sidestep", w.Name)
			continue
		}
		require.Equal(t, label, w.ObjectSelector.MatchExpressions[0].Key, w.Name)
		require.EqualValues(t, "Exists", w.ObjectSelector.MatchExpressions[0].Operator, w.Name)
	}
	require.Len(t, v.Webhooks, 3)
	require.Equal(t, "https://127.0.0.1:9443"+ValidatePVCsPath, *v.Webhooks[0].ClientConfig.URL)
	require.Len(t, v.Webhooks[0].MatchConditions, 1)
	// Every Pod naming a claim by resourceClaimName, by a CEL condition
	// alone (no label to sidestep), and no other Pod.
	claims := v.Webhooks[1]
	require.Equal(t, "resource-claims.runplane.io", claims.Name)
	require.Equal(t, "https://127.0.0.1:9443"+ValidatePodClaimsPath, *claims.ClientConfig.URL, "its own path: an older webhook answers 404 there")
	require.Equal(t, []string{"pods"}, claims.Rules[0].Resources)
	require.Equal(t, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, claims.Rules[0].Operations)
	require.Equal(t, admissionregistrationv1.Fail, *claims.FailurePolicy)
	require.Empty(t, claims.ObjectSelector.MatchExpressions, "every Pod")
	require.Equal(t, []admissionregistrationv1.MatchCondition{{Name: "names-a-claim", Expression: NamesAClaimCondition}}, claims.MatchConditions)
	eph := v.Webhooks[2]
	require.Equal(t, "https://127.0.0.1:9443"+ValidatePodsPath, *eph.ClientConfig.URL)
	require.Equal(t, []string{"pods/ephemeralcontainers"}, eph.Rules[0].Resources)
	require.Equal(t, []admissionregistrationv1.OperationType{admissionregistrationv1.Update}, eph.Rules[0].Operations)
	require.Equal(t, admissionregistrationv1.Fail, *eph.FailurePolicy)
	require.Empty(t, eph.ObjectSelector.MatchExpressions, "every Pod")
	// The shape hash ignores the caBundle (patched on its own) but not the rest.
	m2, _ := Configurations(ConfigurationOptions{Namespace: "rp", URL: "https://127.0.0.1:9443", CABundle: []byte("other")})
	m3, _ := Configurations(ConfigurationOptions{Namespace: "rp", URL: "https://127.0.0.1:9444"})
	require.Equal(t, m.Annotations[ConfigHashAnnotation], m2.Annotations[ConfigHashAnnotation], "config hash must ignore caBundle")
	require.NotEqual(t, m.Annotations[ConfigHashAnnotation], m3.Annotations[ConfigHashAnnotation], "config hash must follow the URL")
}
