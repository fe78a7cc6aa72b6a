package controllers_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
)

// TestStorageInRestrictedNamespace: in a namespace that enforces Pod
// Security "restricted" and has a compute ResourceQuota, a volume is
// prepared from an image, another copied from it, and an accessor serves
// the first: every Pod the controllers create is admitted (a refused Job
// Pod would leave its claim Pending for ever).
func TestStorageInRestrictedNamespace(t *testing.T) {
	startManager(t)
	ns := env.Namespace(t, "")
	ctx := context.Background()
	_, err := client().CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"restricted","pod-security.kubernetes.io/enforce-version":"latest"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "compute", Namespace: ns}, Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
		corev1.ResourceRequestsCPU: resource.MustParse("10"), corev1.ResourceRequestsMemory: resource.MustParse("20Gi"),
		corev1.ResourceLimitsCPU: resource.MustParse("20"), corev1.ResourceLimitsMemory: resource.MustParse("40Gi"),
	}}}
	_, err = client().CoreV1().ResourceQuotas(ns).Create(ctx, q, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := client().CoreV1().ResourceQuotas(ns).Get(ctx, "compute", metav1.GetOptions{})
		return err == nil && len(got.Status.Hard) > 0
	}, time.Minute, tick, "the quota controller never synced the quota")

	createPVC(t, pvc(ns, "base", map[string]string{api.AnnotationPrepareFromImage: "busybox:1.36"}))
	p := waitPhase(t, ns, "base", api.PhaseSucceeded, "0")
	jobs := jobsOf(t, ns, p)
	require.Len(t, jobs, 1)
	sc := jobs[0].Spec.Template.Spec.Containers[0].SecurityContext
	assert.Equal(t, ptr.To(api.ImageUID), sc.RunAsUser, "the image runs as runplane's user here")

	createPVC(t, pvc(ns, "copy", map[string]string{api.AnnotationPrepareFromPVC: "base"}))
	waitPhase(t, ns, "copy", api.PhaseSucceeded, "0")

	annotatePVC(t, ns, "base", api.AnnotationAccessor, ptr.To(api.AccessorEnabled))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, api.AccessorReady, getPVC(t, ns, "base").Annotations[api.AnnotationAccessorPhase])
	}, time.Minute, tick, "accessor Ready (its Pod admitted)")
}
