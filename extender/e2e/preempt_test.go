package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/extender"
)

// tierPod is an already-mutated GPU Pod of n GPUs (4 CPUs, 16Gi each) in
// a priority tier, labelled app=<app>.
func tierPod(name, group, tier, app string, gpus int64) *corev1.Pod {
	spec := podSpec(group, tier, 30)
	list := corev1.ResourceList{
		corev1.ResourceCPU:     *resource.NewQuantity(4*gpus, resource.DecimalSI),
		corev1.ResourceMemory:  *resource.NewQuantity(gpus*16<<30, resource.BinarySI),
		api.DefaultGPUResource: *resource.NewQuantity(gpus, resource.DecimalSI),
	}
	spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: list, Limits: list.DeepCopy()}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{api.LabelGPUSpec: fmt.Sprintf("g%d", gpus), "app": app}},
		Spec:       spec,
	}
}

// fillFleet binds node 0 with two 4-GPU batch Pods (app=small) and node 1
// with eight 1-GPU batch Pods (app=many): the fewest victims for an 8-GPU
// Pod are on node 0.
func fillFleet(t *testing.T, ns, group string) (nodes []string, small, many map[types.UID]string) {
	h := setup(t)
	c := h.client
	nodes = addNodes(t, group, 2, 8)
	for i := range 2 {
		p := tierPod(fmt.Sprintf("small-%d", i), group, api.PriorityClassBatch, "small", 4)
		p.Spec.NodeSelector["kubernetes.io/hostname"] = nodes[0]
		createPod(t, c, ns, p)
	}
	for i := range 8 {
		p := tierPod(fmt.Sprintf("many-%d", i), group, api.PriorityClassBatch, "many", 1)
		p.Spec.NodeSelector["kubernetes.io/hostname"] = nodes[1]
		createPod(t, c, ns, p)
	}
	small, many = map[types.UID]string{}, map[types.UID]string{}
	for _, p := range waitRunning(t, c, ns, "app=small", 2) {
		small[p.UID] = p.Spec.NodeName
	}
	for _, p := range waitRunning(t, c, ns, "app=many", 8) {
		many[p.UID] = p.Spec.NodeName
	}
	return nodes, small, many
}

// A high-priority 8-GPU Pod on a full fleet evicts the fewest
// lower-priority Pods on one node and binds there; a Pod of the victims'
// own priority waits, with an event that says why.
func TestPreemptByPriority(t *testing.T) {
	h := setup(t)
	ctx, c := t.Context(), h.client
	ns := env.Namespace(t, "preempt")
	nodes, small, many := fillFleet(t, ns, "preempt")

	createPod(t, c, ns, tierPod("batch-8", "preempt", api.PriorityClassBatch, "batch-8", 8))
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		msg, err := schedulingEvent(ctx, c, ns, "batch-8")
		require.NoError(t, err)
		require.Contains(t, msg, "no lower-priority Pods to preempt")
	}, 30*time.Second, poll, "the equal-priority Pod's FailedScheduling event")

	preemptOnto(t, ns, "preempt", nodes[0], small, many)
	// kubectl describe: each victim says which Pod it made room for.
	for i := range 2 {
		requireEvent(t, c, ns, fmt.Sprintf("small-%d", i), extender.ReasonPreempted,
			fmt.Sprintf("Preempted by %s/high-8 (priority 2000, this Pod's 100) to make room on %s", ns, nodes[0]))
	}
	b, err := c.CoreV1().Pods(ns).Get(ctx, "batch-8", metav1.GetOptions{})
	require.NoError(t, err)
	require.Empty(t, b.Spec.NodeName, "the equal-priority Pod took capacity")
	metrics, err := h.get("/metrics")
	require.NoError(t, err)
	require.Contains(t, metrics, `runplane_extender_preemptions_total{result="evicted"}`)
}

// A PodDisruptionBudget that allows no disruption keeps its Pods: the
// preemptor takes the node with more, unprotected, victims.
func TestPreemptionHonoursPodDisruptionBudgets(t *testing.T) {
	h := setup(t)
	ctx, c := t.Context(), h.client
	ns := env.Namespace(t, "preempt-pdb")
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "small"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			// minAvailable, not maxUnavailable: these are bare Pods, and the
			// disruption controller needs a scalable owner for the latter.
			MinAvailable: ptr.To(intstr.FromInt32(2)),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "small"}},
		},
	}
	_, err := c.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{})
	require.NoError(t, err)
	nodes, small, many := fillFleet(t, ns, "preempt-pdb")
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		got, err := c.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "small", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, int32(2), got.Status.ExpectedPods)
	}, 30*time.Second, poll, "the disruption controller to count the protected Pods")

	preemptOnto(t, ns, "preempt-pdb", nodes[1], many, small)
}

// preemptOnto creates an 8-GPU high-priority Pod and waits until it binds
// on node (victims terminate with their grace first); then the Pods of
// evicted are gone and those of kept are all there.
func preemptOnto(t *testing.T, ns, group, node string, evicted, kept map[types.UID]string) {
	h := setup(t)
	ctx, c := t.Context(), h.client
	t.Cleanup(func() {
		if t.Failed() {
			logUnbound(t, ns, group)
		}
	})
	createPod(t, c, ns, tierPod("high-8", group, api.PriorityClassWorkloadHigh, "high-8", 8))
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, "high-8", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, node, p.Spec.NodeName)
	}, 2*time.Minute, poll, "the high-priority Pod to bind on %s", node)
	pods, err := listPods(ctx, c, ns, "app in (small,many)")
	require.NoError(t, err)
	left := map[types.UID]bool{}
	for _, p := range pods {
		left[p.UID] = true
	}
	for uid, on := range evicted {
		require.False(t, left[uid], "a victim on %s is still there", on)
	}
	for uid, on := range kept {
		require.True(t, left[uid], "a Pod on %s was evicted (a lower-priority node with more victims, or its budget protects it)", on)
	}
}
