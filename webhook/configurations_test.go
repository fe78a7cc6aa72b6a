package webhook

import (
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/runplane/runplane/api"
)

func TestConfigurationsShape(t *testing.T) {
	m, v := Configurations(ConfigurationOptions{Namespace: "rp", URL: "https://127.0.0.1:9443", CABundle: []byte("ca")})
	wantLabels := map[string]string{
		"gpu-spec.runplane.io": api.LabelGPUSpec, "stock.runplane.io": api.LabelStock,
		"pool.runplane.io": api.LabelPool, "ssh.runplane.io": api.LabelSSH, "storage-gate.runplane.io": "",
	}
	if len(m.Webhooks) != len(wantLabels) {
		t.Fatalf("%d mutating webhooks, want %d", len(m.Webhooks), len(wantLabels))
	}
	for _, w := range m.Webhooks {
		label, ok := wantLabels[w.Name]
		switch {
		case !ok:
			t.Errorf("unexpected webhook %s", w.Name)
		case *w.FailurePolicy != admissionregistrationv1.Fail || *w.SideEffects != admissionregistrationv1.SideEffectClassNone ||
			*w.TimeoutSeconds != 5 || *w.ReinvocationPolicy != admissionregistrationv1.IfNeededReinvocationPolicy:
			t.Errorf("%s: policy fields %v %v %v %v", w.Name, *w.FailurePolicy, *w.SideEffects, *w.TimeoutSeconds, *w.ReinvocationPolicy)
		case *w.ClientConfig.URL != "https://127.0.0.1:9443"+MutatePodsPath || string(w.ClientConfig.CABundle) != "ca":
			t.Errorf("%s: client config %v", w.Name, w.ClientConfig)
		case !slices.Equal(w.NamespaceSelector.MatchExpressions[0].Values, []string{"kube-system", "rp"}):
			t.Errorf("%s: namespace selector %v", w.Name, w.NamespaceSelector)
		case label != "" && (w.ObjectSelector.MatchExpressions[0].Key != label || w.ObjectSelector.MatchExpressions[0].Operator != "Exists"):
			t.Errorf("%s: object selector %v, want %s Exists", w.Name, w.ObjectSelector, label)
		case label == "" && len(w.MatchConditions) != 1:
			t.Errorf("%s: want a match condition on claim volumes", w.Name)
		}
	}
	if len(v.Webhooks) != 1 || *v.Webhooks[0].ClientConfig.URL != "https://127.0.0.1:9443"+ValidatePVCsPath || len(v.Webhooks[0].MatchConditions) != 1 {
		t.Errorf("validating webhook %+v", v.Webhooks)
	}
	// The shape hash ignores the caBundle (patched on its own) but not the rest.
	m2, _ := Configurations(ConfigurationOptions{Namespace: "rp", URL: "https://127.0.0.1:9443", CABundle: []byte("other")})
	m3, _ := Configurations(ConfigurationOptions{Namespace: "rp", URL: "https://127.0.0.1:9444"})
	if m.Annotations[ConfigHashAnnotation] != m2.Annotations[ConfigHashAnnotation] || m.Annotations[ConfigHashAnnotation] == m3.Annotations[ConfigHashAnnotation] {
		t.Error("config hash must ignore caBundle and follow the URL")
	}
}
