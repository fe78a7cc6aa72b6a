package webhook

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// lookup finds the PersistentVolumeClaims, PriorityClasses and Namespaces admission reads
// (mutate.PVCGetter, PriorityClassGetter, NamespaceGetter) in the manager's
// cache, and from the API server when the cache has not seen one: an object
// created just before the Pod that names it must not be mistaken for a
// missing one, and the webhook server starts before the cache does. A
// missing object is nil, nil.
type lookup struct{ cache, api client.Reader }

func get[T any, P interface {
	*T
	client.Object
}](ctx context.Context, l lookup, key client.ObjectKey) (*T, error) {
	obj := P(new(T))
	err := l.cache.Get(ctx, key, obj)
	if err == nil {
		return obj, nil
	}
	if !apierrors.IsNotFound(err) && !errors.As(err, new(*ctrlcache.ErrCacheNotStarted)) {
		return nil, err
	}
	if err := l.api.Get(ctx, key, obj); apierrors.IsNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	return obj, nil
}

// GetResourceClaim reads the claim from the API server, never the cache:
// a Pod naming a claim is rare (the webhook entry's matchCondition), and a
// cache that has not yet seen a claim deleted and made again under the
// same name (a GPU claim now) would admit from the old one. The webhook
// caches no claims at all, so it needs no list or watch of them.
func (l lookup) GetResourceClaim(ctx context.Context, namespace, name string) (*resourcev1.ResourceClaim, error) {
	var c resourcev1.ResourceClaim
	if err := l.api.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &c); apierrors.IsNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	return &c, nil
}

func (l lookup) GetPVC(ctx context.Context, namespace, name string) (*corev1.PersistentVolumeClaim, error) {
	return get[corev1.PersistentVolumeClaim](ctx, l, client.ObjectKey{Namespace: namespace, Name: name})
}

func (l lookup) GetPriorityClass(ctx context.Context, name string) (*schedulingv1.PriorityClass, error) {
	return get[schedulingv1.PriorityClass](ctx, l, client.ObjectKey{Name: name})
}

func (l lookup) GetNamespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	return get[corev1.Namespace](ctx, l, client.ObjectKey{Name: name})
}
