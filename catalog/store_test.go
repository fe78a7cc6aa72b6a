package catalog_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
)

// TestFollow: a Store follows the catalog ConfigMap through the informer it
// is handed (the webhook's and the extender's caches'; any informer does),
// ignores other ConfigMaps — also one of the catalog's name in another
// namespace (a tenant's), however widely the informer watches — keeps the
// last good catalog over a bad edit, and empties when the ConfigMap goes.
func TestFollow(t *testing.T) {
	ctx := t.Context()
	const ns = "rp"
	cms := func(name, doc string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string]string{"g1.1": doc}}
	}
	tenants := cms(api.CatalogConfigMap, "gpu: 8\ncpu: \"8\"\nmemory: 32Gi\n")
	tenants.Namespace = "team-a"
	client := fake.NewClientset(cms("unrelated", "not: a spec"), cms(api.CatalogConfigMap, "gpu: 1\ncpu: \"8\"\nmemory: 32Gi\n"), tenants)
	inf := informers.NewSharedInformerFactory(client, 0).Core().V1().ConfigMaps().Informer()
	store, err := catalog.Follow(inf, ns)
	require.NoError(t, err)
	require.False(t, store.HasSynced())
	go inf.Run(ctx.Done())
	require.Eventually(t, store.HasSynced, 10*time.Second, 10*time.Millisecond)
	gpus := func() int64 {
		s, err := store.Catalog().Lookup(api.LabelGPUSpec, "g1.1")
		if err != nil {
			return 0
		}
		return s.GPU
	}
	require.Equal(t, int64(1), gpus())
	require.NoError(t, store.LastError(), "the unrelated ConfigMap is not parsed")

	cmAPI := client.CoreV1().ConfigMaps(ns)
	_, err = cmAPI.Update(ctx, cms(api.CatalogConfigMap, "gpu: 2\ncpu: \"8\"\nmemory: 32Gi\n"), metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return gpus() == 2 }, 10*time.Second, 10*time.Millisecond)

	_, err = cmAPI.Update(ctx, cms(api.CatalogConfigMap, "gpus: 4\n"), metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return store.LastError() != nil }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, int64(2), gpus(), "a bad edit keeps the last good catalog")

	require.NoError(t, client.CoreV1().ConfigMaps("team-a").Delete(ctx, api.CatalogConfigMap, metav1.DeleteOptions{}))
	require.NoError(t, cmAPI.Delete(ctx, api.CatalogConfigMap, metav1.DeleteOptions{}))
	require.Eventually(t, func() bool { return gpus() == 0 && store.LastError() == nil }, 10*time.Second, 10*time.Millisecond)
}
