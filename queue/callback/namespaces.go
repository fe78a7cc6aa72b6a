package callback

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// Namespaces tells a namespace's UID, from which its signing key derives
// (NamespaceKey): a namespace deleted and made again under the same name,
// by another tenant maybe, has another UID, so another key.
type Namespaces interface {
	// UID of namespace ns; fresh skips any cache. ErrNoNamespace when
	// there is none.
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
}

// NewKubeNamespaces keeps up to 4096 UIDs for ttl each. A UID read before
// its namespace was made again is used for ttl at most, and only for new
// invocations' callbacks: those fail to verify under the new key, they do
// not verify under the old (the key endpoint reads fresh).
func NewKubeNamespaces(client corev1client.NamespacesGetter, ttl time.Duration) *KubeNamespaces {
	return &KubeNamespaces{client: client, ttl: ttl, cache: cache.NewLRUExpireCache(4096)}
}

// UID implements Namespaces.
func (k *KubeNamespaces) UID(ctx context.Context, ns string, fresh bool) (string, error) {
	if !fresh {
		if v, ok := k.cache.Get(ns); ok {
			return v.(string), nil
		}
	}
	n, err := k.client.Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		k.cache.Remove(ns)
		return "", fmt.Errorf("namespace %q: %w", ns, ErrNoNamespace)
	}
	if err != nil {
		return "", fmt.Errorf("namespace %q: %w", ns, err)
	}
	uid := string(n.UID)
	k.cache.Add(ns, uid, k.ttl)
	return uid, nil
}

// NoNamespaces is the source without Kubernetes (-no-kube): there are no
// namespace UIDs, every key derives from the namespace's name alone.
type NoNamespaces struct{}

// UID implements Namespaces: always "".
func (NoNamespaces) UID(context.Context, string, bool) (string, error) { return "", nil }
