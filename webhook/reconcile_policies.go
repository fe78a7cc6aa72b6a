package webhook

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// applyPolicies creates runplane's ValidatingAdmissionPolicies and
// bindings (Policies) and rewrites one whose shape changed, when runplane
// manages its admission objects (make dev, tests); the chart ships them
// otherwise.
func (r *configReconciler) applyPolicies(ctx context.Context) error {
	policies, bindings := Policies(PolicyOptions{Namespace: r.cfg.Namespace, GPU: r.cfg.Webhooks.GPUPolicy})
	papi := r.client.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	for _, p := range policies {
		p.Annotations = map[string]string{ConfigHashAnnotation: shapeHash([]any{p.Spec})}
		have, err := papi.Get(ctx, p.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = papi.Create(ctx, p, metav1.CreateOptions{})
		case err == nil && have.Annotations[ConfigHashAnnotation] != p.Annotations[ConfigHashAnnotation]:
			have.Spec, have.Annotations = p.Spec, mergeAnnotations(have.Annotations, p.Annotations)
			_, err = papi.Update(ctx, have, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("ValidatingAdmissionPolicy %s: %w", p.Name, err)
		}
	}
	bapi := r.client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	for _, b := range bindings {
		b.Annotations = map[string]string{ConfigHashAnnotation: shapeHash([]any{b.Spec})}
		have, err := bapi.Get(ctx, b.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = bapi.Create(ctx, b, metav1.CreateOptions{})
		case err == nil && have.Annotations[ConfigHashAnnotation] != b.Annotations[ConfigHashAnnotation]:
			have.Spec, have.Annotations = b.Spec, mergeAnnotations(have.Annotations, b.Annotations)
			_, err = bapi.Update(ctx, have, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("ValidatingAdmissionPolicyBinding %s: %w", b.Name, err)
		}
	}
	return nil
}
