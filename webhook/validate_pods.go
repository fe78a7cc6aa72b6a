package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/runplane/runplane/webhook/mutate"
)

// validatePod checks the ephemeral containers an update of the
// pods/ephemeralcontainers subresource (kubectl debug) adds: the same rules
// as the containers of a created Pod (mutate.CheckContainers): no reserved
// name, no mount of runplane's sidecar volumes, no route to runplane's
// credentials, and no target among runplane's containers. Ephemeral containers already in the Pod were checked when
// they were added.
func validatePod(_ context.Context, req admission.Request) (admission.Response, []string, string) {
	features := []string{"ephemeral-containers"}
	if req.Kind.Kind != "Pod" || req.SubResource != "ephemeralcontainers" || req.Operation != admissionv1.Update {
		return admission.Allowed(""), features, OutcomeAllowed
	}
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
