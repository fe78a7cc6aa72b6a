package webhook

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// applyPolicies creates runplane's ValidatingAdmissionPolicies and
// bindings (Policies) and rewrites one whose shape changed, when runplane
// manages its admission objects (make dev, tests); the chart ships them
// otherwise.
func (r *configReconciler) applyPolicies(ctx context.Context) error {
	policies, bindings := Policies(PolicyOptions{Namespace: r.cfg.Namespace, GPU: r.cfg.GPUPolicy, TierGrantorGroups: r.cfg.TierGrantorGroups})
	papi := r.client.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	for _, p := range policies {
		err := applyByHash(ctx, p, p.Spec, papi.Get, papi.Create, papi.Update,
			func(have *admissionregistrationv1.ValidatingAdmissionPolicy) { have.Spec = p.Spec })
		if err != nil {
			return fmt.Errorf("ValidatingAdmissionPolicy %s: %w", p.Name, err)
		}
	}
	bapi := r.client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	for _, b := range bindings {
		err := applyByHash(ctx, b, b.Spec, bapi.Get, bapi.Create, bapi.Update,
			func(have *admissionregistrationv1.ValidatingAdmissionPolicyBinding) { have.Spec = b.Spec })
		if err != nil {
			return fmt.Errorf("ValidatingAdmissionPolicyBinding %s: %w", b.Name, err)
		}
	}
	return nil
}

// applyByHash creates want, or rewrites the object of its name (setSpec)
// when its recorded shape hash is not spec's.
func applyByHash[T metav1.Object](ctx context.Context, want T, spec any,
	get func(context.Context, string, metav1.GetOptions) (T, error),
	create func(context.Context, T, metav1.CreateOptions) (T, error),
	update func(context.Context, T, metav1.UpdateOptions) (T, error),
	setSpec func(have T),
) error {
	hash := map[string]string{ConfigHashAnnotation: shapeHash([]any{spec})}
	want.SetAnnotations(hash)
	have, err := get(ctx, want.GetName(), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = create(ctx, want, metav1.CreateOptions{})
	case err == nil && have.GetAnnotations()[ConfigHashAnnotation] != hash[ConfigHashAnnotation]:
		setSpec(have)
		have.SetAnnotations(mergeAnnotations(have.GetAnnotations(), hash))
		_, err = update(ctx, have, metav1.UpdateOptions{})
	}
	return err
}
