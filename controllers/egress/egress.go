// Package egress restricts the egress of Pods labelled runplane.io/egress:
// restricted (every pool Pod): the cluster DNS, the NATS endpoint and the
// public internet but port 53; never another Pod, a node, a private, shared,
// link-local or translation range (cluster networks, cloud metadata), or
// Settings.DeniedCIDRs. Settings.Enforcement says by what:
//   - adminNetworkPolicy (default): AdminPolicy, one cluster-scoped
//     AdminNetworkPolicy the chart ships, which no namespace NetworkPolicy
//     lifts. The controller keeps nothing then.
//   - networkPolicy: the controller keeps the NetworkPolicy PolicyName in
//     every namespace with restricted Pods, and deletes it with the last one.
//     A tenant's own NetworkPolicy selecting its Pods adds to it, and so can
//     lift it: for network plugins without AdminNetworkPolicy only.
package egress

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/runplane/runplane/api"
)

// Reconciler keeps the policy of one namespace (the request's Name).
type Reconciler struct {
	client.Client
	Settings Settings
}

// Setup registers the egress controller with the manager. In
// adminNetworkPolicy mode it keeps no policy: it deletes the ones
// networkPolicy mode left.
func Setup(mgr ctrl.Manager, s Settings) error {
	if err := s.Validate(); err != nil {
		return err
	}
	r := &Reconciler{Client: mgr.GetClient(), Settings: s}
	byNamespace := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetNamespace()}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("egress-policy").
		// Namespace keys, not Pod keys: one policy per namespace.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if o.GetLabels()[api.LabelEgress] == "" {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetNamespace()}}}
		})).
		Watches(&networkingv1.NetworkPolicy{}, byNamespace).
		Complete(r)
}

// Reconcile creates, updates or deletes the namespace's policy.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ns := req.Name
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{api.LabelEgress: api.EgressRestricted}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing restricted Pods in %s: %w", ns, err)
	}
	live := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live++
		}
	}
	if r.Settings.Enforcement != EnforcementNetworkPolicy {
		live = 0 // the AdminNetworkPolicy restricts them
	}
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: PolicyName, Namespace: ns}}
	if live == 0 {
		err := r.Get(ctx, client.ObjectKeyFromObject(np), np)
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		if err != nil {
			return reconcile.Result{}, fmt.Errorf("getting NetworkPolicy %s/%s: %w", ns, PolicyName, err)
		}
		err = r.Delete(ctx, np, client.Preconditions{UID: ptr.To(np.UID)})
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	want := Policy(ns, r.Settings)
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, np, func() error {
		if np.Labels == nil {
			np.Labels = map[string]string{}
		}
		maps.Copy(np.Labels, want.Labels)
		np.Spec = want.Spec
		return nil
	}); err != nil {
		return reconcile.Result{}, fmt.Errorf("NetworkPolicy %s/%s: %w", ns, PolicyName, err)
	}
	return reconcile.Result{}, nil
}
