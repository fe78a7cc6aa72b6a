package natstls_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/natstls"
)

// TestPublishAndFollowCA: the queue publishes the CA bundle (certificates
// only) to the ConfigMap the webhook follows; the webhook's store has no
// bundle until it exists, then follows every change.
func TestPublishAndFollowCA(t *testing.T) {
	ctx := t.Context()
	client := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "unrelated", Namespace: ns}, Data: map[string]string{api.NATSCAKey: "junk"}})
	// The webhook hands FollowCA its cache's informer; any informer does.
	inf := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns)).Core().V1().ConfigMaps().Informer()
	store, err := natstls.FollowCA(inf, ns)
	require.NoError(t, err)
	require.False(t, store.HasSynced())
	go inf.Run(ctx.Done())
	require.Eventually(t, store.HasSynced, 10*time.Second, 10*time.Millisecond)
	_, err = store.Bundle()
	require.ErrorContains(t, err, "not published yet")

	first := bundle(t, "nats.example")
	require.ErrorContains(t, natstls.PublishCA(ctx, client, ns, append(first.CABundle, first.CAKey...), nil), "not only certificates",
		"a key in what every tenant's Pod gets")
	require.NoError(t, natstls.PublishCA(ctx, client, ns, first.CABundle, map[string]string{"app.kubernetes.io/name": "runplane"}))
	require.Eventually(t, func() bool { b, err := store.Bundle(); return err == nil && string(b) == string(first.CABundle) }, 10*time.Second, 10*time.Millisecond)

	renewed := bundle(t, "nats.example")
	both := append(append([]byte{}, renewed.CABundle...), first.CABundle...)
	require.NoError(t, natstls.PublishCA(ctx, client, ns, both, nil))
	require.NoError(t, natstls.PublishCA(ctx, client, ns, both, nil), "publishing the same again")
	require.Eventually(t, func() bool { b, err := store.Bundle(); return err == nil && string(b) == string(both) }, 10*time.Second, 10*time.Millisecond)
	cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, api.NATSCAConfigMap, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "runplane", cm.Labels["app.kubernetes.io/name"], "labels kept on update")

	require.NoError(t, client.CoreV1().ConfigMaps(ns).Delete(ctx, api.NATSCAConfigMap, metav1.DeleteOptions{}))
	require.Eventually(t, func() bool { _, err := store.Bundle(); return err != nil }, 10*time.Second, 10*time.Millisecond)
}
