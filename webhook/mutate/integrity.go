package mutate

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/runplane/runplane/api"
)

// MaxEcho bounds how much of a user's value a denial repeats: a label or
// annotation reaches the webhook before the API server's own size checks,
// so it may be hundreds of kilobytes.
const MaxEcho = 100

// Quote is v quoted for a message, cut to its first MaxEcho bytes (on a
// character boundary) followed by "…(N bytes)" when longer.
func Quote(v string) string {
	if len(v) <= MaxEcho {
		return strconv.Quote(v)
	}
	cut := v[:MaxEcho]
	for len(cut) > 0 && !utf8.ValidString(cut) {
		cut = cut[:len(cut)-1]
	}
	return strconv.Quote(cut) + "…(" + strconv.Itoa(len(v)) + " bytes)"
}

// Reserved reports whether a container or volume name is runplane's.
func Reserved(name string) bool { return strings.HasPrefix(name, api.ReservedPrefix) }

// ReservedError says that the Pod carries a container or volume with a
// name runplane reserves, other than exactly what runplane injects.
type ReservedError struct {
	Kind  string // "container" or "volume"
	Name  string
	Field string // e.g. spec.initContainers[0]
}

func (e *ReservedError) Error() string {
	return fmt.Sprintf("%s name %s (%s) is reserved: runplane injects the %ss named %s*, and a Pod may only carry them as runplane injects them; rename it",
		e.Kind, Quote(e.Name), e.Field, e.Kind, api.ReservedPrefix)
}

// CredentialError says that a container other than runplane's own
// references runplane's credentials.
type CredentialError struct {
	Container string
	Field     string // e.g. spec.containers[1]
	Route     string // how it references them
}

func (e *CredentialError) Error() string {
	return fmt.Sprintf("container %s (%s) may not reference runplane's credentials: %s; only the containers runplane injects may hold them",
		Quote(e.Container), e.Field, e.Route)
}

// sidecarOnly are runplane's volumes that no user container may mount:
// every volume it injects but the framework socket, which main containers
// share with the worker sidecar.
func sidecarOnly(name string) bool { return Reserved(name) && name != VolumeFrameworkSocket }

// credentialVolume says how a volume reaches runplane's credentials, or "".
func credentialVolume(v corev1.Volume) string {
	switch {
	case v.Secret != nil && Reserved(v.Secret.SecretName):
		return "a volume of runplane's Secret " + Quote(v.Secret.SecretName)
	case v.Projected != nil:
		for _, s := range v.Projected.Sources {
			if s.Secret != nil && Reserved(s.Secret.Name) {
				return "a projected volume of runplane's Secret " + Quote(s.Secret.Name)
			}
			if s.ServiceAccountToken != nil && s.ServiceAccountToken.Audience == api.NATSTokenAudience {
				return "a projected ServiceAccount token for runplane's NATS audience " + api.NATSTokenAudience
			}
		}
	}
	return ""
}

// CheckContainers denies any of cs (user containers of pod, at field, e.g.
// "spec.containers") that mounts one of runplane's volumes other than the
// framework socket, or reaches runplane's credentials by any route: a
// volume of one of runplane's Secrets (secret or projected), a projected
// token for runplane's NATS audience, env valueFrom.secretKeyRef or envFrom
// secretRef naming one of runplane's Secrets. Every error is a
// *CredentialError naming the container and the route.
func CheckContainers(pod *corev1.Pod, field string, cs []corev1.Container) error {
	for i, c := range cs {
		where := fmt.Sprintf("%s[%d]", field, i)
		deny := func(route string) error { return &CredentialError{Container: c.Name, Field: where, Route: route} }
		for _, vm := range c.VolumeMounts {
			if sidecarOnly(vm.Name) {
				return deny(fmt.Sprintf("it mounts volume %s, one of the volumes runplane injects for its own containers", Quote(vm.Name)))
			}
			for _, v := range pod.Spec.Volumes {
				if v.Name != vm.Name {
					continue
				}
				if route := credentialVolume(v); route != "" {
					return deny(fmt.Sprintf("it mounts volume %s, %s", Quote(v.Name), route))
				}
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && Reserved(e.ValueFrom.SecretKeyRef.Name) {
				return deny(fmt.Sprintf("env %s takes valueFrom.secretKeyRef of runplane's Secret %s", Quote(e.Name), Quote(e.ValueFrom.SecretKeyRef.Name)))
			}
		}
		for _, f := range c.EnvFrom {
			if f.SecretRef != nil && Reserved(f.SecretRef.Name) {
				return deny("envFrom secretRef names runplane's Secret " + Quote(f.SecretRef.Name))
			}
		}
	}
	return nil
}

// EphemeralAsContainers converts ephemeral containers for CheckContainers.
func EphemeralAsContainers(ecs []corev1.EphemeralContainer) []corev1.Container {
	out := make([]corev1.Container, len(ecs))
	for i, ec := range ecs {
		out[i] = corev1.Container(ec.EphemeralContainerCommon)
	}
	return out
}

// reservedContainer is an incoming container with a reserved name and
// where it was.
type reservedContainer struct {
	c     corev1.Container
	field string
}

// takeReserved removes the containers and volumes with reserved names from
// pod, returning the containers.
func takeReserved(pod *corev1.Pod) ([]reservedContainer, error) {
	var out []reservedContainer
	take := func(field string, cs []corev1.Container) []corev1.Container {
		return slices.DeleteFunc(cs, func(c corev1.Container) bool {
			if Reserved(c.Name) {
				out = append(out, reservedContainer{c: c, field: fmt.Sprintf("%s[name=%s]", field, c.Name)})
				return true
			}
			return false
		})
	}
	for i, ec := range pod.Spec.EphemeralContainers {
		if Reserved(ec.Name) {
			return nil, &ReservedError{Kind: "container", Name: ec.Name, Field: fmt.Sprintf("spec.ephemeralContainers[%d]", i)}
		}
	}
	pod.Spec.InitContainers = take("spec.initContainers", pod.Spec.InitContainers)
	pod.Spec.Containers = take("spec.containers", pod.Spec.Containers)
	pod.Spec.Volumes = slices.DeleteFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return Reserved(v.Name) })
	return out, nil
}

// verifyReserved checks that every reserved container and volume of in
// is exactly what runplane injected into out (the mutation of in without
// them), and puts the incoming containers back in place of the injected
// ones, so the mounts the ServiceAccount admission plugin added on a
// reinvocation stay. Anything else is a *ReservedError: a user container
// named like runplane's is denied, never merged.
func verifyReserved(in, out *corev1.Pod, reserved []reservedContainer) error {
	for _, r := range reserved {
		i := slices.IndexFunc(out.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == r.c.Name })
		if i < 0 || !sameInjected(in, r.c, out.Spec.InitContainers[i]) {
			return &ReservedError{Kind: "container", Name: r.c.Name, Field: r.field}
		}
		out.Spec.InitContainers[i] = r.c
	}
	for i, v := range in.Spec.Volumes {
		if !Reserved(v.Name) {
			continue
		}
		j := slices.IndexFunc(out.Spec.Volumes, func(o corev1.Volume) bool { return o.Name == v.Name })
		if j < 0 || !equality.Semantic.DeepEqual(v, out.Spec.Volumes[j]) {
			return &ReservedError{Kind: "volume", Name: v.Name, Field: fmt.Sprintf("spec.volumes[%d]", i)}
		}
	}
	// The volumes the Pod came with keep their order (a reinvocation
	// must yield an empty patch); new ones follow.
	var ordered []corev1.Volume
	for _, v := range in.Spec.Volumes {
		if j := slices.IndexFunc(out.Spec.Volumes, func(o corev1.Volume) bool { return o.Name == v.Name }); j >= 0 {
			ordered = append(ordered, out.Spec.Volumes[j])
		}
	}
	for _, o := range out.Spec.Volumes {
		if !slices.ContainsFunc(in.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == o.Name }) {
			ordered = append(ordered, o)
		}
	}
	out.Spec.Volumes = ordered
	return nil
}

// sameInjected reports whether have is the injected container want, up to
// the API token mount the ServiceAccount admission plugin adds to every
// container.
func sameInjected(pod *corev1.Pod, have, want corev1.Container) bool {
	have.VolumeMounts = slices.DeleteFunc(slices.Clone(have.VolumeMounts), func(m corev1.VolumeMount) bool {
		return !slices.ContainsFunc(want.VolumeMounts, func(w corev1.VolumeMount) bool { return w.Name == m.Name }) && serviceAccountTokenMount(pod, m)
	})
	return equality.Semantic.DeepEqual(have, want)
}

// serviceAccountTokenMount reports whether m is the ServiceAccount admission
// plugin's API token mount: read-only at the token path, of a
// kube-api-access-* projected volume holding only the token (no audience),
// the cluster CA and the namespace.
func serviceAccountTokenMount(pod *corev1.Pod, m corev1.VolumeMount) bool {
	if m.MountPath != api.ServiceAccountTokenMountPath || !m.ReadOnly || m.SubPath != "" || m.SubPathExpr != "" ||
		!strings.HasPrefix(m.Name, api.ServiceAccountTokenVolumePrefix) {
		return false
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name != m.Name {
			continue
		}
		if v.Projected == nil {
			return false
		}
		for _, s := range v.Projected.Sources {
			switch {
			case s.ServiceAccountToken != nil && s.ServiceAccountToken.Audience == "":
			case s.ConfigMap != nil && s.ConfigMap.Name == "kube-root-ca.crt":
			case s.DownwardAPI != nil:
			default:
				return false
			}
		}
		return true
	}
	return false
}

// CheckEphemeralTarget denies an ephemeral container that targets one of
// runplane's containers (kubectl debug --target): it would share that
// container's process namespace and so reach its credentials through
// /proc/<pid>/root.
func CheckEphemeralTarget(c corev1.EphemeralContainer, field string) error {
	if Reserved(c.TargetContainerName) {
		return &CredentialError{Container: c.Name, Field: field,
			Route: fmt.Sprintf("it targets runplane's container %s (targetContainerName), whose processes and credentials it would share; target a container of your own", Quote(c.TargetContainerName))}
	}
	return nil
}
