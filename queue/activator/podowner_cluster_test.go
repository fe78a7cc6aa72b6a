package activator

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/queue/activator/internal/state"
	"github.com/runplane/runplane/queue/pool"
	"github.com/runplane/runplane/test/cluster"
)

// TestWorkerAdmittedWhenItsReplicaSetArrivesDuringItsRefusal (issue 33):
// the activator's Pod and ReplicaSet informers sync in any order. A worker
// Pod listed before its ReplicaSet is refused ("its ReplicaSet is not
// known (yet)"); the ReplicaSet's arrival decides again and admits it. The
// two decisions ran on the two informers' goroutines, each applied after
// it was made: a refusal made before the ReplicaSet arrived could land
// after the admission, and the worker (a stable Pod, a stable ReplicaSet)
// stayed refused for ever, its namespace's invocations queued
// (TestShardCountChange's 504s). The refusal is held here between its
// decision and its application (the log line in between) while the
// ReplicaSet arrives.
func TestWorkerAdmittedWhenItsReplicaSetArrivesDuringItsRefusal(t *testing.T) {
	const ns = "pod-owner"
	c := cluster.ForTest(t, ns)
	ctx := t.Context()
	kube := c.Client()
	labels := map[string]string{api.LabelPool: "p", "app": "w"}
	// The selector leaves the pool label out: the ReplicaSet stays the
	// Deployment's while the test takes that label off it.
	dep, err := kube.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "workers", Labels: labels},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "w"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "w", Image: "w"}}}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	// The controllers make its ReplicaSet and Pod; no node runs it, so the
	// Pod stays as the scheduler leaves it (no event of its own later).
	var rs appsv1.ReplicaSet
	var pod corev1.Pod
	require.Eventually(t, func() bool {
		rl, err1 := kube.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		pl, err2 := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err1 != nil || err2 != nil || len(rl.Items) != 1 || len(pl.Items) != 1 || len(pl.Items[0].Status.Conditions) == 0 {
			return false
		}
		rs, pod = rl.Items[0], pl.Items[0]
		return true
	}, 30*time.Second, 50*time.Millisecond, "the Deployment's ReplicaSet and scheduled-or-not Pod")
	// The activator lists the ReplicaSets labelled with a pool: without the
	// label, this one has not arrived yet.
	setPoolLabel := func(v *string) {
		t.Helper()
		patch := []byte(`{"metadata":{"labels":{"` + api.LabelPool + `":null}}}`)
		if v != nil {
			patch = []byte(`{"metadata":{"labels":{"` + api.LabelPool + `":"` + *v + `"}}}`)
		}
		_, err := kube.AppsV1().ReplicaSets(ns).Patch(ctx, rs.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		require.NoError(t, err)
	}
	setPoolLabel(nil)

	gate := &refusalGate{pod: pod.Name, held: make(chan struct{}), release: make(chan struct{}), marker: make(chan struct{})}
	pools := onePool{Pool: pool.Pool{Namespace: ns, Name: "p", Deployment: dep.Name, DeploymentUID: dep.UID}}
	a := &Activator{cfg: Config{Kube: kube, Cache: startCache(t, c, ns), Pools: pools, Clock: clock.RealClock{}, Logger: slog.New(gate)},
		metrics: newMetrics(prometheus.NewRegistry()), refused: map[string]string{}, kick: make(chan struct{}, 1),
		st: state.New(state.Config{RequirePods: true, Workers: state.Workers{HeartbeatTimeout: metav1.Duration{Duration: time.Minute}}}, clock.RealClock{})}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); a.watchPods(wctx) }()
	t.Cleanup(func() { stop(); <-done })
	admitted := func() bool {
		var ok bool
		a.locked(func(s *state.State) { ok = s.Pool(state.Key(ns, "p")).Workers[pod.Name] != nil })
		return ok
	}

	select {
	case <-gate.held: // refused, not yet applied
	case <-time.After(30 * time.Second):
		require.FailNow(t, "the Pod was not refused for its unknown ReplicaSet")
	}
	setPoolLabel(ptr.To("p"))
	// The ReplicaSet's own decision admits the Pod within milliseconds when
	// nothing orders it after the refusal; with the order, it waits for it.
	admittedEarly := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 3*time.Second, true,
		func(context.Context) (bool, error) { return admitted(), nil }) == nil
	close(gate.release)
	// Barrier: the Pod informer delivers in order, so once it has decided
	// on a later Pod, the held refusal has been applied.
	_, err = kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "marker", Labels: map[string]string{api.LabelPool: "p"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "w", Image: "w"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	select {
	case <-gate.marker:
	case <-time.After(30 * time.Second):
		require.FailNow(t, "the marker Pod was not refused")
	}
	require.Eventually(t, admitted, 10*time.Second, 10*time.Millisecond,
		"the worker stays refused after its ReplicaSet arrived (admitted before the refusal was applied: %v)", admittedEarly)
}

// startCache runs a cache of namespace ns of c as the queue's manager has
// it (pool.CacheOptions) until the test ends.
func startCache(t *testing.T, c *cluster.Cluster, ns string) ctrlcache.Cache {
	t.Helper()
	cc, err := ctrlcache.New(c.RESTConfig(), pool.CacheOptions(ns))
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cc.Start(ctx) }()
	t.Cleanup(func() { stop(); require.NoError(t, <-done) })
	return cc
}

// onePool is a pool.Source of one pool: a Deployment informer would
// recheck the Pods on every Deployment status write, which could hide a
// refusal that lands last.
type onePool struct{ pool.Pool }

func (o onePool) Lookup(ns, name string) (pool.Pool, bool) {
	return o.Pool, ns == o.Namespace && name == o.Name
}
func (o onePool) List() []pool.Pool { return []pool.Pool{o.Pool} }
func (onePool) Synced() bool        { return true }

// refusalGate is a slog.Handler that holds the first refusal of Pod pod
// until release (held says it is held), and closes marker at the refusal
// of the Pod named "marker".
type refusalGate struct {
	pod                   string
	held, release, marker chan struct{}
	heldOnce, markerOnce  sync.Once
}

func (g *refusalGate) Enabled(context.Context, slog.Level) bool { return true }
func (g *refusalGate) WithAttrs([]slog.Attr) slog.Handler       { return g }
func (g *refusalGate) WithGroup(string) slog.Handler            { return g }

func (g *refusalGate) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "pod is not a worker of the pool it is labelled with" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != "pod" {
			return true
		}
		switch a.Value.String() {
		case g.pod:
			g.heldOnce.Do(func() {
				close(g.held)
				<-g.release
			})
		case "marker":
			g.markerOnce.Do(func() { close(g.marker) })
		}
		return false
	})
	return nil
}
