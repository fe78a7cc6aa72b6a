package kube_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/queue/config"
	"github.com/runplane/runplane/queue/shard"
	"github.com/runplane/runplane/test/chaos"
	"github.com/runplane/runplane/test/localworkers"
	"github.com/runplane/runplane/test/scrape"
)

// cpuOf is the CPU time process pid has used (user + system, from
// /proc/<pid>/stat; clock ticks of 10 ms).
func cpuOf(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The fields after the command name (which may hold spaces) in ")".
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// shardedStack is BenchmarkShardedQueue's: NATS, queue replicas sharing
// the activator's shards, a pool in one namespace per shard.
type shardedStack struct {
	nats *chaos.NATS
	qs   []*chaos.Queue
	nss  []string
	// undo stops it all, last started first: the next stack's workers
	// must not be started by this one's (they watch every namespace).
	undo []func()
}

func (s *shardedStack) stop() {
	for i := len(s.undo) - 1; i >= 0; i-- {
		s.undo[i]()
	}
}

const benchShards = 6

func startSharded(b *testing.B, replicas, shards int) *shardedStack {
	b.Helper()
	s := &shardedStack{}
	ctx, cancel := context.WithCancel(context.Background())
	s.undo = append(s.undo, cancel)
	tag := "bench-r" + strconv.Itoa(replicas) + "s" + strconv.Itoa(shards)
	leaseNS := tag + "-leases"
	require.NoError(b, env.CreateNamespace(ctx, leaseNS))
	for k := 0; len(s.nss) < benchShards; k++ {
		ns := tag + "-" + strconv.Itoa(k)
		if shard.Of(ns, benchShards) == len(s.nss) {
			s.nss = append(s.nss, ns)
		}
	}
	dir, err := os.MkdirTemp("", tag)
	require.NoError(b, err)
	s.undo = append(s.undo, func() { _ = os.RemoveAll(dir) })
	s.nats, err = chaos.StartNATS(bins, dir, chaos.NATSOptions{})
	require.NoError(b, err)
	s.undo = append(s.undo, s.nats.Kill)
	for _, ns := range s.nss {
		require.NoError(b, env.CreateNamespace(ctx, ns))
		labels := map[string]string{api.LabelPool: "p"}
		_, err = env.Client().AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns, Labels: labels,
				Annotations: map[string]string{api.AnnotationMinAvailable: "1", api.AnnotationMaxReplicas: "1"}},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{api.AnnotationConcurrency: "16"}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "framework", Image: "framework-recorder:bench"}}},
				}},
		}, metav1.CreateOptions{})
		require.NoError(b, err)
	}
	for i := range replicas {
		q, err := chaos.StartQueue(bins, dir, "queue-"+strconv.Itoa(i), s.nats.URL, chaos.QueueOptions{Kubeconfig: env.Kubeconfig(), Namespace: leaseNS,
			Configure: []func(*config.QueueConfiguration){func(c *config.QueueConfiguration) {
				c.WatchNamespace, c.LeaderElection.Shards = "", shards // every namespace's pools
			}}})
		require.NoError(b, err)
		s.undo = append(s.undo, q.Kill)
		s.qs = append(s.qs, q)
	}
	b.Setenv("CHAOS_EXEC_LOG", filepath.Join(dir, "exec.log"))
	b.Setenv("CHAOS_SLEEP", "0s")
	lw, err := localworkers.Start(ctx, localworkers.Config{
		Client: env.Client(), NATSURL: s.nats.URL, SidecarBinary: bins.Sidecar, FrameworkBinary: bins.Framework,
		SidecarArgs: []string{"-create-consumer"}, PlainJetStream: true, Dir: filepath.Join(dir, "workers"), StopGrace: 5 * time.Second,
	})
	require.NoError(b, err)
	s.undo = append(s.undo, func() { cancel(); lw.Wait() })
	for _, ns := range s.nss {
		require.Eventually(b, func() bool {
			p, err := chaos.PoolStatus(ctx, s.qs[0].URL, ns, "p")
			return err == nil && p.ReadyWorkers >= 1
		}, 120*time.Second, 200*time.Millisecond, "a ready worker in %s (logs in %s)", ns, dir)
	}
	if shards > 1 {
		// Settled: each replica runs its share (no hand-over during the
		// measurement).
		scrapers, err := scrape.New(ctx, env)
		require.NoError(b, err)
		require.Eventually(b, func() bool {
			for _, q := range s.qs {
				if n := runningShards(q.MetricsURL, scrapers.Reader); n != shards/replicas {
					return false
				}
			}
			return true
		}, 60*time.Second, 200*time.Millisecond, "%d shards on each replica", shards/replicas)
	}
	return s
}

// runningShards counts the shards a replica runs (-1: unreadable).
func runningShards(url, token string) int {
	code, body, err := scrape.Get(url, token)
	if err != nil || code != http.StatusOK {
		return -1
	}
	n := 0
	for line := range strings.Lines(body) {
		if strings.HasPrefix(line, "runplane_activator_shard_running{") && strings.HasSuffix(strings.TrimSpace(line), " 1") {
			n++
		}
	}
	return n
}

// load runs n sync calls, closed loop with callers at once, round-robin
// over the namespaces and the replicas' ingresses.
func (s *shardedStack) load(b *testing.B, n, callers int) {
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	body := []byte(`{"mode":"sync","timeoutSeconds":30,"payload":{"prompt":"robot"}}`)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range callers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				ns, q := s.nss[i%int64(len(s.nss))], s.qs[(i/int64(len(s.nss)))%int64(len(s.qs))]
				r, err := client.Post(q.URL+"/v1/namespaces/"+ns+"/pools/p/invocations", "application/json", bytes.NewReader(body))
				if err != nil {
					failed.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, r.Body)
				r.Body.Close()
				if r.StatusCode != http.StatusOK {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		b.Errorf("%d of %d calls failed", f, n)
	}
}

// BenchmarkShardedQueue measures sync calls (the real sidecar and
// framework-recorder processes as workers, a pool in each of 6 namespaces,
// one per shard) through 1, 2 and 3 queue processes sharing the
// activator's 6 shards (and 1 unsharded, shards=1, the reference), each replica
// taking its share of the ingress calls too: calls/s, and the CPU of each
// process from /proc — queue-cpu-µs/op is every replica's CPU together
// per call (with the load spread evenly, also what one replica spends per
// call it handles), replica-cpu-µs/op the busiest replica's CPU per call
// of its share (calls / replicas): what sizes a replica, imbalance
// included; nats-cpu-µs/op the server's. On a 2-core machine the whole stack is
// CPU-bound, so calls/s cannot grow with replicas here; the CPU per call is
// what predicts a bigger machine.
func BenchmarkShardedQueue(b *testing.B) {
	for _, c := range []struct{ replicas, shards int }{{1, 1}, {1, benchShards}, {2, benchShards}, {3, benchShards}} {
		replicas := c.replicas
		s := startSharded(b, replicas, c.shards)
		s.load(b, 200, 16) // warm: connections, consumers, caches
		b.Run(fmt.Sprintf("replicas=%d/shards=%d", replicas, c.shards), func(b *testing.B) {
			cpu := func() (q []time.Duration, n time.Duration) {
				for _, p := range s.qs {
					c, err := cpuOf(p.PID())
					require.NoError(b, err)
					q = append(q, c)
				}
				n, err := cpuOf(s.nats.PID())
				require.NoError(b, err)
				return q, n
			}
			q0, n0 := cpu()
			start := time.Now()
			b.ResetTimer()
			s.load(b, b.N, 32)
			b.StopTimer()
			el := time.Since(start)
			q1, n1 := cpu()
			var total time.Duration
			for i := range q1 {
				total += q1[i] - q0[i]
			}
			per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
			b.ReportMetric(float64(b.N)/el.Seconds(), "calls/s")
			b.ReportMetric(per(total), "queue-cpu-µs/op")
			var most time.Duration
			for i := range q1 {
				most = max(most, q1[i]-q0[i])
			}
			b.ReportMetric(per(most)*float64(replicas), "replica-cpu-µs/op")
			b.ReportMetric(per(n1-n0), "nats-cpu-µs/op")
		})
		s.stop()
	}
}
