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

// pvcLookup reads claims from the informer cache, and from the API server
// when the cache has not seen a claim yet: a claim created just before its
// Pod must not be mistaken for a missing one.
type pvcLookup struct {
	lister corelisters.PersistentVolumeClaimLister
	client kubernetes.Interface
}

func (l pvcLookup) GetPVC(ctx context.Context, namespace, name string) (*corev1.PersistentVolumeClaim, error) {
	pvc, err := l.lister.PersistentVolumeClaims(namespace).Get(name)
	if err == nil {
		return pvc, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}
	pvc, err = l.client.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return pvc, err
}

type priorityClassLookup struct {
	lister schedulinglisters.PriorityClassLister
	client kubernetes.Interface
}

func (l priorityClassLookup) GetPriorityClass(ctx context.Context, name string) (*schedulingv1.PriorityClass, error) {
	pc, err := l.lister.Get(name)
	if err == nil {
		return pc, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}
	pc, err = l.client.SchedulingV1().PriorityClasses().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return pc, err
}
