package catalog

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/runplane/runplane/api"
)

// Store holds the current catalog and follows the ConfigMap with a watch.
// A ConfigMap that fails to parse leaves the last good catalog in place and
// is reported through LastError, so one bad edit never empties the catalog.
type Store struct {
	mu      sync.RWMutex
	catalog Catalog
	lastErr error
	synced  func() bool
}

// NewStaticStore returns a Store that never changes: for tests and tools.
func NewStaticStore(c Catalog) *Store {
	return &Store{catalog: c, synced: func() bool { return true }}
}

// Catalog returns the current catalog. Callers must not modify it.
func (s *Store) Catalog() Catalog {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.catalog
}

// LastError is the parse error of the newest ConfigMap version, if any.
func (s *Store) LastError() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.lastErr
}

// HasSynced reports whether the store has seen the ConfigMap (or its absence).
func (s *Store) HasSynced() bool { return s.synced() }

func (s *Store) set(cm *corev1.ConfigMap) {
	var data map[string]string
	if cm != nil {
		data = cm.Data
	}
	c, err := Parse(data)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.lastErr = err
		return
	}
	s.catalog, s.lastErr = c, nil
}

// Watch starts following the catalog ConfigMap in namespace and waits, up to
// a minute, for the first sync. The watch stops when ctx ends.
func Watch(ctx context.Context, client kubernetes.Interface, namespace string) (*Store, error) {
	s := &Store{catalog: Catalog{}}
	lw := cache.NewListWatchFromClient(client.CoreV1().RESTClient(), "configmaps", namespace,
		fields.OneTermEqualSelector("metadata.name", api.CatalogConfigMap))
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &corev1.ConfigMap{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { s.set(obj.(*corev1.ConfigMap)) },
			UpdateFunc: func(_, obj any) { s.set(obj.(*corev1.ConfigMap)) },
			DeleteFunc: func(any) { s.set(nil) },
		},
	})
	s.synced = informer.HasSynced
	go informer.Run(ctx.Done())
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), informer.HasSynced) {
		return nil, fmt.Errorf("catalog: watching ConfigMap %s/%s: not synced: %w", namespace, api.CatalogConfigMap, syncCtx.Err())
	}
	return s, nil
}
