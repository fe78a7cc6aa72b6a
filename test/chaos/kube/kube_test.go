package kube_test

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/test/chaos"
	"github.com/runplane/runplane/test/chaos/execlog"
	"github.com/runplane/runplane/test/cluster"
	"github.com/runplane/runplane/test/localworkers"
	"github.com/runplane/runplane/test/scrape"
)

var (
	env  *cluster.Cluster
	bins chaos.Binaries
)

func full() bool { return os.Getenv("RUNPLANE_CHAOS") == "full" || benching }

// benching: benchmarks were asked for (make bench runs
// BenchmarkShardedQueue without RUNPLANE_CHAOS).
var benching bool

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
		benching = true
	}
	if !full() {
		// No cluster for cases that all skip (make test).
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "chaos-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The built binaries (~200 MiB) go with the run.
	os.Exit(func() int {
		defer func() {
			if err := os.RemoveAll(dir); err != nil {
				fmt.Fprintln(os.Stderr, "chaos: removing the binaries:", err)
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		bins, err = chaos.Build(ctx, dir)
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			return 1
		}
		return cluster.Run(m, cluster.Options{Nodes: []cluster.Node{{Name: "node-0", Pods: 100}}}, func(c *cluster.Cluster) { env = c })
	}())
}

// stack is one case's queue replicas, pool and workers.
type stack struct {
	ns, pool string
	queues   []*chaos.Queue
	execLog  string
	workers  *localworkers.Runner
	// scrapers read the replicas' /metrics.
	scrapers scrape.Scrapers
}

// setup creates namespace ns with pool Deployment "p" (replicas workers of
// concurrency 4), starts replicas queue processes contending for the
// activator Lease, and local workers for the pool's Pods.
func setup(t *testing.T, ns string, replicas, workers int32, frameworkEnv map[string]string) *stack {
	t.Helper()
	if !full() {
		t.Skip("a full chaos case: run with make chaos (RUNPLANE_CHAOS=full)")
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, env.CreateNamespace(ctx, ns))
	dir := chaos.CaseDir(t, ns)
	s := &stack{ns: ns, pool: "p", execLog: filepath.Join(dir, "exec.log")}
	n, err := chaos.StartNATS(bins, dir, chaos.NATSOptions{})
	require.NoError(t, err)
	s.scrapers, err = scrape.New(ctx, env)
	require.NoError(t, err)
	t.Cleanup(n.Kill)

	labels := map[string]string{api.LabelPool: s.pool}
	w := strconv.Itoa(int(workers))
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: s.pool, Namespace: ns, Labels: labels,
			Annotations: map[string]string{api.AnnotationMinAvailable: w, api.AnnotationMaxReplicas: w}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(workers),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{api.AnnotationConcurrency: "4"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "framework", Image: "framework-recorder:chaos"}}},
			},
		},
	}
	_, err = env.Client().AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
	require.NoError(t, err)

	for i := range replicas {
		q, err := chaos.StartQueue(bins, dir, "queue-"+strconv.Itoa(int(i)), n.URL, chaos.QueueOptions{Kubeconfig: env.Kubeconfig(), Namespace: ns})
		require.NoError(t, err)
		t.Cleanup(q.Kill)
		s.queues = append(s.queues, q)
	}
	// framework-recorder inherits the runner's env (localworkers drops
	// only RUNPLANE_* and the like): its settings go there.
	t.Setenv("CHAOS_EXEC_LOG", s.execLog)
	for k, v := range frameworkEnv {
		t.Setenv(k, v)
	}
	s.workers, err = localworkers.Start(ctx, localworkers.Config{
		Client: env.Client(), NATSURL: n.URL, SidecarBinary: bins.Sidecar, FrameworkBinary: bins.Framework,
		SidecarArgs: []string{"-create-consumer"}, PlainJetStream: true, Namespace: ns, Dir: filepath.Join(dir, "workers"), StopGrace: 30 * time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() { cancel(); s.workers.Wait() })
	require.Eventually(t, func() bool {
		p, err := chaos.PoolStatus(ctx, s.queues[0].URL, ns, s.pool)
		return err == nil && p.ReadyWorkers >= int(workers)
	}, 90*time.Second, 200*time.Millisecond, "%d ready workers (logs in %s)", workers, dir)
	return s
}

// leader is the replica whose /metrics says it holds the activator Lease.
func (s *stack) leader() (int, bool) {
	for i, q := range s.queues {
		if !q.Running() {
			continue
		}
		code, body, err := scrape.Get(q.MetricsURL, s.scrapers.Reader)
		if err != nil || code != http.StatusOK {
			continue
		}
		for line := range strings.Lines(body) {
			if strings.HasPrefix(line, `leader_election_master_status{name="runplane-queue-activator"} 1`) {
				return i, true
			}
		}
	}
	return 0, false
}

func (s *stack) urls() []string {
	var out []string
	for _, q := range s.queues {
		out = append(out, q.URL)
	}
	return out
}

// run drives the load across every replica with fault alongside, then
// counts.
func (s *stack) run(t *testing.T, name string, rate float64, dur time.Duration, fault func(ctx context.Context) error) chaos.Counts {
	t.Helper()
	ctx := context.Background()
	var faultErr error
	var wg sync.WaitGroup
	wg.Go(func() { faultErr = fault(ctx) })
	var peak int64
	stop := make(chan struct{})
	wg.Go(func() {
		tk := time.NewTicker(250 * time.Millisecond)
		defer tk.Stop()
		for {
			for _, q := range s.queues {
				if v, err := q.RSS(); err == nil {
					peak = max(peak, v)
				}
			}
			select {
			case <-stop:
				return
			case <-tk.C:
			}
		}
	})
	res := chaos.Load{URLs: s.urls(), Namespace: s.ns, Pool: s.pool, Rate: rate, Duration: dur, IDPrefix: "inv-"}.Run(ctx)
	close(stop)
	wg.Wait()
	require.NoError(t, faultErr)
	t.Logf("%s: load: %s", name, res)
	recs := chaos.Settle(ctx, s.queues[0].URL, s.ns, res.Accepted, 45*time.Second, 4*time.Minute)
	runs, err := execlog.Read(s.execLog)
	require.NoError(t, err)
	c := chaos.Count(res.Accepted, recs, runs)
	t.Logf("%s: %s", name, c)
	if err := chaos.AppendRow(os.Getenv("RUNPLANE_CHAOS_ROWS"), chaos.NewRow(name, rate, dur.String(), c, peak, chaos.Note(res, c))); err != nil {
		t.Errorf("row: %v", err)
	}
	assert.Positive(t, c.Accepted)
	assert.Zero(t, c.Lost, "accepted invocations never ended: %s", c)
	assert.Zero(t, c.RunTwice, "invocations the framework completed more than once: %s", c)
	return c
}

// TestLeaderSIGKILL is issue 16 item 6 (and the "SIGKILL of the queue
// leader" case): two queue replicas serve ingress behind one URL list; the
// one holding the activator Lease is SIGKILLed mid-load and comes back 2 s
// later (its Deployment would restart it); the other takes the Lease once
// it expires.
func TestLeaderSIGKILL(t *testing.T) {
	s := setup(t, "leader", 2, 4, map[string]string{"CHAOS_SLEEP": "20ms"})
	var first int
	require.Eventually(t, func() (ok bool) { first, ok = s.leader(); return ok }, 60*time.Second, 200*time.Millisecond, "a leader")
	var second int
	s.run(t, "2 ingresses, leader SIGKILL", 100, 45*time.Second, func(ctx context.Context) error {
		time.Sleep(10 * time.Second)
		s.queues[first].Kill()
		time.Sleep(2 * time.Second)
		if err := s.queues[first].Restart(); err != nil {
			return err
		}
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			if l, ok := s.leader(); ok {
				second = l
				return nil
			}
			time.Sleep(200 * time.Millisecond)
		}
		return fmt.Errorf("no leader within 60s of the kill")
	})
	t.Logf("leader before the kill: queue-%d, after: queue-%d", first, second)
}

// TestRolloutRestart: kubectl rollout restart of the pool under load; the
// Deployment controller replaces the Pods one by one and local workers
// SIGTERM the old sidecars (30 s grace).
func TestRolloutRestart(t *testing.T) {
	s := setup(t, "rollout", 1, 4, map[string]string{"CHAOS_SLEEP": "100ms"})
	c := s.run(t, "rollout restart (Kubernetes)", 100, 45*time.Second, func(ctx context.Context) error {
		time.Sleep(10 * time.Second)
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339))
		_, err := env.Client().AppsV1().Deployments(s.ns).Patch(ctx, s.pool, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	})
	assert.Zero(t, c.Failed, "invocations failed in a rollout: %s", c)
}
