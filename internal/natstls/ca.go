package natstls

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

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
	err error
}

// WatchCA starts following the ConfigMap in namespace and waits, up to a
// minute, for the first sync (a ConfigMap that does not exist yet syncs as
// missing). The watch stops when ctx ends.
func WatchCA(ctx context.Context, client kubernetes.Interface, namespace string) (*CAStore, error) {
	s := &CAStore{namespace: namespace}
	s.err = s.check(nil) // missing until the first sync says otherwise
	set := func(obj any) {
		var b []byte
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			if cm.Name != api.NATSCAConfigMap {
				return
			}
			b = []byte(cm.Data[api.NATSCAKey])
		}
		err := s.check(b)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.bundle, s.err = b, err
	}
	cms := client.CoreV1().ConfigMaps(namespace)
	only := func(o metav1.ListOptions) metav1.ListOptions {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", api.NATSCAConfigMap).String()
		return o
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return cms.List(ctx, only(o)) },
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cms.Watch(ctx, only(o))
		},
	}
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		// A fake clientset (tests) does not stream initial events.
		ListerWatcher: cache.ToListWatcherWithWatchListSemantics(lw, client),
		ObjectType:    &corev1.ConfigMap{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    set,
			UpdateFunc: func(_, obj any) { set(obj) },
			DeleteFunc: func(obj any) {
				if cm, ok := obj.(*corev1.ConfigMap); !ok || cm.Name == api.NATSCAConfigMap {
					set(nil)
				}
			},
		},
	})
	go informer.Run(ctx.Done())
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), informer.HasSynced) {
		return nil, fmt.Errorf("watching ConfigMap %s/%s: not synced: %w", namespace, api.NATSCAConfigMap, syncCtx.Err())
	}
	return s, nil
}

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
