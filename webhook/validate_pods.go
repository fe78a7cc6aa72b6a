package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/runplane/runplane/webhook/mutate"
	"github.com/runplane/runplane/webhook/podclaims"
)

// podValidator validates Pods: the ephemeral containers kubectl debug
// adds, and the claims a created Pod names by resourceClaimName.
type podValidator struct {
	// claims looks the named claims up (live: lookup.GetResourceClaim).
	claims podclaims.ClaimGetter
	// gpuClasses are the GPU DeviceClasses, the catalog's DRA specs' with
	// them (podclaims.Classes).
	gpuClasses func() []string
	log        *slog.Logger
}

// validate answers the ephemeral-containers.runplane.io entry: an update
// of pods/ephemeralcontainers.
func (v *podValidator) validate(_ context.Context, req admission.Request) (admission.Response, []string, string) {
	if req.Kind.Kind == "Pod" && req.SubResource == "ephemeralcontainers" && req.Operation == admissionv1.Update {
		return validateEphemeral(req)
	}
	return admission.Allowed(""), []string{"none"}, OutcomeAllowed
}

// validateClaims refuses a Pod naming, by resourceClaimName, a claim of a
// GPU DeviceClass or one that does not exist yet (podclaims.Check); a
// failed lookup is a 500, and failurePolicy Fail keeps the Pod out. Only
// cluster admins are exempt: they may make GPU claims anyway
// (runplane-gpu-claims), and none of runplane's components creates a Pod
// that names a claim (stock hands its claims over in the Pod's status).
func (v *podValidator) validateClaims(ctx context.Context, req admission.Request) (admission.Response, []string, string) {
	features := []string{"resource-claims"}
	if req.Kind.Kind != "Pod" || req.SubResource != "" || req.Operation != admissionv1.Create {
		return admission.Allowed(""), []string{"none"}, OutcomeAllowed
	}
	if slices.Contains(req.UserInfo.Groups, mastersGroup) {
		return admission.Allowed(""), features, OutcomeAllowed
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return deny(400, "runplane webhook: decoding the Pod: "+err.Error()), features, OutcomeError
	}
	if err := podclaims.Check(ctx, &pod, req.Namespace, v.claims, v.gpuClasses()); err != nil {
		if _, ok := errors.AsType[*podclaims.DeniedError](err); ok {
			return deny(403, err.Error()), features, OutcomeDenied
		}
		// The API error stays in the webhook's log: it names the webhook's
		// identity and RBAC, which are not the tenant's to read.
		v.log.Error("looking up a claim a Pod names", "namespace", req.Namespace, "user", req.UserInfo.Username, "err", err)
		return deny(500, "runplane webhook: the ResourceClaims this Pod names could not be checked; try again"), features, OutcomeError
	}
	return admission.Allowed(""), features, OutcomeAllowed
}

// validateEphemeral checks the ephemeral containers an update of the
// pods/ephemeralcontainers subresource (kubectl debug) adds: the same rules
// as the containers of a created Pod (mutate.CheckContainers): no reserved
// name, no mount of runplane's sidecar volumes, no route to runplane's
// credentials, and no target among runplane's containers. Ephemeral containers already in the Pod were checked when
// they were added.
func validateEphemeral(req admission.Request) (admission.Response, []string, string) {
	features := []string{"ephemeral-containers"}
	var pod, old corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return deny(400, "runplane webhook: decoding the Pod: "+err.Error()), features, OutcomeError
	}
	if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
		return deny(400, "runplane webhook: decoding the old Pod: "+err.Error()), features, OutcomeError
	}
	if err := checkEphemeral(&pod, &old); err != nil {
		return deny(403, err.Error()), features, OutcomeDenied
	}
	return admission.Allowed(""), features, OutcomeAllowed
}

// checkEphemeral checks the ephemeral containers of pod that old does not
// have (by name: the API server refuses to change an existing one).
func checkEphemeral(pod, old *corev1.Pod) error {
	all := mutate.EphemeralAsContainers(pod.Spec.EphemeralContainers)
	for i, c := range all {
		if slices.ContainsFunc(old.Spec.EphemeralContainers, func(o corev1.EphemeralContainer) bool { return o.Name == c.Name }) {
			continue
		}
		field := fmt.Sprintf("spec.ephemeralContainers[%d]", i)
		if mutate.Reserved(c.Name) {
			return &mutate.ReservedError{Kind: "container", Name: c.Name, Field: field}
		}
		if err := mutate.CheckEphemeralTarget(pod.Spec.EphemeralContainers[i], field); err != nil {
			return err
		}
		if err := mutate.CheckContainers(pod, "spec.ephemeralContainers", all[i:i+1]); err != nil {
			if ce, ok := errors.AsType[*mutate.CredentialError](err); ok {
				ce.Field = field
			}
			return err
		}
	}
	return nil
}
