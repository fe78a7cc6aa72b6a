package natstls

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/runplane/runplane/api"
)

// PublishCA makes the ConfigMap api.NATSCAConfigMap in namespace hold
// bundle (only certificates: ParseCAs checks), creating or updating it;
// an equal one is left alone. It is what the webhook gives worker
// sidecars, so it never holds a key.
func PublishCA(ctx context.Context, client kubernetes.Interface, namespace string, bundle []byte, labels map[string]string) error {
	if _, err := ParseCAs(bundle, "the CA bundle to publish"); err != nil {
		return err
	}
	cms := client.CoreV1().ConfigMaps(namespace)
	cm, err := cms.Get(ctx, api.NATSCAConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: api.NATSCAConfigMap, Namespace: namespace, Labels: labels},
			Data: map[string]string{api.NATSCAKey: string(bundle)}}
		if _, err = cms.Create(ctx, cm, metav1.CreateOptions{}); err == nil || !apierrors.IsAlreadyExists(err) {
			return wrapCM(namespace, err)
		}
		// Another replica made it: compare with theirs.
		cm, err = cms.Get(ctx, api.NATSCAConfigMap, metav1.GetOptions{})
	}
	if err != nil {
		return wrapCM(namespace, err)
	}
	if cm.Data[api.NATSCAKey] == string(bundle) {
		return nil
	}
	cm = cm.DeepCopy()
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[api.NATSCAKey] = string(bundle)
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	return wrapCM(namespace, err)
}

func wrapCM(namespace string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("NATS CA ConfigMap %s/%s: %w", namespace, api.NATSCAConfigMap, err)
}

// CAStore follows the ConfigMap api.NATSCAConfigMap of one namespace.
type CAStore struct {
	namespace string
	mu        sync.RWMutex
	bundle    []byte
	// err is why bundle cannot be used, judged once per change of the
	// ConfigMap, not at every pool Pod's admission.
	err    error
	synced func() bool
}

// Informer is what FollowCA needs of an informer of the ConfigMap: a
// controller-runtime cache's (restricted to it, see CACacheConfig) or
// client-go's.
type Informer interface {
	AddEventHandler(cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error)
}

// FollowCA keeps a CAStore in line with the ConfigMap of namespace as inf
// sees it (missing until inf has listed it); the store has synced once its
// handler has been handed inf's list. ConfigMaps of another name are
// ignored.
func FollowCA(inf Informer, namespace string) (*CAStore, error) {
	s := &CAStore{namespace: namespace}
	s.err = s.check(nil) // missing until the first sync says otherwise
	set := func(cm *corev1.ConfigMap) {
		var b []byte
		if cm != nil {
			b = []byte(cm.Data[api.NATSCAKey])
		}
		err := s.check(b)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.bundle, s.err = b, err
	}
	ours := func(obj any) (*corev1.ConfigMap, bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		cm, ok := obj.(*corev1.ConfigMap)
		return cm, ok && cm.Name == api.NATSCAConfigMap && cm.Namespace == namespace
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if cm, ok := ours(obj); ok {
				set(cm)
			}
		},
		UpdateFunc: func(_, obj any) {
			if cm, ok := ours(obj); ok {
				set(cm)
			}
		},
		DeleteFunc: func(obj any) {
			if _, ok := ours(obj); ok {
				set(nil)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("following ConfigMap %s/%s: %w", namespace, api.NATSCAConfigMap, err)
	}
	s.synced = reg.HasSynced
	return s, nil
}

// CACacheConfig is what a controller-runtime cache keeps of ConfigMaps for
// FollowCA: the ConfigMap of namespace alone (RBAC grants list and watch
// of that name only).
func CACacheConfig(namespace string) ctrlcache.ByObject {
	return ctrlcache.ByObject{
		Namespaces: map[string]ctrlcache.Config{namespace: {}},
		Field:      fields.OneTermEqualSelector("metadata.name", api.NATSCAConfigMap),
	}
}

// HasSynced reports whether the store has seen the ConfigMap (or its
// absence).
func (s *CAStore) HasSynced() bool { return s.synced() }

// Bundle is the ConfigMap's CA bundle, checked to hold certificates only;
// an error while it is missing (the queue publishes it at start) or
// unusable.
func (s *CAStore) Bundle() ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.err != nil {
		return nil, s.err
	}
	return s.bundle, nil
}

func (s *CAStore) check(b []byte) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return fmt.Errorf("runplane's NATS CA is not published yet (ConfigMap %s/%s, key %s: the queue publishes it at start)", s.namespace, api.NATSCAConfigMap, api.NATSCAKey)
	}
	_, err := ParseCAs(b, "ConfigMap "+s.namespace+"/"+api.NATSCAConfigMap)
	return err
}
