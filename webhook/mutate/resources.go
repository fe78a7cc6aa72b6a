package mutate

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
)

// SidecarResources are the requests and limits of the containers runplane
// injects, by container name (api.SidecarContainerName,
// SSHInstallContainerName). SSH sessions run in the main container, under
// its own requests and limits. A namespace with a
// compute ResourceQuota admits only Pods whose every container has them.
type SidecarResources map[string]corev1.ResourceRequirements

// sidecarResourceNames are the containers SidecarResources may name.
var sidecarResourceNames = []string{api.SidecarContainerName, SSHInstallContainerName}

// resourceKeys are the keys of a resource override ("requests.cpu=100m"),
// and of the resources a SidecarResources entry may set.
var resourceKeys = []string{
	"requests.cpu", "requests.memory", "requests.ephemeral-storage",
	"limits.cpu", "limits.memory", "limits.ephemeral-storage",
}

// DefaultSidecarResources are the chart's defaults (values
// webhook.sidecarResources). CPU limits are generous (they throttle, never
// kill); memory limits bound what a leaking sidecar may take from the
// node.
func DefaultSidecarResources() SidecarResources {
	rr := func(reqCPU, reqMem, limCPU, limMem string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(reqCPU), corev1.ResourceMemory: resource.MustParse(reqMem)},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(limCPU), corev1.ResourceMemory: resource.MustParse(limMem)},
		}
	}
	return SidecarResources{
		api.SidecarContainerName: rr("50m", "64Mi", "1", "256Mi"),
		SSHInstallContainerName:  rr("10m", "16Mi", "100m", "64Mi"),
	}
}

// Validate checks every container name, resource and quantity.
func (r SidecarResources) Validate() error {
	for name, rr := range r {
		if name == api.SSHContainerName {
			// Upgrading from a release with the SSH sidecar.
			return fmt.Errorf("sidecar resources: %q is no longer a container: SSH sessions run inside the Pod's main container and count against its resources; remove it (chart: webhook.sidecarResources.%s); allowed: %s",
				name, name, strings.Join(sidecarResourceNames, ", "))
		}
		if !slices.Contains(sidecarResourceNames, name) {
			return fmt.Errorf("sidecar resources: unknown container %q; allowed: %s", name, strings.Join(sidecarResourceNames, ", "))
		}
		for kind, list := range map[string]corev1.ResourceList{"requests": rr.Requests, "limits": rr.Limits} {
			for res, q := range list {
				if !slices.Contains(resourceKeys, kind+"."+string(res)) {
					return fmt.Errorf("sidecar resources: %s: unknown resource %s.%s; allowed: %s", name, kind, res, strings.Join(resourceKeys, ", "))
				}
				if q.Sign() <= 0 {
					return fmt.Errorf("sidecar resources: %s: %s.%s must be positive, got %s", name, kind, res, q.String())
				}
			}
		}
		if err := requestsWithinLimits(rr); err != nil {
			return fmt.Errorf("sidecar resources: %s: %w", name, err)
		}
	}
	return nil
}

func requestsWithinLimits(rr corev1.ResourceRequirements) error {
	for res, req := range rr.Requests {
		if lim, ok := rr.Limits[res]; ok && req.Cmp(lim) > 0 {
			return fmt.Errorf("requests.%s %s is above limits.%s %s", res, req.String(), res, lim.String())
		}
	}
	return nil
}

// parseResourceOverride reads a Pod's override annotation of an injected
// sidecar's resources: "requests.cpu=100m,limits.memory=512Mi". Every
// error is an *InvalidError naming the key and the allowed values.
func parseResourceOverride(key, v string) (corev1.ResourceRequirements, error) {
	var rr corev1.ResourceRequirements
	bad := func(format string, args ...any) (corev1.ResourceRequirements, error) {
		return corev1.ResourceRequirements{}, invalidAnnotation(key, "%s; the value is comma-separated <key>=<quantity> with keys %s, e.g. \"requests.cpu=100m,limits.memory=512Mi\"",
			fmt.Sprintf(format, args...), strings.Join(resourceKeys, ", "))
	}
	if strings.TrimSpace(v) == "" {
		return bad("empty value")
	}
	for _, item := range strings.Split(v, ",") {
		k, qs, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return bad("%s is not <key>=<quantity>", Quote(item))
		}
		if !slices.Contains(resourceKeys, k) {
			return bad("unknown key %s", Quote(k))
		}
		q, err := resource.ParseQuantity(qs)
		if err != nil || q.Sign() <= 0 {
			return bad("%s=%s is not a positive quantity (such as 100m, 1, 512Mi)", k, Quote(qs))
		}
		kind, res, _ := strings.Cut(k, ".")
		list := &rr.Requests
		if kind == "limits" {
			list = &rr.Limits
		}
		if *list == nil {
			*list = corev1.ResourceList{}
		}
		if _, dup := (*list)[corev1.ResourceName(res)]; dup {
			return bad("key %s given twice", k)
		}
		(*list)[corev1.ResourceName(res)] = q
	}
	return rr, nil
}

// sidecarResources is what container name gets: the configured default
// with the Pod's override on top, key by key. The merged result must keep
// requests within limits; else the override's annotation is named.
func (m *Mutator) sidecarResources(name string, override *corev1.ResourceRequirements, key string) (corev1.ResourceRequirements, error) {
	def := m.Config.Resources[name]
	out := corev1.ResourceRequirements{Requests: def.Requests.DeepCopy(), Limits: def.Limits.DeepCopy()}
	if override == nil {
		return out, nil
	}
	for res, q := range override.Requests {
		if out.Requests == nil {
			out.Requests = corev1.ResourceList{}
		}
		out.Requests[res] = q.DeepCopy()
	}
	for res, q := range override.Limits {
		if out.Limits == nil {
			out.Limits = corev1.ResourceList{}
		}
		out.Limits[res] = q.DeepCopy()
	}
	if err := requestsWithinLimits(out); err != nil {
		return corev1.ResourceRequirements{}, invalidAnnotation(key, "%v (after the platform defaults for %s: %s); raise the limit too", err, name, describeResources(def))
	}
	return out, nil
}

func describeResources(rr corev1.ResourceRequirements) string {
	var parts []string
	for _, k := range resourceKeys {
		kind, res, _ := strings.Cut(k, ".")
		list := rr.Requests
		if kind == "limits" {
			list = rr.Limits
		}
		if q, ok := list[corev1.ResourceName(res)]; ok {
			parts = append(parts, k+"="+q.String())
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

// fitSpecAroundSidecars keeps a GPU Pod's total request at its spec: the
// main container's cpu and memory requests give up what runplane's
// restartable sidecars request (they run beside it for the Pod's life, so
// the scheduler adds them). A same-spec placeholder then frees exactly
// what the Pod needs, and the extender's takeover stays a one-for-one
// swap. Limits stay the spec's: the main container may still burst to it.
func fitSpecAroundSidecars(pod *corev1.Pod, spec catalog.Spec) error {
	main, err := mainContainer(pod)
	if err != nil {
		return err
	}
	c := &pod.Spec.Containers[main]
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		sidecars := resource.Quantity{}
		for _, ic := range pod.Spec.InitContainers {
			if !slices.Contains(sidecarResourceNames, ic.Name) || ic.RestartPolicy == nil || *ic.RestartPolicy != corev1.ContainerRestartPolicyAlways {
				continue
			}
			if q, ok := ic.Resources.Requests[res]; ok {
				sidecars.Add(q)
			}
		}
		if sidecars.IsZero() {
			continue
		}
		have := c.Resources.Requests[res]
		left := have.DeepCopy()
		left.Sub(sidecars)
		if left.Sign() <= 0 {
			return &ConflictError{Label: api.LabelGPUSpec, Field: fmt.Sprintf("container %s resource %s", Quote(c.Name), res),
				Reason: fmt.Sprintf("GPU spec %q gives %s, no more than runplane's sidecars request (%s); lower their requests (annotation %s) or choose a larger spec",
					spec.Name, have.String(), sidecars.String(), api.AnnotationWorkerResources)}
		}
		c.Resources.Requests[res] = left
	}
	return nil
}
