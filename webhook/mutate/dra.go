package mutate

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
)

// claimDevices gives the Pod of a DRA spec its devices: the Pod claim
// catalog.ClaimName from the spec's ResourceClaimTemplate in its own
// namespace (which controllers/claimtemplate keeps), and every container
// of spec.containers (the app's; runplane's sidecars are init containers
// and get none) that claim. A claim of that name the Pod already has must
// be exactly runplane's: idempotent for reinvocation, never merged.
func claimDevices(pod *corev1.Pod, label string, spec catalog.Spec) error {
	want := corev1.PodResourceClaim{Name: catalog.ClaimName, ResourceClaimTemplateName: ptr.To(catalog.ClaimTemplateName(spec.Name))}
	i := slices.IndexFunc(pod.Spec.ResourceClaims, func(c corev1.PodResourceClaim) bool { return c.Name == catalog.ClaimName })
	switch {
	case i < 0:
		pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, want)
	case ptr.Deref(pod.Spec.ResourceClaims[i].ResourceClaimName, "") != "" ||
		ptr.Deref(pod.Spec.ResourceClaims[i].ResourceClaimTemplateName, "") != *want.ResourceClaimTemplateName:
		return &ConflictError{Label: label, Field: "spec.resourceClaims[" + catalog.ClaimName + "]",
			Reason: fmt.Sprintf("is runplane's: GPU spec %q claims its devices from ResourceClaimTemplate %s; remove the claim or rename it",
				spec.Name, catalog.ClaimTemplateName(spec.Name))}
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		j := slices.IndexFunc(c.Resources.Claims, func(rc corev1.ResourceClaim) bool { return rc.Name == catalog.ClaimName })
		switch {
		case j < 0:
			c.Resources.Claims = append(c.Resources.Claims, corev1.ResourceClaim{Name: catalog.ClaimName})
		case c.Resources.Claims[j].Request != "":
			return &ConflictError{Label: label, Field: fmt.Sprintf("container %s resources.claims[%s]", Quote(c.Name), catalog.ClaimName),
				Reason: fmt.Sprintf("names request %s; runplane gives each container the whole claim of GPU spec %q: remove the request", Quote(c.Resources.Claims[j].Request), spec.Name)}
		}
	}
	return nil
}

// noGPURequests refuses extended-resource GPU requests on a Pod of a DRA
// spec: its devices come from the claim, and a node managed through DRA
// has no such resource, so the Pod would never be scheduled.
func noGPURequests(pod *corev1.Pod, spec catalog.Spec) error {
	groups := [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers}
	for _, cs := range groups {
		for _, c := range cs {
			for _, list := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
				if q, ok := list[spec.GPUResource]; ok && !q.IsZero() {
					return &ConflictError{Label: api.LabelGPUSpec, Field: fmt.Sprintf("container %s resource %s", Quote(c.Name), spec.GPUResource),
						Reason: fmt.Sprintf("GPU spec %q gives its devices through the resource claim %s (Dynamic Resource Allocation), not %s; remove the request",
							spec.Name, catalog.ClaimName, spec.GPUResource)}
				}
			}
		}
	}
	return nil
}

// deviceClassResourcePrefix names a DeviceClass as an extended resource
// (Kubernetes' DRAExtendedResource: kube-scheduler turns such a request
// into a claim of that class, made under its own identity).
const deviceClassResourcePrefix = "deviceclass.resource.kubernetes.io/"

// noDeviceClassRequests refuses a GPU Pod's request of a DeviceClass as an
// extended resource: beside its spec's GPUs it would get as many devices
// again, outside the catalog and the ledger (review finding: a 1-GPU spec
// asking deviceclass.resource.kubernetes.io/gpu.nvidia.com: 7 got 8).
func noDeviceClassRequests(pod *corev1.Pod, spec catalog.Spec) error {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			for _, list := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
				for name := range list {
					if strings.HasPrefix(string(name), deviceClassResourcePrefix) {
						return &ConflictError{Label: api.LabelGPUSpec, Field: fmt.Sprintf("container %s resource %s", Quote(c.Name), name),
							Reason: fmt.Sprintf("GPU spec %q gives the Pod its devices; a DeviceClass requested as an extended resource would add devices outside it — remove the request", spec.Name)}
					}
				}
			}
		}
	}
	return nil
}
