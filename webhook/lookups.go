package webhook

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1"
)

// cachedGet reads an object from an informer cache, and from the API
// server when the cache has not seen it yet: an object created just before
// the Pod that names it must not be mistaken for a missing one. A missing
// object is nil, nil.
func cachedGet[T any](ctx context.Context, cached func() (*T, error), get func(context.Context) (*T, error)) (*T, error) {
	obj, err := cached()
	if err == nil {
		return obj, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}
	obj, err = get(ctx)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return obj, err
}

// pvcLookup finds claims (mutate.PVCGetter).
type pvcLookup struct {
	lister corelisters.PersistentVolumeClaimLister
	client kubernetes.Interface
}

func (l pvcLookup) GetPVC(ctx context.Context, namespace, name string) (*corev1.PersistentVolumeClaim, error) {
	return cachedGet(ctx, func() (*corev1.PersistentVolumeClaim, error) {
		return l.lister.PersistentVolumeClaims(namespace).Get(name)
	},
		func(ctx context.Context) (*corev1.PersistentVolumeClaim, error) {
			return l.client.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, name, metav1.GetOptions{})
		})
}

// priorityClassLookup finds PriorityClasses (mutate.PriorityClassGetter).
type priorityClassLookup struct {
	lister schedulinglisters.PriorityClassLister
	client kubernetes.Interface
}

func (l priorityClassLookup) GetPriorityClass(ctx context.Context, name string) (*schedulingv1.PriorityClass, error) {
	return cachedGet(ctx, func() (*schedulingv1.PriorityClass, error) { return l.lister.Get(name) },
		func(ctx context.Context) (*schedulingv1.PriorityClass, error) {
			return l.client.SchedulingV1().PriorityClasses().Get(ctx, name, metav1.GetOptions{})
		})
}

// namespaceLookup finds Namespaces (mutate.NamespaceGetter).
type namespaceLookup struct {
	lister corelisters.NamespaceLister
	client kubernetes.Interface
}

func (l namespaceLookup) GetNamespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	return cachedGet(ctx, func() (*corev1.Namespace, error) { return l.lister.Get(name) },
		func(ctx context.Context) (*corev1.Namespace, error) {
			return l.client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		})
}
