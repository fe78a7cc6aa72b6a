package activator

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
)

// ReasonPolicyInvalid is the reason of the Warning Event put on a pool's
// Deployment whose policy annotations (runplane.io/min-available,
// max-replicas, max-backlog, max-in-flight, ...) do not parse: the default
// policy is in force, and GET .../pools/{pool} shows the error
// (policyError).
const ReasonPolicyInvalid = "PolicyInvalid"

// reportPolicies puts a Warning Event on each pool Deployment with an
// invalid policy, once per error (until it changes), and logs it.
func (a *Activator) reportPolicies(ctx context.Context, rec events.EventRecorder) {
	seen := map[string]bool{}
	for _, pl := range a.cfg.Pools.List() {
		if pl.PolicyError == "" || pl.Deployment == "" {
			continue
		}
		k := pl.Namespace + "/" + pl.Deployment
		seen[k] = true
		if a.policyErrs[k] == pl.PolicyError {
			continue
		}
		a.policyErrs[k] = pl.PolicyError
		a.cfg.Logger.Warn("invalid pool policy; the default applies", "namespace", pl.Namespace, "pool", pl.Name, "deployment", pl.Deployment, "err", pl.PolicyError)
		obj := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: pl.Namespace, Name: pl.Deployment}}
		if got, err := a.cfg.Kube.AppsV1().Deployments(pl.Namespace).Get(ctx, pl.Deployment, metav1.GetOptions{}); err == nil {
			obj = got
		}
		rec.Eventf(obj, nil, corev1.EventTypeWarning, ReasonPolicyInvalid, "Parse",
			"pool %s: %s; the default policy applies until it is fixed", pl.Name, pl.PolicyError)
	}
	for k := range a.policyErrs {
		if !seen[k] {
			delete(a.policyErrs, k)
		}
	}
}
