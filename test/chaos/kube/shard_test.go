package kube_test

import (
	"context"
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
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue/config"
	"github.com/runplane/runplane/queue/shard"
	"github.com/runplane/runplane/test/chaos"
	"github.com/runplane/runplane/test/chaos/execlog"
	"github.com/runplane/runplane/test/localworkers"
	"github.com/runplane/runplane/test/scrape"
)

// shardHolder is the replica whose /metrics says it holds shard i's Lease.
func shardHolder(qs []*chaos.Queue, token string, i int) (int, bool) {
	want := fmt.Sprintf(`runplane_activator_shard_running{shard="%d"} 1`, i)
	for k, q := range qs {
		if !q.Running() {
			continue
		}
		code, body, err := scrape.Get(q.MetricsURL, token)
		if err != nil || code != http.StatusOK {
			continue
		}
		for line := range strings.Lines(body) {
			if strings.HasPrefix(line, want) {
				return k, true
			}
		}
	}
	return 0, false
}

// leaderLines are the replicas' leader-election gauges (for a failure's
// message).
func leaderLines(qs []*chaos.Queue, token string) string {
	var out []string
	for k, q := range qs {
		code, body, err := scrape.Get(q.MetricsURL, token)
		if err != nil || code != http.StatusOK {
			out = append(out, fmt.Sprintf("queue-%d: %d %v", k, code, err))
			continue
		}
		for line := range strings.Lines(body) {
			if strings.HasPrefix(line, "runplane_activator_shard_running") {
				out = append(out, fmt.Sprintf("queue-%d: %s", k, strings.TrimSpace(line)))
			}
		}
	}
	return strings.Join(out, "; ")
}

// TestShardSIGKILL: three queue replicas share the activator's three
// shards (one each), with a pool in each of three namespaces, one per
// shard, under load through every replica. The replica holding the first
// namespace's shard is SIGKILLed: another replica must hold that shard
// within 15 s; the killed one comes back 5 s after the move (its
// Deployment would restart it), and the shards rebalance under load (a
// drain-then-release hand-over). 0 lost, 0 run twice, across every
// namespace.
func TestShardSIGKILL(t *testing.T) {
	if !full() {
		t.Skip("a full chaos case: run with make chaos (RUNPLANE_CHAOS=full)")
	}
	const shards, workers, rate = 3, 2, 40.0
	dur := 45 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	leaseNS := "shard-sigkill"
	require.NoError(t, env.CreateNamespace(ctx, leaseNS))
	var nss []string
	for k := 0; len(nss) < shards; k++ {
		ns := "shard-" + strconv.Itoa(k)
		if shard.Of(ns, shards) == len(nss) {
			nss = append(nss, ns)
		}
	}
	dir := chaos.CaseDir(t, leaseNS)
	execLog := filepath.Join(dir, "exec.log")
	n, err := chaos.StartNATS(bins, dir, chaos.NATSOptions{})
	require.NoError(t, err)
	t.Cleanup(n.Kill)
	scrapers, err := scrape.New(ctx, env)
	require.NoError(t, err)
	for _, ns := range nss {
		require.NoError(t, env.CreateNamespace(ctx, ns))
		labels := map[string]string{api.LabelPool: "p"}
		w := strconv.Itoa(workers)
		_, err = env.Client().AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns, Labels: labels,
				Annotations: map[string]string{api.AnnotationMinAvailable: w, api.AnnotationMaxReplicas: w}},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](workers), Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{api.AnnotationConcurrency: "4"}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "framework", Image: "framework-recorder:chaos"}}},
				}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	var qs []*chaos.Queue
	for i := range shards {
		// Every namespace's pools (-namespace=), the Leases in leaseNS.
		q, err := chaos.StartQueue(bins, dir, "queue-"+strconv.Itoa(i), n.URL, chaos.QueueOptions{Kubeconfig: env.Kubeconfig(), Namespace: leaseNS,
			Configure: []func(*config.QueueConfiguration){func(c *config.QueueConfiguration) {
				c.WatchNamespace, c.LeaderElection.Shards = "", shards // every namespace's pools
			}}})
		require.NoError(t, err)
		t.Cleanup(q.Kill)
		qs = append(qs, q)
	}
	t.Setenv("CHAOS_EXEC_LOG", execLog)
	t.Setenv("CHAOS_SLEEP", "20ms")
	lw, err := localworkers.Start(ctx, localworkers.Config{
		Client: env.Client(), NATSURL: n.URL, SidecarBinary: bins.Sidecar, FrameworkBinary: bins.Framework,
		SidecarArgs: []string{"-create-consumer"}, PlainJetStream: true, Dir: filepath.Join(dir, "workers"), StopGrace: 30 * time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() { cancel(); lw.Wait() })
	for _, ns := range nss {
		require.Eventually(t, func() bool {
			p, err := chaos.PoolStatus(ctx, qs[0].URL, ns, "p")
			return err == nil && p.ReadyWorkers >= workers
		}, 90*time.Second, 200*time.Millisecond, "%d ready workers in %s (logs in %s)", workers, ns, dir)
	}
	// One shard each before the load.
	oneEach := func() bool {
		seen := map[int]bool{}
		for i := range shards {
			k, ok := shardHolder(qs, scrapers.Reader, i)
			if !ok {
				return false
			}
			seen[k] = true
		}
		return len(seen) == shards
	}
	if !assert.Eventually(t, oneEach, 60*time.Second, 200*time.Millisecond, "each replica holds one shard") {
		t.Fatalf("leader-election gauges: %s", leaderLines(qs, scrapers.Reader))
	}
	victim, _ := shardHolder(qs, scrapers.Reader, 0)

	var moved time.Duration
	var newHolder int
	var faultErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		faultErr = func() error {
			time.Sleep(10 * time.Second)
			qs[victim].Kill()
			killed := time.Now()
			for time.Since(killed) < 60*time.Second {
				if k, ok := shardHolder(qs, scrapers.Reader, 0); ok && k != victim {
					moved, newHolder = time.Since(killed), k
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if moved == 0 {
				return fmt.Errorf("shard 0 not taken within 60s of its holder's SIGKILL")
			}
			time.Sleep(5 * time.Second)
			return qs[victim].Restart()
		}()
	})
	var urls []string
	for _, q := range qs {
		urls = append(urls, q.URL)
	}
	results := make([]chaos.LoadResult, len(nss))
	for i, ns := range nss {
		wg.Go(func() {
			results[i] = chaos.Load{URLs: urls, Namespace: ns, Pool: "p", Rate: rate, Duration: dur, IDPrefix: ns + "-inv-"}.Run(context.Background())
		})
	}
	wg.Wait()
	require.NoError(t, faultErr)
	t.Logf("shard 0: held by queue-%d, SIGKILLed; queue-%d held it %s later", victim, newHolder, moved.Round(100*time.Millisecond))
	assert.LessOrEqual(t, moved, 15*time.Second, "a SIGKILLed replica's shard moves within 15 s")

	runs, err := execlog.Read(execLog)
	require.NoError(t, err)
	var ids []string
	recs := map[string]messages.Record{}
	res := chaos.LoadResult{Refused: map[int]int{}}
	for i, ns := range nss {
		t.Logf("load %s: %s", ns, results[i])
		for id, r := range chaos.Settle(ctx, urls[(victim+1)%len(urls)], ns, results[i].Accepted, 45*time.Second, 4*time.Minute) {
			recs[id] = r
		}
		ids = append(ids, results[i].Accepted...)
		res.Accepted = append(res.Accepted, results[i].Accepted...)
		res.Dropped += results[i].Dropped
		for code, c := range results[i].Refused {
			res.Refused[code] += c
		}
	}
	c := chaos.Count(ids, recs, runs)
	t.Logf("%s", c)
	name := fmt.Sprintf("3 replicas, 3 shards, a shard holder SIGKILL (moved in %s)", moved.Round(100*time.Millisecond))
	if err := chaos.AppendRow(os.Getenv("RUNPLANE_CHAOS_ROWS"), chaos.NewRow(name, rate*float64(len(nss)), dur.String(), c, 0, chaos.Note(res, c))); err != nil {
		t.Errorf("row: %v", err)
	}
	assert.Positive(t, c.Accepted)
	assert.Zero(t, c.Lost, "accepted invocations never ended: %s", c)
	assert.Zero(t, c.RunTwice, "invocations the framework completed more than once: %s", c)
}
