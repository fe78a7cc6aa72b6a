package realnode

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/hack/images"
	"github.com/runplane/runplane/test/cluster"
	"github.com/runplane/runplane/test/kit"
)

// The baseline's PriorityClasses: victims below runplane-stock (so the
// default scheduler preempts them, not the placeholders beside them), the
// preemptor above.
const (
	benchVictimClass    = "bench-victim"
	benchPreemptorClass = "bench-preemptor"
)

// runningRecorder notes when each Pod labelled bench-sample is first seen
// bound, Running (its containers started by the kubelet) or Failed, and
// when its deletion is seen, from a watch.
type runningRecorder struct {
	mu     sync.Mutex
	bound  map[string]time.Time
	seen   map[string]time.Time
	failed map[string]string
	gone   map[string]time.Time
	ch     chan struct{}
}

func newRunningRecorder(b testing.TB, ctx context.Context) *runningRecorder {
	r := &runningRecorder{bound: map[string]time.Time{}, seen: map[string]time.Time{}, failed: map[string]string{}, gone: map[string]time.Time{}, ch: make(chan struct{}, 1)}
	f := informers.NewSharedInformerFactoryWithOptions(env.Client(), 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = "bench-sample" }))
	note := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Spec.NodeName == "" {
			return
		}
		r.mu.Lock()
		if _, ok := r.bound[string(p.UID)]; !ok {
			r.bound[string(p.UID)] = time.Now()
		}
		if p.Status.Phase == corev1.PodFailed {
			r.failed[string(p.UID)] = p.Status.Reason + ": " + p.Status.Message
		} else if _, ok := r.seen[string(p.UID)]; !ok && p.Status.Phase == corev1.PodRunning {
			r.seen[string(p.UID)] = time.Now()
		}
		r.mu.Unlock()
		select {
		case r.ch <- struct{}{}:
		default:
		}
	}
	inf := f.Core().V1().Pods().Informer()
	deleted := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if p, ok := obj.(*corev1.Pod); ok {
			r.mu.Lock()
			r.gone[string(p.UID)] = time.Now()
			r.mu.Unlock()
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: note, UpdateFunc: func(_, o any) { note(o) }, DeleteFunc: deleted}); err != nil {
		b.Fatal(err)
	}
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	return r
}

// errRejected is a sample Pod the kubelet failed before it ran.
var errRejected = errors.New("rejected by the kubelet")

// wait returns when the Pod of uid was first seen bound and Running, or
// errRejected when it failed.
func (r *runningRecorder) wait(ctx context.Context, uid string) (bound, running time.Time, _ error) {
	for {
		r.mu.Lock()
		bound, running = r.bound[uid], r.seen[uid]
		why, failed := r.failed[uid]
		r.mu.Unlock()
		if !running.IsZero() {
			return bound, running, nil
		}
		if failed {
			return bound, time.Time{}, fmt.Errorf("%w: %s", errRejected, why)
		}
		select {
		case <-r.ch:
		case <-ctx.Done():
			return bound, time.Time{}, fmt.Errorf("pod %s never Running: %w", uid, ctx.Err())
		}
	}
}

// goneAt is when the Pod of uid was seen deleted (zero if not yet).
func (r *runningRecorder) goneAt(uid string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gone[uid]
}

// pauseVictims is a Deployment of the default scheduler's pause Pods, each
// holding one GPU of the real node at priority benchVictimClass, with the
// Kubernetes default grace period (30s; pause exits on SIGTERM at once).
func pauseVictims(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	res := corev1.ResourceList{api.DefaultGPUResource: resource.MustParse("1"),
		corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "pause", Image: images.PauseRef, ImagePullPolicy: corev1.PullNever,
						Resources: corev1.ResourceRequirements{Requests: res, Limits: res}}},
					PriorityClassName: benchVictimClass,
					NodeSelector:      map[string]string{cluster.RealNodeLabel: "true"},
					Tolerations:       []corev1.Toleration{cluster.RealNodeToleration},
				},
			},
		},
	}
}

// preemptor is the baseline's GPU Pod: what gpuWorkload becomes, but for
// the default scheduler at a priority above the victims.
func preemptor(name string) *corev1.Pod {
	p := realPod(name, `echo started; exec sleep 3600`, 1)
	p.Spec.Containers[0].ImagePullPolicy = corev1.PullNever
	res := p.Spec.Containers[0].Resources.Limits
	res[corev1.ResourceCPU], res[corev1.ResourceMemory] = resource.MustParse("100m"), resource.MustParse("64Mi")
	p.Spec.Containers[0].Resources.Requests = res.DeepCopy()
	p.Spec.PriorityClassName = benchPreemptorClass
	return p
}

// BenchmarkTakeoverRealNode measures on the real kubelet, in one run and
// alternating, GPU Pod created → Running (its container started) for
// (1) a GPU Pod taking over a placeholder through the runplane-scheduler
// and the extender, and (2) the baseline: a Pod of the default
// kube-scheduler preempting a pause Pod of lower priority. The real node's
// four GPUs are held by two placeholders and two pause Pods, so each
// sample is a takeover; between samples the sample Pod is deleted and the
// node refilled (the Deployments' replacements Running).
//
// What differs is what the kubelet does: a placeholder has grace 0 and the
// extender deletes it in the bind, so the GPU Pod is bound at once and
// the kubelet starts it while stopping the pause container; the default
// scheduler evicts its victim with the default grace period (30 s; pause
// exits on SIGTERM) and binds the preemptor only once the kubelet has
// stopped the victim and the Pod is gone. Created → bound is reported
// too (p50), to tell the scheduling path from the kubelet's start, and so
// are the samples the kubelet rejected after the scheduler bound them
// (UnexpectedAdmissionError: a GPU it had not yet taken back from a Pod
// just deleted; kubernetes/kubernetes#130145), which are measured again.
func BenchmarkTakeoverRealNode(b *testing.B) {
	need(b)
	const samples = 10
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c := env.Client()
	for name, value := range map[string]int32{benchVictimClass: -1000, benchPreemptorClass: 1000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		if _, err := c.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			b.Fatal(err)
		}
	}
	const stock, victims = "bench-stock", "bench-victims"
	for _, d := range []*appsv1.Deployment{stockDeployment(stock, 2), pauseVictims(victims, 2)} {
		if _, err := c.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		for _, d := range []string{stock, victims} {
			_ = c.AppsV1().Deployments(ns).Delete(context.Background(), d, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
		}
	})
	rec := newRunningRecorder(b, ctx)
	full := func() {
		runningPods(b, ctx, "app="+stock, 2)
		runningPods(b, ctx, "app="+victims, 2)
	}
	// measure creates the Pod and returns how long it took to be bound
	// and to run; ok is false when the kubelet rejected it.
	measure := func(p *corev1.Pod) (toBound, toRunning time.Duration, ok bool) {
		p.Labels = map[string]string{"bench-sample": "true", api.LabelGPUSpec: p.Labels[api.LabelGPUSpec]}
		if p.Labels[api.LabelGPUSpec] == "" {
			delete(p.Labels, api.LabelGPUSpec)
		}
		full()
		waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		start := time.Now()
		created, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		bound, at, err := rec.wait(waitCtx, string(created.UID))
		if err != nil && !errors.Is(err, errRejected) {
			b.Fatalf("%s: %v", p.Name, err)
		}
		if err != nil {
			b.Logf("%s: %v", p.Name, err)
		}
		// Free the GPU again, through the kubelet (a grace period, so the
		// Pod is gone only once its container stopped: a grace-0 delete
		// frees the GPU in the API before the kubelet has it back, and
		// the refill would be rejected), then the node refilled by the
		// next measure.
		if err := c.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](1)}); err != nil {
			b.Fatal(err)
		}
		err = wait.PollUntilContextCancel(waitCtx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			_, err := c.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			b.Fatalf("%s never gone: %v", p.Name, err)
		}
		return bound.Sub(start), at.Sub(start), !at.IsZero()
	}
	// sample measures until a Pod runs (at most 5 tries), counting the
	// kubelet's rejections.
	type series struct {
		bound, running []time.Duration
		rejected       int
	}
	sample := func(name string, pod func(string) *corev1.Pod, s *series) {
		for try := range 5 {
			if toBound, toRunning, ok := measure(pod(fmt.Sprintf("%s-%d", name, try))); ok {
				s.bound, s.running = append(s.bound, toBound), append(s.running, toRunning)
				b.Logf("%s: bound %s, Running %s", name, toBound.Round(time.Millisecond), toRunning.Round(time.Millisecond))
				return
			}
			s.rejected++
		}
		b.Fatalf("%s: rejected 5 times", name)
	}
	var stockS, preemptS series
	b.ResetTimer()
	for i := range samples {
		sample(fmt.Sprintf("takeover-%02d", i), gpuWorkload, &stockS)
		sample(fmt.Sprintf("preempt-%02d", i), preemptor, &preemptS)
	}
	b.StopTimer()
	took, preempted := stockS.running, preemptS.running
	b.ReportMetric(kit.Ms(kit.Percentile(stockS.bound, 50)), "stock-bound-p50-ms")
	b.ReportMetric(kit.Ms(kit.Percentile(preemptS.bound, 50)), "preempt-bound-p50-ms")
	// A rejected sample is one the kubelet failed (UnexpectedAdmissionError)
	// although the scheduler had bound it: not in the latencies.
	b.ReportMetric(float64(stockS.rejected), "stock-rejected")
	b.ReportMetric(float64(preemptS.rejected), "preempt-rejected")
	kit.ReportSpeedup(b, "stock", took, "preempt", preempted)
}
