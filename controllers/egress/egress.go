// Package egress keeps one NetworkPolicy, PolicyName, in every namespace that
// has Pods labelled runplane.io/egress: restricted. It selects those Pods and
// allows them DNS, the public internet, and the NATS endpoint; every private,
// shared and link-local range (cluster networks, node networks, cloud
// metadata) is denied. When the last restricted Pod of a namespace goes, the
// policy goes too.
package egress

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/runplane/runplane/api"
)

// PolicyName is the controller-owned NetworkPolicy of a namespace.
const PolicyName = "runplane-egress"

// DeniedIPv4 and DeniedIPv6 are the ranges a restricted Pod cannot reach:
// RFC 1918 private, RFC 6598 shared (CGNAT), loopback, link-local (which
// holds cloud metadata at 169.254.169.254), and IPv6 unique-local and
// link-local.
var (
	DeniedIPv4 = []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16", "127.0.0.0/8"}
	DeniedIPv6 = []string{"fc00::/7", "fe80::/10", "::1/128"}
)

// NATSEndpoint is where restricted Pods may reach NATS.
type NATSEndpoint struct {
	Namespace string
	PodLabels map[string]string
	Port      int32
}

// Options configure the egress controller.
type Options struct {
	NATS NATSEndpoint
}

func (o Options) validate() error {
	if o.NATS.Namespace == "" || len(o.NATS.PodLabels) == 0 || o.NATS.Port <= 0 || o.NATS.Port > 65535 {
		return fmt.Errorf("egress: NATS endpoint needs a namespace, pod labels and a port in 1-65535 (got namespace %q, labels %v, port %d)",
			o.NATS.Namespace, o.NATS.PodLabels, o.NATS.Port)
	}
	return nil
}

// Policy is the desired NetworkPolicy of a namespace. It shares no slice or
// map with package state: the client decodes API answers into it in place.
func Policy(namespace string, nats NATSEndpoint) *networkingv1.NetworkPolicy {
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	dns := intstr.FromInt32(53)
	natsPort := intstr.FromInt32(nats.Port)
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: PolicyName, Namespace: namespace,
			Labels: map[string]string{api.LabelManagedBy: api.ManagedByController}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{api.LabelEgress: api.EgressRestricted}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{
				// DNS to any destination: cluster DNS lives in a private range.
				{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}}},
				// The public internet, minus every private range.
				{To: []networkingv1.NetworkPolicyPeer{
					{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: slices.Clone(DeniedIPv4)}},
					{IPBlock: &networkingv1.IPBlock{CIDR: "::/0", Except: slices.Clone(DeniedIPv6)}},
				}},
				// NATS, by identity rather than address.
				{
					To: []networkingv1.NetworkPolicyPeer{{
						NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: nats.Namespace}},
						PodSelector:       &metav1.LabelSelector{MatchLabels: maps.Clone(nats.PodLabels)},
					}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &natsPort}},
				},
			},
		},
	}
}

// Reconciler keeps the policy of one namespace (the request's Name).
type Reconciler struct {
	client.Client
	Options
}

// Setup registers the egress controller with the manager.
func Setup(mgr ctrl.Manager, opts Options) error {
	if err := opts.validate(); err != nil {
		return err
	}
	r := &Reconciler{Client: mgr.GetClient(), Options: opts}
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
	want := Policy(ns, r.NATS)
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
