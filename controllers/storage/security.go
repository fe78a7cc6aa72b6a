package storage

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
)

// copyPodSecurity and copyContainerSecurity make the copy Job's Pod meet
// Pod Security "restricted": non-root, RuntimeDefault seccomp, no
// privilege escalation, no capabilities, read-only root filesystem. The
// copier then keeps modes and timestamps but not ownership (only root with
// CHOWN could); its files belong to UID 65532 — the runplane image's user,
// as before this securityContext was written down.
//
// fsGroup 65532 lets that user write a fresh volume whose root belongs to
// root: the kubelet gives the (read-write) workspace to the group, once
// (OnRootMismatch). Read-only volumes, the source, are left alone by the
// kubelet.
func copyPodSecurity() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(api.ImageUID), RunAsGroup: ptr.To(api.ImageUID),
		FSGroup: ptr.To(api.ImageUID), FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

func copyContainerSecurity() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// imageCapabilities are what a prepare image running as root keeps of
// the runtime's defaults (all within Pod Security "baseline"):
//   - CHOWN: unpacking archives and package installs set file owners;
//   - DAC_OVERRIDE: root writing into directories and files it does not
//     own (a volume prepared earlier by another user);
//   - FOWNER: chmod/utime on files owned by another user;
//   - FSETID: keep setuid/setgid bits while changing such files;
//   - SETUID, SETGID: package managers and tools that drop to an
//     unprivileged user.
//
// Dropped: NET_RAW (spoofing), MKNOD (device nodes on the tenant's
// volume), KILL, SETPCAP, SETFCAP, SYS_CHROOT, AUDIT_WRITE,
// NET_BIND_SERVICE. A non-root image gets none of them at all
// (allowPrivilegeEscalation false sets no_new_privs).
func imageCapabilities() []corev1.Capability {
	return []corev1.Capability{"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID"}
}

// imageContainerSecurity is the prepare-from-image container's context:
// Pod Security "baseline", not "restricted", because the user's image
// decides its user (restricted would refuse every image that runs as root).
func imageContainerSecurity() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: imageCapabilities()},
	}
}
