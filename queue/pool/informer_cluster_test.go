package pool_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/queue/pool"
	"github.com/runplane/runplane/test/cluster"
)

// TestInformerOnTheManagersCache: the pools are read from a cache as the
// queue's manager has it (pool.CacheOptions), started before any pool
// exists: a pool's Deployment created later is found and tells OnChange,
// two claims are a conflict, and the cache holds only Deployments labelled
// with a pool of the queue's namespace, without managed fields (the
// client-go informer factory it replaces watched exactly those).
func TestInformerOnTheManagersCache(t *testing.T) {
	const ns, other = "pools", "elsewhere"
	c := cluster.ForTest(t, ns)
	ctx := t.Context()
	require.NoError(t, c.CreateNamespace(ctx, other))
	cc, err := ctrlcache.New(c.RESTConfig(), pool.CacheOptions(ns))
	require.NoError(t, err)
	inf, err := pool.NewInformer(ctx, cc, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	var changes, stoppedChanges atomic.Int32
	stopped, err := inf.OnChange(func() { stoppedChanges.Add(1) })
	require.NoError(t, err)
	_, err = inf.OnChange(func() { changes.Add(1) })
	require.NoError(t, err)
	cctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cc.Start(cctx) }()
	t.Cleanup(func() { stop(); require.NoError(t, <-done) })
	require.True(t, cc.WaitForCacheSync(ctx))
	require.True(t, inf.Synced())
	_, found := inf.Lookup(ns, "p")
	require.False(t, found)
	require.NoError(t, stopped())

	create := func(namespace, name string, labels map[string]string) *appsv1.Deployment {
		t.Helper()
		d, err := c.Client().AppsV1().Deployments(namespace).Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels, Annotations: map[string]string{api.AnnotationMaxReplicas: "3"}},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "w", Image: "w"}}}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		return d
	}
	// Neither is the queue's: another namespace's pool, and a Deployment of
	// no pool.
	create(other, "workers", map[string]string{api.LabelPool: "p"})
	create(ns, "plain", nil)
	d := create(ns, "workers", map[string]string{api.LabelPool: "p"})
	require.Eventually(t, func() bool { _, ok := inf.Lookup(ns, "p"); return ok }, 10*time.Second, 10*time.Millisecond)
	p, _ := inf.Lookup(ns, "p")
	assert.Equal(t, pool.Pool{Name: "p", Namespace: ns, Deployment: "workers", DeploymentUID: d.UID, Policy: func() pool.Policy {
		pol := pool.DefaultPolicy()
		pol.MaxReplicas = 3
		return pol
	}()}, p)
	assert.Positive(t, changes.Load(), "OnChange was not told")

	create(ns, "workers-2", map[string]string{api.LabelPool: "p"})
	require.Eventually(t, func() bool { p, _ := inf.Lookup(ns, "p"); return len(p.Conflict) == 2 }, 10*time.Second, 10*time.Millisecond)
	p, _ = inf.Lookup(ns, "p")
	assert.Equal(t, []string{"workers", "workers-2"}, p.Conflict)
	assert.Empty(t, p.Deployment)
	assert.Len(t, inf.List(), 1)
	_, found = inf.Lookup(other, "p")
	assert.False(t, found, "another namespace's pool")

	// What the cache holds: the queue's namespace's pool Deployments only,
	// stripped.
	var all appsv1.DeploymentList
	require.NoError(t, cc.List(ctx, &all))
	var names []string
	for _, d := range all.Items {
		names = append(names, d.Namespace+"/"+d.Name)
		assert.Empty(t, d.ManagedFields, d.Name)
	}
	assert.ElementsMatch(t, []string{ns + "/workers", ns + "/workers-2"}, names)
	assert.Zero(t, stoppedChanges.Load(), "a stopped OnChange was told")
	require.Error(t, cc.List(ctx, &all, client.InNamespace(other)), "the cache reads another namespace")
}
