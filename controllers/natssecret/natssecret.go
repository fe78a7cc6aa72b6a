// Package natssecret keeps the Secret api.NATSCredentialsSecret in every
// namespace that runs pool Pods (label runplane.io/pool), as a copy of a
// source Secret in runplane's namespace. The worker sidecar mounts it; it is
// the only container that ever sees NATS credentials. When a namespace has
// no pool Pods left, its copy is deleted.
package natssecret

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/runplane/runplane/api"
)

// Options configure the sync.
type Options struct {
	// Namespace and Source name the Secret that is copied.
	Namespace, Source string
}

// Reconciler keeps one namespace's copy (the request's Name is the namespace).
type Reconciler struct {
	client.Client
	// sources reads the source Secret from a cache that holds it alone, so
	// the controller never caches other Secrets of runplane's namespace.
	sources client.Reader
	Options
}

// Setup registers the sync with the manager.
func Setup(mgr ctrl.Manager, opts Options) error {
	if opts.Namespace == "" || opts.Source == "" {
		return fmt.Errorf("natssecret: Options.Namespace and Options.Source are required")
	}
	srcCache, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		DefaultNamespaces: map[string]cache.Config{opts.Namespace: {}},
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Field: fields.OneTermEqualSelector("metadata.name", opts.Source)},
		},
	})
	if err != nil {
		return fmt.Errorf("natssecret: source cache: %w", err)
	}
	if err := mgr.Add(srcCache); err != nil {
		return fmt.Errorf("natssecret: source cache: %w", err)
	}
	r := &Reconciler{Client: mgr.GetClient(), sources: srcCache, Options: opts}
	return ctrl.NewControllerManagedBy(mgr).
		Named("nats-credentials").
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if o.GetLabels()[api.LabelPool] == "" {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetNamespace()}}}
		})).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if o.GetName() != api.NATSCredentialsSecret {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetNamespace()}}}
		})).
		WatchesRawSource(source.Kind(srcCache, &corev1.Secret{}, handler.TypedEnqueueRequestsFromMapFunc(r.allNamespaces))).
		Complete(r)
}

// allNamespaces requeues every namespace with pool Pods when the source changes.
func (r *Reconciler) allNamespaces(ctx context.Context, _ *corev1.Secret) []reconcile.Request {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.HasLabels{api.LabelPool}); err != nil {
		log.FromContext(ctx).Error(err, "listing pool Pods")
		return nil
	}
	seen := map[string]bool{}
	var reqs []reconcile.Request
	for _, p := range pods.Items {
		if !seen[p.Namespace] {
			seen[p.Namespace] = true
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Namespace}})
		}
	}
	return reqs
}

// Reconcile copies the source into the namespace, or removes the copy.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ns := req.Name
	if ns == r.Namespace && r.Source == api.NATSCredentialsSecret {
		return reconcile.Result{}, nil // the source itself
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(ns), client.HasLabels{api.LabelPool}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing pool Pods in %s: %w", ns, err)
	}
	key := types.NamespacedName{Namespace: ns, Name: api.NATSCredentialsSecret}
	var cur corev1.Secret
	err := r.Get(ctx, key, &cur) // the cache holds managed Secrets only
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("getting Secret %s/%s: %w", ns, key.Name, err)
	}
	if len(pods.Items) == 0 {
		if exists {
			err := r.Delete(ctx, &cur, client.Preconditions{UID: ptr.To(cur.UID)})
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		return reconcile.Result{}, nil
	}
	var src corev1.Secret
	if err := r.sources.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: r.Source}, &src); err != nil {
		if apierrors.IsNotFound(err) {
			log.FromContext(ctx).Info("NATS credentials source Secret is missing; pool Pods cannot start their sidecar",
				"source", r.Namespace+"/"+r.Source, "namespace", ns)
			return reconcile.Result{}, nil // its creation requeues every namespace
		}
		return reconcile.Result{}, fmt.Errorf("getting source Secret %s/%s: %w", r.Namespace, r.Source, err)
	}
	if !exists {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: ns, Labels: map[string]string{api.LabelManagedBy: api.ManagedByController}},
			Type:       src.Type,
			Data:       maps.Clone(src.Data),
		}
		if err := r.Create(ctx, s); err != nil {
			if apierrors.IsAlreadyExists(err) {
				// A Secret of that name we do not manage: leave it alone.
				log.FromContext(ctx).Info("Secret exists and is not managed by runplane; not overwriting", "secret", ns+"/"+key.Name)
				return reconcile.Result{}, nil
			}
			return reconcile.Result{}, fmt.Errorf("creating Secret %s/%s: %w", ns, key.Name, err)
		}
		return reconcile.Result{}, nil
	}
	if maps.EqualFunc(cur.Data, src.Data, func(a, b []byte) bool { return string(a) == string(b) }) {
		return reconcile.Result{}, nil
	}
	cur.Data = maps.Clone(src.Data)
	if err := r.Update(ctx, &cur); err != nil {
		return reconcile.Result{}, fmt.Errorf("updating Secret %s/%s: %w", ns, key.Name, err)
	}
	return reconcile.Result{}, nil
}
