package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/extender"
)

// tenantDeployment is a Deployment of the default scheduler (priority 0,
// the Kubernetes default grace period) on the group's nodes.
func tenantDeployment(t *testing.T, ns, name, group string, replicas int32, cpu, mem string) {
	t.Helper()
	tenantGPUDeployment(t, ns, name, group, replicas, cpu, mem, 0)
}

// tenantGPUDeployment is tenantDeployment of Pods that also hold gpus
// GPUs (a cluster where GPUs are not only given through runplane).
func tenantGPUDeployment(t *testing.T, ns, name, group string, replicas int32, cpu, mem string, gpus int64) {
	t.Helper()
	tenantDeploymentOf(t, ns, name, group, replicas, cpu, mem, gpus, nil)
}

// tenantDeploymentOf is tenantGPUDeployment with the Pods' annotations.
func tenantDeploymentOf(t *testing.T, ns, name, group string, replicas int32, cpu, mem string, gpus int64, annotations map[string]string) {
	t.Helper()
	req := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
	var limits corev1.ResourceList
	if gpus > 0 {
		req[api.DefaultGPUResource] = *resource.NewQuantity(gpus, resource.DecimalSI)
		limits = corev1.ResourceList{api.DefaultGPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)}
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}, Annotations: annotations},
				Spec: corev1.PodSpec{
					NodeSelector:                  map[string]string{groupLabel: group},
					TerminationGracePeriodSeconds: ptr.To(int64(30)),
					Containers:                    []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{Requests: req, Limits: limits}}},
				},
			},
		},
	}
	_, err := env.Client().AppsV1().Deployments(ns).Create(t.Context(), d, metav1.CreateOptions{})
	require.NoError(t, err, "creating Deployment %s/%s", ns, name)
}

// podBirths records when each Pod of the namespaces was created (victims
// are gone by the time the test looks).
type podBirths struct {
	mu sync.Mutex
	at map[types.UID]time.Time
}

func watchBirths(t *testing.T, namespaces ...string) *podBirths {
	b := &podBirths{at: map[types.UID]time.Time{}}
	for _, ns := range namespaces {
		w, err := env.Client().CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{})
		require.NoError(t, err)
		t.Cleanup(w.Stop)
		go func() {
			for ev := range w.ResultChan() {
				if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Added {
					b.mu.Lock()
					b.at[p.UID] = p.CreationTimestamp.Time
					b.mu.Unlock()
				}
			}
		}()
	}
	return b
}

// preemptedEvents are the extender's Preempted Events in the namespaces,
// by the GPU Pod (related object) they made room for.
func preemptedEvents(ctx context.Context, t *testing.T, namespaces ...string) map[string][]eventsv1.Event {
	out := map[string][]eventsv1.Event{}
	for _, ns := range namespaces {
		list, err := env.Client().EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		for _, ev := range list.Items {
			if ev.Reason != extender.ReasonPreempted || ev.Related == nil {
				continue
			}
			key := ev.Related.Namespace + "/" + ev.Related.Name
			out[key] = append(out[key], ev)
		}
	}
	return out
}

// TestPreemptionMakesProgress is the probe of issue 31 on make dev's
// topology (kwok nodes of 8 GPUs, 32 CPUs and 256Gi, untainted): two
// tenants' Deployments of the default scheduler (priority 0) run on the
// GPU nodes, and 30 g1.1 Pods (1 GPU, 4 CPUs) fill them: the last ones
// are short of CPU and preempt. The room the victims free is held for
// the GPU Pods (a reservation every scheduler counts), so the victims'
// replacements cannot take it: every GPU Pod binds, each after a bounded
// number of evictions, and no replacement of a victim is evicted again
// for the same GPU Pod. Before, the replacements took the freed CPUs and
// were preempted again, in a loop (168 evictions in 83 s), and GPU Pods
// never bound.
func TestPreemptionMakesProgress(t *testing.T) {
	h := setup(t)
	ctx, c := t.Context(), h.client
	const group = "churn"
	addNodes(t, group, 4, 8)
	nsA, nsB, nsGPU := env.Namespace(t, "churn-a"), env.Namespace(t, "churn-b"), env.Namespace(t, "churn-gpu")
	births := watchBirths(t, nsA, nsB)
	timeline := watchTimeline(t, nsA, nsB, nsGPU, api.DefaultNamespace)
	// 24 of the 128 CPUs: 26 g1.1 Pods fit beside them, 4 must preempt
	// 16 CPUs' worth.
	tenantDeployment(t, nsA, "workers", group, 8, "2", "4Gi")
	tenantDeployment(t, nsB, "accessors", group, 8, "1", "1Gi")
	waitRunning(t, c, nsA, "app=workers", 8)
	waitRunning(t, c, nsB, "app=accessors", 8)

	t.Cleanup(func() {
		if t.Failed() {
			logUnbound(t, nsGPU, group)
			timeline.mu.Lock()
			for _, l := range timeline.lines {
				t.Log(l)
			}
			timeline.mu.Unlock()
		}
	})
	const gpuPods = 30
	for i := range gpuPods {
		p := gpuPod(fmt.Sprintf("g-%02d", i), "g1.1", group)
		createPod(t, c, nsGPU, p)
	}
	// The barrier: every GPU Pod bound.
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		pods, err := listPods(ctx, c, nsGPU, api.LabelGPUSpec)
		require.NoError(t, err)
		bound := 0
		for _, p := range pods {
			if p.Spec.NodeName != "" {
				bound++
			}
		}
		require.Equal(t, gpuPods, bound, "GPU Pods bound")
	}, 3*time.Minute, poll, "every GPU Pod to bind")

	// Events are written asynchronously: read them once the reservations
	// are all gone (taken or deleted), the last thing the run does.
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		left, err := listPods(ctx, c, api.DefaultNamespace, api.LabelReservedFor)
		require.NoError(t, err)
		require.Empty(t, left, "reservations left")
	}, time.Minute, poll, "the reservations to go")
	// The room each preemption freed went to its GPU Pod: no node holds
	// more than it has (kwok admits anything; a kubelet would refuse).
	requireNotOvercommitted(t, group)
	byPod := preemptedEvents(ctx, t, nsA, nsB)
	total := 0
	births.mu.Lock()
	defer births.mu.Unlock()
	for preemptor, evs := range byPod {
		total += len(evs)
		var names []string
		for _, ev := range evs {
			names = append(names, ev.Regarding.Name+" ("+ev.Note+")")
		}
		t.Logf("%s: %v", preemptor, names)
		// 4 CPUs need at most four 1-CPU victims on one node; a Pod
		// whose room a Pod of the default scheduler took in the hand-over
		// race (extender/README.md) plans once more elsewhere: at most
		// the cap per Pod (MaxEvictionsPerPod, 8) in all.
		require.LessOrEqual(t, len(evs), 8, "evictions for %s", preemptor)
		first := evs[0].EventTime.Time
		for _, ev := range evs {
			if ev.EventTime.Time.Before(first) {
				first = ev.EventTime.Time
			}
		}
		for _, ev := range evs {
			born, ok := births.at[ev.Regarding.UID]
			require.True(t, ok, "victim %s/%s was seen created", ev.Regarding.Namespace, ev.Regarding.Name)
			require.False(t, born.After(first), "%s evicted %s/%s, a replacement of its earlier victim", preemptor, ev.Regarding.Namespace, ev.Regarding.Name)
		}
	}
	// 16 CPUs' worth were needed (six GPU Pods preempt where the tenants'
	// Pods are: 13 evictions in the runs of this change); before, 447 in
	// three minutes, and six GPU Pods never bound.
	require.LessOrEqual(t, total, 32, "evictions in all")
	t.Logf("%d evictions for %d preempting GPU Pods", total, len(byPod))
}

// logUnbound logs why the namespace's unbound Pods wait, and the
// reservations left, for a failed run.
func logUnbound(t *testing.T, ns, group string) {
	ctx := context.Background()
	pods, err := listPods(ctx, env.Client(), ns, "")
	if err != nil {
		t.Logf("listing Pods: %v", err)
		return
	}
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			continue
		}
		msg, err := schedulingEvent(ctx, env.Client(), ns, p.Name)
		t.Logf("unbound %s: %s %v", p.Name, msg, err)
	}
	left, err := listPods(ctx, env.Client(), api.DefaultNamespace, api.LabelReservedFor)
	if err != nil {
		t.Logf("listing reservations: %v", err)
		return
	}
	for _, r := range left {
		t.Logf("reservation %s on %s for %s: %s", r.Name, r.Spec.NodeName, r.Annotations[api.AnnotationReservedFor], r.Status.Phase)
	}
	nodes, err := env.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: groupLabel + "=" + group})
	if err != nil {
		return
	}
	all, _ := env.Client().CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	for _, n := range nodes.Items {
		var cpu, gpus int64
		var names []string
		for _, p := range all.Items {
			if p.Spec.NodeName != n.Name {
				continue
			}
			for _, c := range p.Spec.Containers {
				cpu += c.Resources.Requests.Cpu().MilliValue()
				q := c.Resources.Requests[api.DefaultGPUResource]
				gpus += q.Value()
			}
			names = append(names, p.Namespace+"/"+p.Name)
		}
		t.Logf("node %s: cpu %dm gpus %d: %v", n.Name, cpu, gpus, names)
	}
}

type timeline struct {
	mu    sync.Mutex
	lines []string
}

// watchTimeline records when Pods of the namespaces are bound, deleted
// and gone, for a failed run's log.
func watchTimeline(t *testing.T, namespaces ...string) *timeline {
	tl := &timeline{}
	for _, ns := range namespaces {
		w, err := env.Client().CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{})
		require.NoError(t, err)
		t.Cleanup(w.Stop)
		go func() {
			seen := map[types.UID]string{}
			for ev := range w.ResultChan() {
				p, ok := ev.Object.(*corev1.Pod)
				if !ok {
					continue
				}
				state := p.Spec.NodeName
				if p.DeletionTimestamp != nil {
					state += " deleting"
				}
				if ev.Type == watch.Deleted {
					state += " gone"
				}
				if seen[p.UID] == state {
					continue
				}
				seen[p.UID] = state
				tl.mu.Lock()
				tl.lines = append(tl.lines, fmt.Sprintf("%s %s/%s %s", time.Now().Format("15:04:05.000"), p.Namespace, p.Name, state))
				tl.mu.Unlock()
			}
		}()
	}
	return tl
}

// TestPreemptionFreesWhatIsShort: on GPU nodes shared with two tenants'
// Deployments of the default scheduler — an inference Deployment holding
// GPUs and a web Deployment of CPU-only Pods — GPU Pods that are short of
// GPUs evict inference Pods only (the web Pods free nothing they need),
// and each binds after one eviction.
func TestPreemptionFreesWhatIsShort(t *testing.T) {
	h := setup(t)
	ctx, c := t.Context(), h.client
	const group = "short"
	addNodes(t, group, 2, 8)
	nsInf, nsWeb, nsGPU := env.Namespace(t, "short-inf"), env.Namespace(t, "short-web"), env.Namespace(t, "short-gpu")
	tenantGPUDeployment(t, nsInf, "inference", group, 4, "2", "8Gi", 4)
	tenantDeployment(t, nsWeb, "web", group, 8, "1", "1Gi")
	waitRunning(t, c, nsInf, "app=inference", 4)
	waitRunning(t, c, nsWeb, "app=web", 8)

	for i := range 2 {
		p := tierPod(fmt.Sprintf("g4-%d", i), group, api.PriorityClassWorkload, "g4", 4)
		createPod(t, c, nsGPU, p)
	}
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		pods, err := listPods(ctx, c, nsGPU, "app=g4")
		require.NoError(t, err)
		bound := 0
		for _, p := range pods {
			if p.Spec.NodeName != "" {
				bound++
			}
		}
		require.Equal(t, 2, bound, "GPU Pods bound")
	}, 2*time.Minute, poll, "both GPU Pods to bind")
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		left, err := listPods(ctx, c, api.DefaultNamespace, api.LabelReservedFor)
		require.NoError(t, err)
		require.Empty(t, left, "reservations left")
	}, time.Minute, poll, "the reservations to go")

	require.Empty(t, preemptedEvents(ctx, t, nsWeb), "a CPU-only Pod was evicted where GPUs were short")
	requireNotOvercommitted(t, group)
	byPod := preemptedEvents(ctx, t, nsInf)
	require.Len(t, byPod, 2)
	for preemptor, evs := range byPod {
		require.Len(t, evs, 1, "evictions for %s", preemptor)
	}
	// The victims' replacements wait: the GPU room stayed the GPU Pods'.
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		pods, err := listPods(ctx, c, nsInf, "app=inference")
		require.NoError(t, err)
		var bound, pending int
		for _, p := range pods {
			switch {
			case p.DeletionTimestamp != nil:
			case p.Spec.NodeName == "":
				pending++
			default:
				bound++
			}
		}
		require.Equal(t, []int{2, 2}, []int{bound, pending}, "inference Pods bound and Pending")
	}, time.Minute, poll, "the victims' replacements to wait")
}

// requireNotOvercommitted: on every node of the group, the requests of its
// Pods (not terminal) fit its allocatable CPU and GPUs.
func requireNotOvercommitted(t *testing.T, group string) {
	t.Helper()
	ctx := t.Context()
	nodes, err := env.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: groupLabel + "=" + group})
	require.NoError(t, err)
	for _, n := range nodes.Items {
		pods, err := env.Client().CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
		require.NoError(t, err)
		var cpu, gpus int64
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			for _, c := range p.Spec.Containers {
				cpu += c.Resources.Requests.Cpu().MilliValue()
				q := c.Resources.Requests[api.DefaultGPUResource]
				gpus += q.Value()
			}
		}
		allocGPU := n.Status.Allocatable[api.DefaultGPUResource]
		require.LessOrEqual(t, cpu, n.Status.Allocatable.Cpu().MilliValue(), "CPU requests on %s: %s", n.Name, podList(pods.Items))
		require.LessOrEqual(t, gpus, allocGPU.Value(), "GPU requests on %s: %s", n.Name, podList(pods.Items))
	}
}

// podList names the Pods of an over-committed node, and which are being
// deleted, for the failure message.
func podList(pods []corev1.Pod) string {
	var names []string
	for _, p := range pods {
		n := p.Namespace + "/" + p.Name
		if p.DeletionTimestamp != nil {
			n += " (terminating)"
		}
		names = append(names, n)
	}
	return strings.Join(names, ", ")
}

// TestReservationSurvivesRestart: the leader dies while a GPU Pod waits
// for its victim to terminate. The reservation is a Pod: the new leader
// finds it by its label and keeps the room for that GPU Pod, the
// victim's replacement does not get it, and the GPU Pod binds into it.
func TestReservationSurvivesRestart(t *testing.T) {
	h := setup(t)
	ctx, c := t.Context(), h.client
	// A suffix of its own per run, so -count N loops it in one cluster.
	group := "restart-resv-" + utilrand.String(5)
	nodes := addNodes(t, group, 1, 8)
	nsInf, nsGPU := env.Namespace(t, group+"-inf"), env.Namespace(t, group+"-gpu")
	// The victim takes 10s to terminate, as a workload that uses its grace.
	tenantDeploymentOf(t, nsInf, "inference", group, 1, "2", "8Gi", 8, map[string]string{"pod-delete.stage.kwok.x-k8s.io/delay": "10s"})
	waitRunning(t, c, nsInf, "app=inference", 1)

	createPod(t, c, nsGPU, tierPod("g8", group, api.PriorityClassWorkload, "g8", 8))
	var resv corev1.Pod
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		left, err := listPods(ctx, c, api.DefaultNamespace, api.LabelReservedFor)
		require.NoError(t, err)
		var mine []corev1.Pod
		for _, p := range left {
			if p.Spec.NodeName == nodes[0] {
				mine = append(mine, p)
			}
		}
		require.Len(t, mine, 1)
		resv = mine[0]
		require.NotNil(t, resv.DeletionTimestamp, "deleted at once, held by its finalizer")
	}, time.Minute, poll, "the reservation")

	h.killExtender()
	require.NoError(t, h.startExtender(ctx))

	// Within the reservation's NominationTTL (2 min from its creation): a
	// new leader that is never asked about the GPU Pod (a replica that was
	// not the leader answered it unschedulable, and kube-scheduler parked
	// it) finds the reservation without a nomination, releases it as
	// stale once that old, and the room goes to whichever scheduler is
	// first — the victim's replacement and the GPU Pod both, on a ledger
	// that had not seen the other's Binding (34 of 32 CPUs).
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		p, err := c.CoreV1().Pods(nsGPU).Get(ctx, "g8", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, nodes[0], p.Spec.NodeName)
	}, 90*time.Second, poll, "the GPU Pod to bind into the reservation")
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		_, err := c.CoreV1().Pods(api.DefaultNamespace).Get(ctx, resv.Name, metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "the reservation is gone: %v", err)
	}, time.Minute, poll, "the reservation to go")
	requireNotOvercommitted(t, group)
	pods, err := listPods(ctx, c, nsInf, "app=inference")
	require.NoError(t, err)
	for _, p := range pods {
		require.Empty(t, p.Spec.NodeName, "the victim's replacement %s took the room", p.Name)
	}
}

// TestPreemptorMeetsNewLeader: a GPU Pod that needs preemption is first
// filtered by an extender that is not the leader yet (it waits out its
// predecessor's Lease). That replica plans no preemption; before, it
// answered "insufficient" and kube-scheduler parked the Pod as
// unschedulable — nothing changed in the cluster after, so the new leader
// was never asked and the Pod did not bind (until the scheduler's 5-minute
// flush). Now it answers with an error, the scheduler retries after its
// back-off, and the new leader evicts the victim and binds the Pod.
func TestPreemptorMeetsNewLeader(t *testing.T) {
	h := setup(t)
	ctx, c := t.Context(), h.client
	group := "new-leader-" + utilrand.String(5)
	nodes := addNodes(t, group, 1, 8)
	nsInf, nsGPU := env.Namespace(t, group+"-inf"), env.Namespace(t, group+"-gpu")
	tenantDeploymentOf(t, nsInf, "inference", group, 1, "2", "8Gi", 8, nil)
	waitRunning(t, c, nsInf, "app=inference", 1)

	h.killExtender()
	// Serving, not leading, until the test says: the dead leader's Lease
	// holds an hour (its 15 s could run out at load before the barrier).
	require.NoError(t, h.holdLease(ctx))
	started := make(chan error, 1)
	go func() { started <- h.startExtender(context.WithoutCancel(ctx)) }()
	require.Eventually(t, func() bool {
		body, err := h.get("/metrics")
		return err == nil && containsLine(body, "runplane_extender_leader 0")
	}, time.Minute, poll, "the new extender serving, not the leader yet")
	createPod(t, c, nsGPU, tierPod("g8", group, api.PriorityClassWorkload, "g8", 8))
	// Barrier: the replica that does not lead has answered the scheduler
	// about the Pod; then the dead leader's Lease runs out.
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		evs, err := c.CoreV1().Events(nsGPU).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=g8,reason=FailedScheduling"})
		require.NoError(t, err)
		require.NotEmpty(t, evs.Items, "FailedScheduling events of g8")
	}, time.Minute, poll, "the scheduler to fail the GPU Pod once")
	body, err := h.get("/metrics")
	require.NoError(t, err)
	require.True(t, containsLine(body, "runplane_extender_leader 0"), "the new extender led before the scheduler had its answer")
	require.NoError(t, h.expireLease(ctx))
	require.NoError(t, <-started, "the new extender leading")

	require.EventuallyWithT(t, func(t *assert.CollectT) {
		p, err := c.CoreV1().Pods(nsGPU).Get(ctx, "g8", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, nodes[0], p.Spec.NodeName)
	}, 90*time.Second, poll, "the GPU Pod to bind")
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		left, err := listPods(ctx, c, api.DefaultNamespace, api.LabelReservedFor)
		require.NoError(t, err)
		require.Empty(t, left, "reservations left")
	}, time.Minute, poll, "the reservation to go")
	requireNotOvercommitted(t, group)
}
