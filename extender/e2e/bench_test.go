package e2e

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	configv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/test/kit"
)

// boundWatcher records when each Pod of a namespace is first seen bound.
type boundWatcher struct {
	mu      sync.Mutex
	bound   map[string]time.Time
	waiters map[string]chan struct{}
}

// watchBound starts an informer (not a bare watch: the API server drops
// watchers that fall behind in a burst, and a reflector just re-watches).
func watchBound(t testing.TB, ctx context.Context, c kubernetes.Interface, ns, selector string) *boundWatcher {
	t.Helper()
	bw := &boundWatcher{bound: map[string]time.Time{}, waiters: map[string]chan struct{}{}}
	seen := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Spec.NodeName == "" {
			return
		}
		now := time.Now()
		bw.mu.Lock()
		defer bw.mu.Unlock()
		if _, seen := bw.bound[p.Name]; !seen {
			bw.bound[p.Name] = now
			if ch := bw.waiters[p.Name]; ch != nil {
				close(ch)
			}
		}
	}
	f := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	inf := f.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, obj any) { seen(obj) },
	})
	require.NoError(t, err)
	f.Start(ctx.Done())
	require.True(t, cache.WaitForCacheSync(ctx.Done(), inf.HasSynced), "pod informer did not sync")
	return bw
}

// createAndTime creates p and returns how long it took to be bound.
func (bw *boundWatcher) createAndTime(b testing.TB, ctx context.Context, c kubernetes.Interface, ns string, p *corev1.Pod) time.Duration {
	b.Helper()
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	start := time.Now()
	createPod(b, c, ns, p)
	at, err := bw.wait(waitCtx, p.Name)
	if err != nil {
		b.Fatal(err)
	}
	return at.Sub(start)
}

func (bw *boundWatcher) wait(ctx context.Context, name string) (time.Time, error) {
	bw.mu.Lock()
	if t, ok := bw.bound[name]; ok {
		bw.mu.Unlock()
		return t, nil
	}
	ch := bw.waiters[name]
	if ch == nil {
		ch = make(chan struct{})
		bw.waiters[name] = ch
	}
	bw.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
		return time.Time{}, fmt.Errorf("pod %s not bound: %w", name, ctx.Err())
	}
	bw.mu.Lock()
	defer bw.mu.Unlock()
	return bw.bound[name], nil
}

func (bw *boundWatcher) count() int {
	bw.mu.Lock()
	defer bw.mu.Unlock()
	return len(bw.bound)
}

// waitRunning waits until want Pods of selector run, and returns them.
// listPoll spaces the LISTs of up to 1,000 Pods: at the 100 ms of poll they
// run back to back (a LIST takes about that long here) and the load on the
// apiserver cut BindThroughput from 37 to 27 Pods/s.
const listPoll = 250 * time.Millisecond

func waitRunning(t testing.TB, c kubernetes.Interface, ns, selector string, want int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		all, err := listPods(context.Background(), c, ns, selector)
		require.NoError(t, err)
		pods = pods[:0]
		for i := range all {
			if running(&all[i]) {
				pods = append(pods, all[i])
			}
		}
		require.Equal(t, want, len(pods), "running Pods") // not Len: it would print every Pod on each poll
	}, 3*time.Minute, listPoll, "%d Pods %q running", want, selector)
	return pods
}

// BenchmarkTakeoverLatency measures, in the same run, Pod created → bound
// for (1) a GPU Pod taking over a same-spec stock placeholder through the
// runplane-scheduler and the extender, and (2) the baseline: a
// high-priority Pod of the default kube-scheduler preempting a low-priority
// pause Pod of the same size. Every node has one GPU, held by the
// placeholder or the pause Pod, so each sample is a takeover. Samples
// alternate between the two.
//
// What the baseline models: pause Pods with the Kubernetes default grace
// period (30s, what a Deployment that sets none gets) on nodes whose
// kubelet takes min(grace, cluster.DefaultPodTerminationBound = 2s) to stop
// a container that exits on SIGTERM and delete the Pod (the kwok stage
// test/cluster/stages/pod-delete-graceful.yaml); kube-scheduler binds the
// preemptor once the victim is gone. Placeholders have grace 0 (the
// webhook sets it), so the API server removes them as the extender deletes
// them — that is the point of stock.
func BenchmarkTakeoverLatency(b *testing.B) {
	const samples, victimGrace = 40, 30
	h := setup(b)
	ctx, c := b.Context(), h.client
	ns := env.Namespace(b, "bench-takeover")
	addNodes(b, "bench-stock", samples, 1)
	addNodes(b, "bench-preempt", samples, 1)
	for i := range samples {
		ph := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ph-%02d", i), Labels: map[string]string{api.LabelStock: "g1", "bench": "ph"}},
			Spec: placeholderTemplate("g1", "bench-stock", "ph").Spec}
		victim := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("victim-%02d", i), Labels: map[string]string{"bench": "victim"}},
			Spec: podSpec("bench-preempt", api.PriorityClassStock, victimGrace)}
		victim.Spec.SchedulerName = corev1.DefaultSchedulerName
		createPod(b, c, ns, ph)
		createPod(b, c, ns, victim)
	}
	waitRunning(b, c, ns, "bench=ph", samples)
	waitRunning(b, c, ns, "bench=victim", samples)
	bw := watchBound(b, ctx, c, ns, "")
	var stock, preempt []time.Duration
	measure := func(p *corev1.Pod) time.Duration { return bw.createAndTime(b, ctx, c, ns, p) }
	// One round uses the nodes up: the whole function is one op (its setup
	// takes longer than the default -benchtime, so it runs once).
	b.ResetTimer()
	for i := range samples {
		stock = append(stock, measure(gpuPod(fmt.Sprintf("gpu-%02d", i), "g1", "bench-stock")))
		p := gpuPod(fmt.Sprintf("hi-%02d", i), "g1", "bench-preempt")
		delete(p.Labels, api.LabelGPUSpec)
		p.Spec.SchedulerName = corev1.DefaultSchedulerName
		preempt = append(preempt, measure(p))
	}
	b.StopTimer()
	kit.ReportSpeedup(b, "stock", stock, "preempt", preempt)
}

// BenchmarkBindThroughput creates 1,000 kwok nodes of 4 GPUs, stock on
// 500 of them, and measures Pods bound per second for a burst of 1,000 GPU
// Pods created at once, in the same run on the same nodes:
//   - baseline: a kube-scheduler with the default configuration alone (no
//     extender; its own NodeResourcesFit counts the GPUs), Pods of the same
//     size. It is a second scheduler, started like the runplane-scheduler
//     (the same client QPS): the cluster's own kube-scheduler runs with
//     client-go's default 50 QPS, which would measure that limit instead;
//   - runplane: GPU Pods through the runplane-scheduler and the extender,
//     packing the free room of the nodes that hold stock (it fits there:
//     no placeholder is taken);
//   - runplane-takeover: 500 more GPU Pods, once that room is mostly used:
//     they take placeholders where no warm node has room left, and the
//     replacements go to nodes without stock (takeovers/pod).
//
// Each burst uses capacity up, so each sub-benchmark is one op.
func BenchmarkBindThroughput(b *testing.B) {
	const nodes, gpus, placeholders, pods = 1000, 4, 500, 1000
	h := setup(b)
	ctx, c := b.Context(), h.client
	ns := env.Namespace(b, "bench-throughput")
	addNodes(b, "bench-tp", nodes, gpus)
	stockDeployment(b, c, ns, "stock-tp", "g1", "bench-tp", placeholders)
	waitRunning(b, c, ns, "app=stock-tp", placeholders)
	bw := watchBound(b, ctx, c, ns, "burst")
	const plain = "bench-default-scheduler"
	sched, err := env.StartScheduler(ctx, &configv1.KubeSchedulerConfiguration{
		Profiles: []configv1.KubeSchedulerProfile{{SchedulerName: ptr.To(plain)}}})
	require.NoError(b, err)
	defer sched.Stop()
	burst := func(b *testing.B, prefix, schedulerPort string, pods int, pod func(name string) *corev1.Pod) {
		stop := h.profileDuring(b, "bind-throughput-"+prefix, 15*time.Second)
		// A scheduler just started refuses /metrics (403) until its
		// delegated authorization works: the figures need the count before.
		var cycles map[float64]float64
		require.Eventually(b, func() bool {
			cycles = algorithmBuckets(b, schedulerPort)
			return cycles != nil
		}, time.Minute, 250*time.Millisecond, "scheduler %s /metrics", schedulerPort)
		writes, err := apiWrites(ctx)
		if err != nil {
			b.Log(err)
		}
		start := time.Now()
		var wg sync.WaitGroup
		sem := make(chan struct{}, 32)
		for i := range pods {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				p := pod(fmt.Sprintf("%s-%04d", prefix, i))
				p.Labels["burst"] = prefix
				createPod(b, c, ns, p)
			})
		}
		wg.Wait()
		// Creating them goes through the API server (and, for GPU
		// Pods, the admission webhook): it bounds the rate too.
		b.Logf("%d Pods created in %.1fs", pods, time.Since(start).Seconds())
		var last time.Time
		waitCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		for i := range pods {
			at, err := bw.wait(waitCtx, fmt.Sprintf("%s-%04d", prefix, i))
			if err != nil {
				b.Fatal(err)
			}
			if at.After(last) {
				last = at
			}
		}
		b.ReportMetric(float64(pods)/last.Sub(start).Seconds(), "pods/s")
		writesPerPod(ctx, b, writes, pods)
		reportAlgorithmP99(b, schedulerPort, cycles, pods)
		stop()
	}
	b.Run("baseline", func(b *testing.B) {
		for b.Loop() {
			burst(b, "default", strings.TrimPrefix(sched.Name, "kube-scheduler-"), pods, func(name string) *corev1.Pod {
				p := gpuPod(name, "g1", "bench-tp")
				delete(p.Labels, api.LabelGPUSpec)
				p.Spec.SchedulerName = plain
				return p
			})
		}
	})
	b.Run("runplane", func(b *testing.B) {
		for b.Loop() {
			claims := stockClaims(b, h)
			burst(b, "tp", h.schedulerPort, pods, func(name string) *corev1.Pod { return gpuPod(name, "g1", "bench-tp") })
			b.ReportMetric((stockClaims(b, h)-claims)/pods, "takeovers/pod")
		}
		logMetrics(b, h)
	})
	// The burst above fits the free room of the nodes holding stock, so it
	// takes none. This one comes once most of that room is used (on the
	// same nodes, after both bursts): its GPU Pods take placeholders, and
	// their replacements are created and placed while it runs — the
	// takeover path's rate and writes per bound Pod.
	b.Run("runplane-takeover", func(b *testing.B) {
		for b.Loop() {
			claims := stockClaims(b, h)
			burst(b, "to", h.schedulerPort, takeoverPods, func(name string) *corev1.Pod { return gpuPod(name, "g1", "bench-tp") })
			b.ReportMetric((stockClaims(b, h)-claims)/takeoverPods, "takeovers/pod")
		}
		logMetrics(b, h)
	})
}

// takeoverPods is BindThroughput's third burst.
const takeoverPods = 500

// stockClaims is the extender's runplane_extender_stock_claims_total, all
// specs: the takeovers so far.
func stockClaims(b *testing.B, h *harness) float64 {
	m, err := h.get("/metrics")
	require.NoError(b, err, "extender /metrics")
	total := 0.0
	for _, line := range strings.Split(m, "\n") {
		if !strings.HasPrefix(line, "runplane_extender_stock_claims_total{") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		require.NoError(b, err, "parsing %q", line)
		total += v
	}
	return total
}

// logMetrics logs the mean of the extender's latency histograms (verbs
// and bind steps), in one line: the benchmark log keeps only a few.
func logMetrics(b *testing.B, h *harness) {
	m, err := h.get("/metrics")
	if err != nil {
		b.Logf("extender metrics: %v", err)
		return
	}
	sums, counts := map[string]float64{}, map[string]float64{}
	var failures []string // why binds failed: each one is a scheduling cycle more
	for _, line := range strings.Split(m, "\n") {
		name, _, _ := strings.Cut(line, "{")
		key := label(line, "verb") + label(line, "step")
		i := strings.LastIndexByte(line, ' ')
		if name == "runplane_extender_bind_failures_total" && i >= 0 {
			failures = append(failures, label(line, "reason")+" "+line[i+1:])
		}
		if key == "" || i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasSuffix(name, "_seconds_sum"):
			sums[key] += v
		case strings.HasSuffix(name, "_seconds_count"):
			counts[key] += v
		}
	}
	var parts []string
	for k, n := range counts {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f×%.1fms", k, n, sums[k]/n*1000))
		}
	}
	sort.Strings(parts)
	h.mu.Lock()
	crashes := h.crashes
	h.mu.Unlock()
	sort.Strings(failures)
	b.Logf("extender mean latency: %s; bind failures: %s; extender restarts (lost Lease) so far: %d",
		strings.Join(parts, ", "), strings.Join(failures, ", "), crashes)
}
