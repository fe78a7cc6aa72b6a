package mutate

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// PauseUID is the user of the pause image (registry.k8s.io/pause runs as
// 65535). It is set explicitly so runAsNonRoot holds for any configured
// pause image, including one whose image config names no numeric user.
const PauseUID = int64(65535)

// pauseSecurityContext makes a stock placeholder's pause container meet
// Pod Security "restricted" on its own, whatever the placeholder's Pod
// template says at Pod level: the webhook replaces every container, so a
// template written for another image cannot leave the placeholder
// unadmittable in a restricted namespace.
func pauseSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(PauseUID), RunAsGroup: ptr.To(PauseUID),
		AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
		Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}
