package storage

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
)

// podSecurityEnforceLabel is the namespace label of Pod Security admission
// that decides which Pods the API server admits.
const podSecurityEnforceLabel = "pod-security.kubernetes.io/enforce"

// jobResources are the prepare and copy containers' requests and limits: a
// namespace with a compute ResourceQuota admits only Pods that carry them.
// The limits leave room for an unpacking image or a large copy; the
// requests are what the copier needs at rest.
func jobResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("2Gi")},
	}
}

// enforcesRestricted reports whether namespace ns enforces Pod Security
// "restricted". One uncached GET per Job created (rare), so the controller
// needs only get on namespaces, not a cluster-wide watch.
func (r *Reconciler) enforcesRestricted(ctx context.Context, ns string) (bool, error) {
	var n corev1.Namespace
	err := r.Reader.Get(ctx, types.NamespacedName{Name: ns}, &n)
	if apierrors.IsNotFound(err) {
		return false, nil // going away with its claims; creating the Job fails anyway
	}
	if err != nil {
		return false, fmt.Errorf("reading namespace %s for its Pod Security level: %w", ns, err)
	}
	return n.Labels[podSecurityEnforceLabel] == "restricted", nil
}

// restrictImageJob makes a prepare-from-image Job admittable where Pod
// Security "restricted" is enforced: the image runs as runplane's
// unprivileged user with no capabilities (the namespace allows nothing
// else), and fsGroup lets that user write the fresh volume. Elsewhere the
// image keeps its own user and the few capabilities of imageCapabilities.
func restrictImageJob(job *batchv1.Job) {
	spec := &job.Spec.Template.Spec
	spec.SecurityContext = copyPodSecurity()
	for i := range spec.Containers {
		spec.Containers[i].SecurityContext = &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			RunAsNonRoot:             ptr.To(true), RunAsUser: ptr.To(api.ImageUID),
		}
	}
}
