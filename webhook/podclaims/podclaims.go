// Package podclaims decides whether a Pod may name an existing
// ResourceClaim by spec.resourceClaims[].resourceClaimName: not one whose
// device requests name a GPU DeviceClass. Such a claim is runplane's (a
// GPU Pod's, made by kube-controller-manager from runplane's template, or
// stock's): a second Pod sharing it would keep the device once the GPU Pod
// is gone, outside runplane's ledger, stock and quotas. The claim is
// looked up by the caller (ClaimGetter); the decision is pure.
package podclaims

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
	"github.com/runplane/runplane/webhook/mutate"
)

// ClaimGetter finds a ResourceClaim of a namespace; a missing one is nil,
// nil.
type ClaimGetter interface {
	GetResourceClaim(ctx context.Context, namespace, name string) (*resourcev1.ResourceClaim, error)
}

// MaxNamedClaims bounds the distinct claims one Pod may name by
// resourceClaimName: each is a live GET (a Pod of a DRA workload names a
// few).
const MaxNamedClaims = 16

// DeniedError says which claim a Pod names that it may not, and why.
type DeniedError struct {
	// Field is spec.resourceClaims[<name>].resourceClaimName.
	Field string
	// Claim is the claim's name as the Pod gives it.
	Claim  string
	Reason string
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("%s names ResourceClaim %s, %s", e.Field, mutate.Quote(e.Claim), e.Reason)
}

// Check refuses a Pod of namespace that names, by resourceClaimName, a
// claim whose requests name one of gpuClasses (a *DeniedError), or a claim
// that does not exist (yet): its requests are unknown, and the claim the
// resource-claim controller makes for a GPU Pod could be created under
// that name later. A failed lookup is an error of its own (not a denial):
// the caller fails closed.
//
// Each claim is looked up once however often the Pod names it, and a Pod
// naming more than MaxNamedClaims claims is refused before any lookup: the
// API server sets no bound, and one Pod (or a dry run, which costs no
// quota) naming a claim 100 times made 100 live GETs on the webhook's
// priority-and-fairness flow, which every tenant's admission shares
// (review finding).
func Check(ctx context.Context, pod *corev1.Pod, namespace string, claims ClaimGetter, gpuClasses []string) error {
	seen := map[string]bool{}
	for _, pc := range pod.Spec.ResourceClaims {
		if name := ptr.Deref(pc.ResourceClaimName, ""); name != "" {
			seen[name] = true
		}
	}
	if len(seen) > MaxNamedClaims {
		return &DeniedError{Field: "spec.resourceClaims", Claim: fmt.Sprintf("%d claims", len(seen)),
			Reason: fmt.Sprintf("more than runplane checks for one Pod (%d): name at most %d claims by resourceClaimName", MaxNamedClaims, MaxNamedClaims)}
	}
	clear(seen)
	for _, pc := range pod.Spec.ResourceClaims {
		name := ptr.Deref(pc.ResourceClaimName, "")
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		field := "spec.resourceClaims[" + pc.Name + "].resourceClaimName"
		claim, err := claims.GetResourceClaim(ctx, namespace, name)
		if err != nil {
			return fmt.Errorf("looking up ResourceClaim %s/%s that %s names: %w", namespace, mutate.Quote(name), field, err)
		}
		if claim == nil {
			return &DeniedError{Field: field, Claim: name, Reason: "which does not exist in namespace " + namespace +
				": runplane admits a Pod naming a claim only once it sees that the claim asks for no GPU; create the claim first"}
		}
		if gpus := GPURequests(claim.Spec, gpuClasses); len(gpus) > 0 {
			return &DeniedError{Field: field, Claim: name, Reason: "whose " + strings.Join(gpus, "; ") +
				" is a GPU DeviceClass: a GPU claim is its GPU Pod's alone, and another Pod sharing it would keep the device outside runplane's accounting; " +
				"label the Pod " + api.LabelGPUSpec + "=<spec of the catalog> for GPUs of its own"}
		}
	}
	return nil
}

// GPURequests names the device requests of spec that name one of
// gpuClasses, each as "spec.devices.requests[<r>].exactly.deviceClassName
// <class>" (or firstAvailable[<s>]): the same reading as the
// runplane-gpu-claims policy.
func GPURequests(spec resourcev1.ResourceClaimSpec, gpuClasses []string) []string {
	var out []string
	for _, r := range spec.Devices.Requests {
		field := "spec.devices.requests[" + r.Name + "]."
		if r.Exactly != nil && slices.Contains(gpuClasses, r.Exactly.DeviceClassName) {
			out = append(out, field+"exactly.deviceClassName "+r.Exactly.DeviceClassName)
		}
		for _, s := range r.FirstAvailable {
			if slices.Contains(gpuClasses, s.DeviceClassName) {
				out = append(out, field+"firstAvailable["+s.Name+"].deviceClassName "+s.DeviceClassName)
			}
		}
	}
	return out
}

// Classes are the GPU DeviceClasses: configured, and every DRA spec's of
// cat (a spec added to the catalog after the webhook started counts too).
func Classes(configured []string, cat catalog.Catalog) []string {
	out := slices.Clone(configured)
	for _, s := range cat {
		if s.IsDRA() {
			out = append(out, s.DRA.DeviceClassName)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
