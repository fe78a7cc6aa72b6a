package kubetest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/activator"
	"github.com/runplane/runplane/queue/queuetest"
	"github.com/runplane/runplane/queue/shard"
	"github.com/runplane/runplane/sidecar/sidecartest"
	"github.com/runplane/runplane/test/cluster"
	"github.com/runplane/runplane/test/natsauth"
	"github.com/runplane/runplane/test/scrape"
)

var env *cluster.Cluster

func TestMain(m *testing.M) {
	cluster.Main(m, cluster.Options{Nodes: []cluster.Node{{Name: "node-0"}}}, func(c *cluster.Cluster) { env = c })
}

type fixture struct {
	t    *testing.T
	ns   string
	pool string
	base string
	// metricsURL is the queue's /metrics; scrapers read it.
	metricsURL string
	scrapers   scrape.Scrapers
	kubelet    *sidecartest.Kubelet
	mu         sync.Mutex
	// handler serves every worker's invocations, swappable by tests
	// (setHandler).
	handler framework.HandlerFunc
}

// setHandler makes h the handler of every invocation from now on, on
// workers already running too (the kubelet may start them first).
func (f *fixture) setHandler(h framework.HandlerFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handler = h
}

// handle runs the current handler.
func (f *fixture) handle(ctx context.Context, req framework.Request) (framework.Response, error) {
	f.mu.Lock()
	h := f.handler
	f.mu.Unlock()
	return h(ctx, req)
}

// setup starts NATS, the queue service with Kubernetes and leader election,
// a Deployment for the pool with the given policy annotations, and a
// "kubelet" that runs a real sidecar for every Running Pod of the pool.
func setup(t *testing.T, ann map[string]string, replicas int32) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	name := strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	require.NoError(t, env.CreateNamespace(ctx, name))
	f := &fixture{t: t, ns: name, pool: "p-" + name, handler: sidecartest.Echo}

	ns := natsauth.JetStream(t, nil)

	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "workers", Namespace: name, Labels: map[string]string{api.LabelPool: f.pool}, Annotations: ann},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{api.LabelPool: f.pool}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{api.LabelPool: f.pool}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "framework", Image: "framework"}},
					TerminationGracePeriodSeconds: ptr.To(int64(0))},
			},
		},
	}
	_, err := env.Client().AppsV1().Deployments(name).Create(ctx, d, metav1.CreateOptions{})
	require.NoError(t, err)
	f.kubelet = &sidecartest.Kubelet{Client: env.Client(), Namespace: name, Selector: api.LabelPool + "=" + f.pool,
		Config: func(*corev1.Pod) (sidecartest.Config, error) {
			return sidecartest.Config{NATSURL: ns.ClientURL(), Namespace: name, Pool: f.pool, Heartbeat: 200 * time.Millisecond, Handler: f.handle}, nil
		},
		OnError: func(err error) { t.Log(err) }}
	kctx, kstop := context.WithCancel(context.Background())
	kdone := make(chan struct{})
	go func() { defer close(kdone); f.kubelet.Run(kctx) }()
	t.Cleanup(func() { kstop(); <-kdone })

	f.scrapers, err = scrape.New(ctx, env)
	require.NoError(t, err)
	// The binary's registry, controller-runtime's, with the manager's
	// series (one queue at a time in this package).
	q := queuetest.Run(t, queue.Config{NATS: queue.NATS{URL: ns.ClientURL()}, InsecureDisableCallerAuth: true, MetricsListen: "127.0.0.1:0", Registry: ctrlmetrics.Registry,
		RESTConfig: env.RESTConfig(), Namespace: name, LeaderElection: shard.LeaderElection{LeaderElect: ptr.To(true)}, LeaseNamespace: name, Identity: "test",
		Decisions: activator.Decisions{Workers: activator.Workers{HeartbeatTimeout: metav1.Duration{Duration: 2 * time.Second}}, Backoff: 100 * time.Millisecond}, Tick: 100 * time.Millisecond})
	f.base, f.metricsURL = q.Base, q.MetricsURL
	// Ready once the pool's Deployment is known.
	f.eventually("pool known", 30*time.Second, func() bool { return f.get("/v1/namespaces/"+f.ns+"/pools/"+f.pool) == 200 })
	return f
}

func (f *fixture) get(path string) int {
	r, err := http.Get(f.base + path)
	if err != nil {
		return 0
	}
	r.Body.Close()
	return r.StatusCode
}

func (f *fixture) invoke(id string) {
	f.t.Helper()
	b, _ := json.Marshal(map[string]any{"mode": "async", "invocationID": id, "ttlSeconds": 120})
	r, err := http.Post(f.base+"/v1/namespaces/"+f.ns+"/pools/"+f.pool+"/invocations", "application/json", bytes.NewReader(b))
	require.NoError(f.t, err)
	r.Body.Close()
	require.EqualValues(f.t, 202, r.StatusCode, "invoke %s", id)
}

func (f *fixture) state(id string) messages.Record {
	var rec messages.Record
	r, err := http.Get(f.base + "/v1/namespaces/" + f.ns + "/invocations/" + id)
	if err != nil {
		return rec
	}
	defer r.Body.Close()
	_ = json.NewDecoder(r.Body).Decode(&rec)
	return rec
}

func (f *fixture) replicas() int32 {
	d, err := env.Client().AppsV1().Deployments(f.ns).Get(f.t.Context(), "workers", metav1.GetOptions{})
	if err != nil {
		return -1
	}
	return *d.Spec.Replicas
}

func (f *fixture) eventually(what string, within time.Duration, cond func() bool) {
	f.t.Helper()
	require.Eventually(f.t, cond, within, 100*time.Millisecond, "waiting for %s (replicas %d)", what, f.replicas())
}

// status is the pool status the activator last published.
func (f *fixture) status() messages.PoolStatus {
	var info struct {
		Status messages.PoolStatus `json:"status"`
	}
	if r, err := http.Get(f.base + "/v1/namespaces/" + f.ns + "/pools/" + f.pool); err == nil {
		defer r.Body.Close()
		_ = json.NewDecoder(r.Body).Decode(&info)
	}
	return info.Status
}

// decidedSince is the barrier before asserting that the activator did not
// scale: it waits for a pool status published after since, which the
// activator writes after a scaling decision on the same tick (and at least
// every 5s).
func (f *fixture) decidedSince(since time.Time) {
	f.t.Helper()
	f.eventually("a pool status after "+since.Format(time.RFC3339Nano), 15*time.Second, func() bool { return f.status().UpdatedAt.After(since) })
}

// watchReplicas records the smallest and largest replicas the pool's
// Deployment has from now on.
func (f *fixture) watchReplicas() (lo, hi func() int32) {
	w, err := env.Client().AppsV1().Deployments(f.ns).Watch(f.t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=workers"})
	require.NoError(f.t, err)
	f.t.Cleanup(w.Stop)
	var mu sync.Mutex
	lowest, highest := f.replicas(), f.replicas()
	go func() {
		for ev := range w.ResultChan() {
			if d, ok := ev.Object.(*appsv1.Deployment); ok && d.Spec.Replicas != nil {
				mu.Lock()
				lowest, highest = min(lowest, *d.Spec.Replicas), max(highest, *d.Spec.Replicas)
				mu.Unlock()
			}
		}
	}()
	return func() int32 { mu.Lock(); defer mu.Unlock(); return lowest }, func() int32 { mu.Lock(); defer mu.Unlock(); return highest }
}

// TestScaleFromZeroAndBackToZero: the first invocation scales an empty pool
// up, runs, and the idle worker is removed after idle-timeout.
func TestScaleFromZeroAndBackToZero(t *testing.T) {
	f := setup(t, map[string]string{api.AnnotationIdleTimeout: "2s"}, 0)
	f.decidedSince(time.Now())
	require.Zero(t, f.replicas(), "scaled without demand")
	// The manager's leader-election metrics are served with the queue's.
	code, body, err := scrape.Get(f.metricsURL, f.scrapers.Reader)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `leader_election_master_status{name="runplane-queue-activator"} 1`)
	f.invoke("first")
	f.eventually("scale from zero", 20*time.Second, func() bool { return f.replicas() == 1 })
	f.eventually("first succeeded", 30*time.Second, func() bool { return f.state("first").State == messages.StateSucceeded })
	f.eventually("idle scale-down to 0", 30*time.Second, func() bool { return f.replicas() == 0 })
}

// TestScaleUpUnderBacklogAndPrewarmFloor: min-available workers exist
// without demand; a backlog scales up to max-replicas; idle scale-down
// stops at the floor.
func TestScaleUpUnderBacklogAndPrewarmFloor(t *testing.T) {
	f := setup(t, map[string]string{api.AnnotationMinAvailable: "2", api.AnnotationMaxReplicas: "4", api.AnnotationIdleTimeout: "2s"}, 0)
	f.setHandler(sidecartest.Sleep(1500 * time.Millisecond))
	f.eventually("prewarm floor", 20*time.Second, func() bool { return f.replicas() == 2 })
	lo, hi := f.watchReplicas()
	for i := range 10 {
		f.invoke(fmt.Sprintf("b%d", i))
	}
	f.eventually("scale-up to max-replicas", 20*time.Second, func() bool { return f.replicas() == 4 })
	for i := range 10 {
		id := fmt.Sprintf("b%d", i)
		f.eventually(id+" succeeded", 60*time.Second, func() bool { return f.state(id).State == messages.StateSucceeded })
	}
	f.eventually("scale-down to the floor", 30*time.Second, func() bool { return f.replicas() == 2 })
	// Past idle-timeout (2s) the floor's workers are idle enough to go:
	// wait for a decision on them.
	f.decidedSince(time.Now().Add(2 * time.Second))
	require.EqualValues(t, 4, hi(), "max-replicas")
	require.EqualValues(t, 2, lo(), "min-available")
	require.EqualValues(t, 2, f.replicas())
}

// TestIdleScaleDownKeepsBusyPod: with one busy and two idle workers, the
// idle ones get the low pod-deletion-cost and go; the busy one survives and
// finishes.
func TestIdleScaleDownKeepsBusyPod(t *testing.T) {
	f := setup(t, map[string]string{api.AnnotationIdleTimeout: "2s"}, 3)
	release := make(chan struct{})
	f.setHandler(func(ctx context.Context, d framework.Request) (framework.Response, error) {
		<-release
		return sidecartest.Echo(ctx, d)
	})
	f.eventually("3 workers", 20*time.Second, func() bool { return f.kubelet.Count() == 3 })
	f.invoke("busy")
	var busyPod string
	f.eventually("busy running", 20*time.Second, func() bool {
		r := f.state("busy")
		busyPod = r.Worker
		return r.State == messages.StateRunning
	})
	f.eventually("scale-down to 1", 30*time.Second, func() bool { return f.replicas() == 1 })
	pods, err := env.Client().CoreV1().Pods(f.ns).List(f.t.Context(), metav1.ListOptions{})
	require.NoError(t, err)

	for _, p := range pods.Items {
		if p.Name == busyPod {
			require.Empty(t, p.Annotations[activator.PodDeletionCost], "busy pod %s marked for deletion", p.Name)
		}
	}
	f.eventually("idle pods removed", 30*time.Second, func() bool {
		pods, _ := env.Client().CoreV1().Pods(f.ns).List(f.t.Context(), metav1.ListOptions{})
		return len(pods.Items) == 1 && pods.Items[0].Name == busyPod
	})
	close(release)
	f.eventually("busy succeeded", 20*time.Second, func() bool { return f.state("busy").State == messages.StateSucceeded })

}

// TestPodLossRedelivers: deleting the Pod running an invocation redelivers
// it to the replacement worker.
func TestPodLossRedelivers(t *testing.T) {
	f := setup(t, map[string]string{api.AnnotationMinAvailable: "1"}, 1)
	block := make(chan struct{})
	var once sync.Once
	f.setHandler(func(ctx context.Context, d framework.Request) (framework.Response, error) {
		if d.Attempt == 1 {
			once.Do(func() { close(block) })
			<-ctx.Done() // stuck until its Pod is deleted (Kill cancels)
			return framework.Response{}, ctx.Err()
		}
		return sidecartest.Echo(ctx, d)
	})
	f.eventually("1 worker", 20*time.Second, func() bool { return f.kubelet.Count() == 1 })
	f.invoke("victim")
	<-block
	first := f.state("victim").Worker
	require.NoError(t, env.Client().CoreV1().Pods(f.ns).Delete(f.t.Context(), first, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}))
	f.eventually("redelivered and succeeded", 30*time.Second, func() bool {
		r := f.state("victim")
		return r.State == messages.StateSucceeded && r.Attempt == 2 && r.Worker != first
	})
}
