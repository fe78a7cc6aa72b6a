package catalog

import (
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/runplane/runplane/api"
)

// Store holds the current catalog and follows the ConfigMap through an
// informer (Follow).
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

// Informer is what Follow needs of an informer of the catalog ConfigMap:
// a controller-runtime cache's (restricted to that ConfigMap, see
// CacheConfig) or client-go's.
type Informer interface {
	AddEventHandler(cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error)
}

// Follow keeps a Store in line with the catalog ConfigMap of namespace
// (runplane's) as inf sees it; the Store has synced once its handler has
// been handed inf's list. Objects of another name or namespace are
// ignored, so inf may see more ConfigMaps — a tenant's ConfigMap of the
// catalog's name never replaces the catalog, however inf is scoped.
func Follow(inf Informer, namespace string) (*Store, error) {
	s := &Store{catalog: Catalog{}}
	theCatalog := func(obj any) (*corev1.ConfigMap, bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		cm, ok := obj.(*corev1.ConfigMap)
		return cm, ok && cm.Name == api.CatalogConfigMap && cm.Namespace == namespace
	}
	set := func(obj any) {
		if cm, ok := theCatalog(obj); ok {
			s.set(cm)
		}
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if _, ok := theCatalog(obj); ok {
				s.set(nil)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("catalog: following ConfigMap %s: %w", api.CatalogConfigMap, err)
	}
	s.synced = reg.HasSynced
	return s, nil
}

// CacheConfig is what a controller-runtime cache keeps of ConfigMaps for
// Follow: the catalog ConfigMap of namespace alone (RBAC grants list and
// watch of that name only).
func CacheConfig(namespace string) ctrlcache.ByObject {
	return ctrlcache.ByObject{
		Namespaces: map[string]ctrlcache.Config{namespace: {}},
		Field:      fields.OneTermEqualSelector("metadata.name", api.CatalogConfigMap),
	}
}
