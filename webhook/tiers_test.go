package webhook

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/webhook/mutate"
)

// TestPriorityTiers: a GPU Pod gets runplane-workload when it names no
// class, may name a tier at or below it anywhere, and a tier above it (one
// that preempts other tenants' work) only in a namespace the platform
// granted it with runplane.io/priority-tiers.
func TestPriorityTiers(t *testing.T) {
	m := testMutator(t)
	tests := []struct {
		name, namespace, class string
		wantClass              string
		wantPriority           int32
		wantDenied             string
	}{
		{name: "default tier", namespace: testNamespace, wantClass: api.PriorityClassWorkload, wantPriority: 1000},
		{name: "a lower tier anywhere", namespace: testNamespace, class: api.PriorityClassBatch, wantClass: api.PriorityClassBatch, wantPriority: 100},
		{name: "a higher tier where granted", namespace: paidNamespace, class: api.PriorityClassWorkloadHigh, wantClass: api.PriorityClassWorkloadHigh, wantPriority: 2000},
		{name: "a higher tier not granted", namespace: testNamespace, class: api.PriorityClassWorkloadHigh,
			wantDenied: `namespace "team-a" is not granted it (its annotation runplane.io/priority-tiers lists "")`},
		{name: "a higher tier in a namespace unknown to the cache and the API", namespace: "team-new", class: api.PriorityClassWorkloadHigh,
			wantDenied: `namespace "team-new" is not granted it`},
		{name: "a class outside the tiers", namespace: paidNamespace, class: "system-cluster-critical",
			wantDenied: `allowed: runplane-workload, runplane-workload-high, runplane-batch, tenant-below-stock (default runplane-workload)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "trainer", Namespace: tt.namespace, Labels: map[string]string{api.LabelGPUSpec: "g1.1"}},
				Spec:       corev1.PodSpec{PriorityClassName: tt.class, Containers: []corev1.Container{{Name: "main", Image: "example.com/trainer:1.0"}}},
			}
			res, err := m.MutateAdmission(t.Context(), pod, mutate.Admission{Namespace: tt.namespace})
			if tt.wantDenied != "" {
				require.ErrorContains(t, err, tt.wantDenied)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantClass, res.Pod.Spec.PriorityClassName)
			require.Equal(t, tt.wantPriority, ptr.Deref(res.Pod.Spec.Priority, 0))
		})
	}
}

// TestTierPolicyBindsEveryNamespace: the Namespace-tier policy checks every
// Namespace. The other bindings skip the excluded namespaces by a selector
// that, for a Namespace, is matched against the Namespace itself: a
// tenant allowed to create Namespaces could create one under an excluded
// name carrying a grant.
func TestTierPolicyBindsEveryNamespace(t *testing.T) {
	_, bindings := Policies(PolicyOptions{Namespace: "runplane-system", ExcludeNamespaces: []string{"tools"}})
	seen := false
	for _, b := range bindings {
		if b.Name == api.PolicyNamespaceTiers {
			seen = true
			require.NotNil(t, b.Spec.MatchResources)
			require.Nil(t, b.Spec.MatchResources.NamespaceSelector, "the tier policy must not skip excluded names")
			continue
		}
		require.Contains(t, b.Spec.MatchResources.NamespaceSelector.MatchExpressions[0].Values, "tools", b.Name)
	}
	require.True(t, seen)
}
