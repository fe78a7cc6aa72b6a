package extender

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// unplannable: out of the scheduling cycle the leader checks only node
// selector, affinity and tolerations, so it plans no preemption for a Pod
// whose placement also depends on what only kube-scheduler's filters see
// (review finding: other tenants evicted on a node the Pod can never use).
func TestUnplannable(t *testing.T) {
	term := corev1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname", LabelSelector: &metav1.LabelSelector{}}
	for _, tc := range []struct {
		name string
		spec corev1.PodSpec
		want string
	}{
		{"plain", corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}, ""},
		{"preferred affinity only", corev1.PodSpec{Affinity: &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 1, PodAffinityTerm: term}}}}}, ""},
		{"required affinity", corev1.PodSpec{Affinity: &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term}}}}, "required inter-Pod affinity"},
		{"required anti-affinity", corev1.PodSpec{Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term}}}}, "required inter-Pod affinity"},
		{"spread", corev1.PodSpec{TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1}}}, "topology spread constraints"},
		{"a claim", corev1.PodSpec{Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}}, "volume data (a claim)"},
		{"host port", corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{{HostPort: 8080}}}}}, "host port 8080"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, unplannable(&corev1.Pod{Spec: tc.spec}))
		})
	}
}

// planBackoff: a Pod whose plan found nothing waits planRetry before the
// next (the resync brings it back every 5 s; a plan walks every node).
func TestPlanBackoff(t *testing.T) {
	var b planBackoff
	t0 := time.Unix(1000, 0)
	assert.False(t, b.wait("p", t0), "never tried")
	b.after("p", t0, planRetry)
	assert.True(t, b.wait("p", t0.Add(5*time.Second)), "the next resync")
	assert.False(t, b.wait("q", t0.Add(5*time.Second)), "another Pod")
	assert.False(t, b.wait("p", t0.Add(planRetry)), "after planRetry")
	assert.Empty(t, b.until, "forgotten once it may try again")
	b.after("gone", t0, planRetry) // a Pod deleted while it waits never asks again
	b.after("q", t0.Add(planRetry), planRetry)
	assert.Equal(t, []types.UID{"q"}, slices.Collect(maps.Keys(b.until)), "an expired entry goes at the next after")
}
