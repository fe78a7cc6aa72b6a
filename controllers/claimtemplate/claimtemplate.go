// Package claimtemplate keeps the ResourceClaimTemplates of DRA GPU specs:
// runplane-<spec> in every namespace with a live Pod (or stock placeholder)
// of a DRA spec of the catalog, exactly as catalog.Spec.ClaimTemplate builds
// it, labelled app.kubernetes.io/managed-by=runplane-controller. A template
// that nobody needs any more, or whose spec left the catalog, is deleted; one
// that a tenant deleted, relabelled or pre-created under that name is
// replaced (a template's spec is immutable: a changed spec is deleted and
// created again).
package claimtemplate

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
)

// Reconciler keeps the templates of one namespace (the request's Name).
type Reconciler struct {
	// Client reads through the manager's cache, where templates are only
	// those labelled managed-by runplane-controller.
	Client client.Client
	// Reader reads the API server directly: a template under runplane's
	// name without runplane's label is not in the cache.
	Reader client.Reader
	// Namespace holds the catalog ConfigMap (api.CatalogConfigMap).
	Namespace string
}

// Setup registers the controller. The manager's cache must hold the
// catalog ConfigMap of namespace and the managed templates.
func Setup(mgr ctrl.Manager, namespace string) error {
	r := &Reconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Namespace: namespace}
	byNamespace := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetNamespace()}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("gpu-claim-templates").
		// Namespace keys, not object keys: the templates of a namespace
		// follow all its GPU Pods at once.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if specOf(o.GetLabels()) == "" {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetNamespace()}}}
		})).
		Watches(&resourcev1.ResourceClaimTemplate{}, byNamespace).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.allNamespaces)).
		Complete(r)
}

// specOf is the spec a Pod of runplane's holds devices for: its GPU spec,
// or the spec of a stock placeholder.
func specOf(labels map[string]string) string {
	if s := labels[api.LabelGPUSpec]; s != "" {
		return s
	}
	return labels[api.LabelStock]
}

// allNamespaces are those with a GPU Pod or a managed template: a catalog
// change may concern each of them.
func (r *Reconciler) allNamespaces(ctx context.Context, o client.Object) []reconcile.Request {
	if o.GetNamespace() != r.Namespace || o.GetName() != api.CatalogConfigMap {
		return nil
	}
	set := map[string]bool{}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing Pods after a catalog change")
	}
	for _, p := range pods.Items {
		if specOf(p.Labels) != "" {
			set[p.Namespace] = true
		}
	}
	var templates resourcev1.ResourceClaimTemplateList
	if err := r.Client.List(ctx, &templates); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing ResourceClaimTemplates after a catalog change")
	}
	for _, t := range templates.Items {
		set[t.Namespace] = true
	}
	out := make([]reconcile.Request, 0, len(set))
	for ns := range set {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: ns}})
	}
	return out
}

// Reconcile makes the namespace's managed templates those its live Pods
// need. A catalog that does not parse changes nothing (the error is
// retried): a bad edit must not delete the templates Pods are waiting for.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ns := req.Name
	cat, err := r.catalog(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing Pods in %s: %w", ns, err)
	}
	want := map[string]*resourcev1.ResourceClaimTemplate{}
	for _, p := range pods.Items {
		name := specOf(p.Labels)
		if name == "" || !live(&p) {
			continue
		}
		if s, ok := cat[name]; ok && s.IsDRA() {
			want[catalog.ClaimTemplateName(name)] = s.ClaimTemplate(ns)
		}
	}
	var have resourcev1.ResourceClaimTemplateList
	if err := r.Client.List(ctx, &have, client.InNamespace(ns), client.MatchingLabels{api.LabelManagedBy: api.ManagedByController}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing ResourceClaimTemplates in %s: %w", ns, err)
	}
	var errs []error
	for i := range have.Items {
		t := &have.Items[i]
		w, ok := want[t.Name]
		switch {
		case !ok || !equality.Semantic.DeepEqual(t.Spec, w.Spec):
			// Unneeded, or its spec changed (immutable): gone, and
			// created again below when needed.
			if err := r.delete(ctx, t); err != nil {
				errs = append(errs, err)
				delete(want, t.Name)
			}
		case !labelsHold(t.Labels, w.Labels):
			maps.Copy(t.Labels, w.Labels)
			if err := r.Client.Update(ctx, t); err != nil {
				errs = append(errs, fmt.Errorf("ResourceClaimTemplate %s/%s: restoring labels: %w", ns, t.Name, err))
			}
			delete(want, t.Name)
		default:
			delete(want, t.Name)
		}
	}
	for _, name := range sortedKeys(want) {
		if err := r.create(ctx, want[name]); err != nil {
			errs = append(errs, err)
		}
	}
	return reconcile.Result{}, errors.Join(errs...)
}

// catalog reads the catalog ConfigMap from the cache; no ConfigMap is an
// empty catalog.
func (r *Reconciler) catalog(ctx context.Context) (catalog.Catalog, error) {
	var cm corev1.ConfigMap
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: api.CatalogConfigMap}, &cm)
	if apierrors.IsNotFound(err) {
		return catalog.Catalog{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the catalog ConfigMap %s/%s: %w", r.Namespace, api.CatalogConfigMap, err)
	}
	c, err := catalog.Parse(cm.Data)
	if err != nil {
		return nil, fmt.Errorf("catalog ConfigMap %s/%s (templates left as they are): %w", r.Namespace, api.CatalogConfigMap, err)
	}
	return c, nil
}

// create creates a template; one that exists under the name but is not
// exactly it (a tenant's, relabelled, or of an older catalog) is replaced.
func (r *Reconciler) create(ctx context.Context, t *resourcev1.ResourceClaimTemplate) error {
	err := r.Client.Create(ctx, t.DeepCopy())
	if err == nil || !apierrors.IsAlreadyExists(err) {
		return wrap(t, "creating", err)
	}
	var old resourcev1.ResourceClaimTemplate
	if err := r.Reader.Get(ctx, client.ObjectKeyFromObject(t), &old); err != nil {
		return wrap(t, "reading the one in its place", client.IgnoreNotFound(err))
	}
	if labelsHold(old.Labels, t.Labels) && equality.Semantic.DeepEqual(old.Spec, t.Spec) {
		return nil // created a moment ago, not in the cache yet
	}
	if err := r.delete(ctx, &old); err != nil {
		return err
	}
	return wrap(t, "creating", r.Client.Create(ctx, t.DeepCopy()))
}

// delete deletes exactly the template read (UID precondition).
func (r *Reconciler) delete(ctx context.Context, t *resourcev1.ResourceClaimTemplate) error {
	err := r.Client.Delete(ctx, t, client.Preconditions{UID: ptr.To(t.UID)})
	return wrap(t, "deleting", client.IgnoreNotFound(err))
}

func wrap(t *resourcev1.ResourceClaimTemplate, what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("ResourceClaimTemplate %s/%s: %s: %w", t.Namespace, t.Name, what, err)
}

// live Pods still need their claim: not deleted, not finished.
func live(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

func labelsHold(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
