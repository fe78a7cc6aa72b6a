package callback

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sync/singleflight"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// Namespaces tells a namespace's UID, from which its signing key derives
// (NamespaceKey): a namespace deleted and made again under the same name,
// by another tenant maybe, has another UID, so another key.
type Namespaces interface {
	// UID of namespace ns; fresh: read within the last second.
	// ErrNoNamespace when there is none.
	UID(ctx context.Context, ns string, fresh bool) (string, error)
}

// ErrNoNamespace: the namespace does not exist.
var ErrNoNamespace = errors.New("no such namespace")

// KubeNamespaces reads UIDs from the API server (RBAC get namespaces,
// nothing more: no list or watch, which would show every tenant's
// namespace), keeping each for a short while: an invocation with a
// callback must not cost an API call each.
type KubeNamespaces struct {
	client corev1client.NamespacesGetter
	ttl    time.Duration
	cache  *cache.LRUExpireCache
	// fresh holds reads for freshTTL, and reads runs one read per
	// namespace at a time: a tenant polling its key endpoint costs the
	// apiserver (and the client's rate budget other tenants' invocations
	// share) one read a second per namespace, however often it asks.
	fresh *cache.LRUExpireCache
	reads singleflight.Group
}

// freshTTL is how old a "fresh" read may be. A namespace cannot be deleted
// and made again within it: deletion waits for the namespace controller to
// empty it, which takes seconds.
const freshTTL = time.Second

// NewKubeNamespaces keeps up to 4096 UIDs for ttl each. A UID read before
// its namespace was made again is used for ttl at most, and only for new
// invocations' callbacks: those fail to verify under the new key, they do
// not verify under the old (the key endpoint reads fresh).
func NewKubeNamespaces(client corev1client.NamespacesGetter, ttl time.Duration) *KubeNamespaces {
	return &KubeNamespaces{client: client, ttl: ttl, cache: cache.NewLRUExpireCache(4096), fresh: cache.NewLRUExpireCache(4096)}
}

// UID implements Namespaces.
func (k *KubeNamespaces) UID(ctx context.Context, ns string, fresh bool) (string, error) {
	c := k.cache
	if fresh {
		c = k.fresh
	}
	if v, ok := c.Get(ns); ok {
		return v.(string), nil
	}
	ch := k.reads.DoChan(ns, func() (any, error) {
		// A caller that missed the cache just as a shared read finished
		// (and left the group) finds that read's answer here, not a second
		// read.
		if v, ok := c.Get(ns); ok {
			return v.(string), nil
		}
		// The read is shared by every caller asking meanwhile: the first
		// one hanging up (a tenant's request) must not fail the others.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readTimeout)
		defer cancel()
		n, err := k.client.Namespaces().Get(rctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			k.cache.Remove(ns)
			k.fresh.Remove(ns)
			return "", fmt.Errorf("namespace %q: %w", ns, ErrNoNamespace)
		}
		if err != nil {
			return "", fmt.Errorf("namespace %q: %w", ns, err)
		}
		uid := string(n.UID)
		k.cache.Add(ns, uid, k.ttl)
		k.fresh.Add(ns, uid, freshTTL)
		return uid, nil
	})
	select {
	case r := <-ch:
		return r.Val.(string), r.Err
	case <-ctx.Done():
		return "", fmt.Errorf("namespace %q: %w", ns, context.Cause(ctx))
	}
}

// readTimeout bounds a shared read, which no caller's context does.
const readTimeout = 10 * time.Second

// NoNamespaces is the source without Kubernetes (-no-kube): there are no
// namespace UIDs, every key derives from the namespace's name alone.
type NoNamespaces struct{}

// UID implements Namespaces: always "".
func (NoNamespaces) UID(context.Context, string, bool) (string, error) { return "", nil }
