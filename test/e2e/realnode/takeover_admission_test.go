package realnode

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/test/cluster"
)

// admissionRounds is how many bare GPU Pods each case of
// BenchmarkBareGPUPodAdmission sends at a full node, one after the other.
const admissionRounds = 10

// BenchmarkBareGPUPodAdmission counts the bare GPU Pods (no controller:
// nothing replaces them) that the extender binds and the kubelet then
// rejects for good (UnexpectedAdmissionError, "requested number of devices
// unavailable"; kubernetes/kubernetes#130145) after a Pod holding the GPU
// was deleted with grace 0. A measurement, not an assertion: runplane
// cannot prevent the rejection (extender/README.md, "A GPU the kubelet has
// not taken back yet"), so the figures say how often it happens:
// rejected-takers, rejected-refills and rejected-forced per 10 rounds, and
// how long the kubelet takes to stop a Pod deleted with grace 0
// (stop-p50-ms, its Pod cgroup gone).
//
// The node's other GPUs are held by a plain Pod, so one GPU is in play:
//   - takeover: held by a placeholder; each GPU Pod is created as soon as
//     the placeholder is bound (the kubelet may still be starting it, as
//     in a burst, where a refill is taken the moment it is bound), takes
//     it over, and is deleted with grace 0 (the Deployment refills);
//   - force-deleted: held by the previous round's GPU Pod, whose
//     container ignores SIGTERM (a shell), while the next one waits
//     Pending; the previous one is deleted with grace 0 and the waiting
//     one is bound into its GPU.
func BenchmarkBareGPUPodAdmission(b *testing.B) {
	need(b)
	t := b
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := env.Client()
	forceDelete := func(t testing.TB, name string) {
		require.NoError(t, c.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	}
	// admitted waits for the Pod to run or fail; "" when it runs, else why.
	admitted := func(t testing.TB, name string) string {
		var got *corev1.Pod
		err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			var err error
			got, err = c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return got.Status.Phase == corev1.PodRunning || got.Status.Phase == corev1.PodFailed, nil
		})
		require.NoError(t, err, "GPU Pod %s neither ran nor failed", name)
		if got.Status.Phase == corev1.PodFailed {
			return fmt.Sprintf("%s: %s: %s", name, got.Status.Reason, got.Status.Message)
		}
		return ""
	}

	// The holder is above every workload tier: a GPU Pod that finds no
	// room must wait, not preempt it.
	const holder, holderClass = "bare-holder", "bare-holder-critical"
	_, err := c.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: holderClass}, Value: 1_000_000}, metav1.CreateOptions{})
	require.NoError(t, err)
	hold := realPod(holder, "trap 'exit 0' TERM; sleep 3600 & wait", cluster.RealNodeGPUs-1)
	hold.Spec.PriorityClassName = holderClass
	require.NoError(t, createOnceClassKnown(ctx, hold), "creating the holder")
	t.Cleanup(func() {
		_ = c.CoreV1().Pods(ns).Delete(context.Background(), holder, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		_ = c.SchedulingV1().PriorityClasses().Delete(context.Background(), holderClass, metav1.DeleteOptions{})
	})
	require.Empty(t, admitted(t, holder), "the holder runs")

	func() {
		const stock = "stock-bare"
		_, err := c.AppsV1().Deployments(ns).Create(ctx, stockDeployment(stock, 1), metav1.CreateOptions{})
		require.NoError(t, err)
		defer func() {
			_ = c.AppsV1().Deployments(ns).Delete(context.Background(), stock, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
			runningPods(t, ctx, "app="+stock, 0)
		}()
		runningPods(t, ctx, "app="+stock, 1)
		var rejected []string
		for i := range admissionRounds {
			// The placeholder is bound (the kubelet may not have started it).
			require.NoError(t, wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
				pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + stock})
				if err != nil {
					return false, err
				}
				for _, p := range pods.Items {
					if p.Spec.NodeName != "" && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed {
						return true, nil
					}
				}
				return false, nil
			}), "no placeholder bound")
			name := fmt.Sprintf("taker-%d", i)
			_, err := c.CoreV1().Pods(ns).Create(ctx, gpuWorkload(name), metav1.CreateOptions{})
			require.NoError(t, err)
			if why := admitted(t, name); why != "" {
				rejected = append(rejected, why)
			}
			forceDelete(t, name)
		}
		pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + stock})
		require.NoError(t, err)
		refills := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodFailed {
				refills++ // replaced by the ReplicaSet; counted for the figures
			}
		}
		t.Logf("takeover, %d rounds: %d GPU Pods and %d placeholder refills rejected by the kubelet: %v", admissionRounds, len(rejected), refills, rejected)
		b.ReportMetric(float64(len(rejected)), "rejected-takers")
		b.ReportMetric(float64(refills), "rejected-refills")
	}()

	func() {
		var rejected []string
		var took, stops []time.Duration
		stopped := make(chan time.Duration, admissionRounds)
		prev := "forced-0"
		_, err := c.CoreV1().Pods(ns).Create(ctx, gpuWorkload(prev), metav1.CreateOptions{})
		require.NoError(t, err)
		require.Empty(t, admitted(t, prev))
		for i := 1; i <= admissionRounds; i++ {
			name := fmt.Sprintf("forced-%d", i)
			_, err := c.CoreV1().Pods(ns).Create(ctx, gpuWorkload(name), metav1.CreateOptions{})
			require.NoError(t, err)
			// It waits for the GPU: the scheduler found no room.
			require.NoError(t, wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
				p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				for _, cond := range p.Status.Conditions {
					if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
						return true, nil
					}
				}
				return false, nil
			}), "GPU Pod %s never found the node full", name)
			prevPod, err := c.CoreV1().Pods(ns).Get(ctx, prev, metav1.GetOptions{})
			require.NoError(t, err)
			began := time.Now()
			forceDelete(t, prev)
			go func(uid string) {
				// How long the kubelet takes to stop the Pod (its cgroup goes).
				for podCgroup(t, uid) != "" && time.Since(began) < time.Minute {
					time.Sleep(50 * time.Millisecond)
				}
				stopped <- time.Since(began)
			}(string(prevPod.UID))
			if why := admitted(t, name); why != "" {
				rejected = append(rejected, why)
				forceDelete(t, name)
				name = fmt.Sprintf("forced-%d-again", i)
				_, err := c.CoreV1().Pods(ns).Create(ctx, gpuWorkload(name), metav1.CreateOptions{})
				require.NoError(t, err)
				require.Empty(t, admitted(t, name), "a GPU Pod on a free GPU")
			} else {
				took = append(took, time.Since(began))
			}
			prev = name
		}
		forceDelete(t, prev)
		for range admissionRounds {
			stops = append(stops, <-stopped)
		}
		t.Logf("force-deleted, %d rounds: %d GPU Pods rejected by the kubelet: %v; predecessor deleted → Running of the admitted: %v; → its cgroup gone: %v", admissionRounds, len(rejected), rejected, took, stops)
		slices.Sort(stops)
		b.ReportMetric(float64(len(rejected)), "rejected-forced")
		b.ReportMetric(float64(stops[len(stops)/2].Milliseconds()), "stop-p50-ms")
	}()
}
