package extender

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
)

// A preemption is counted "planned" once per nomination, not at every
// scheduling cycle of the waiting Pod, and each victim the extender evicts
// gets an Event naming the Pod it made room for.
func TestPreemptionCountedOnceAndVictimEvent(t *testing.T) {
	victim := pod("victim", api.LabelGPUSpec, "g1", "n")
	victim.Spec.Priority = ptr.To(int32(100))
	high := pod("high", api.LabelGPUSpec, "g1", "")
	high.Spec.Priority = ptr.To(int32(2000))
	e := testExtender(t, true, victim, high)
	rec := events.NewFakeRecorder(10)
	e.events = rec
	e.preempts = make(chan preemption, 4)
	e.ledger.UpsertNode(node("n", 1))
	e.ledger.UpsertPod(victim)

	planned := func() float64 { return testutil.ToFloat64(e.metrics.preemptions.WithLabelValues("planned")) }
	for cycle := range 3 {
		res := call(t, e.handleFilter, http.MethodPost, filterBody(t, high, "n"))
		require.Equal(t, http.StatusOK, res.Code)
		// An error, so the scheduler retries the waiting Pod after its
		// back-off rather than waiting for an event (README, Leader restarts).
		var out extenderv1.ExtenderFilterResult
		require.NoError(t, json.Unmarshal(res.Body.Bytes(), &out))
		require.Contains(t, out.Error, "node n: preempting 1 lower-priority Pod(s) (ns/victim)", "cycle %d", cycle)
		require.Equal(t, 1.0, planned(), "cycle %d: one nomination", cycle)
	}
	p := <-e.preempts
	require.NoError(t, e.evictPlan(t.Context(), p))
	require.Len(t, rec.Events, 1, "one Event per victim")
	require.Equal(t, "Normal Preempted Preempted by ns/high (priority 2000, this Pod's 100) to make room on n", <-rec.Events)
}

// A nomination gets its reservation before any victim is evicted: a Pod
// bound to the node at creation, in the extender's namespace, sized and
// prioritised like the preemptor, with its finalizer, deleted at once
// (the finalizer holds it for every scheduler); the victim is evicted
// once, however many cycles the preemptor waits.
func TestReservationBeforeEviction(t *testing.T) {
	victim := pod("victim", api.LabelGPUSpec, "g1", "n")
	victim.Spec.Priority = ptr.To(int32(100))
	high := pod("high", api.LabelGPUSpec, "g1", "")
	high.Spec.Priority = ptr.To(int32(2000))
	high.Spec.PriorityClassName = api.PriorityClassWorkloadHigh
	high.Spec.Tolerations = []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}
	e := testExtender(t, true, victim, high)
	e.cfg.Namespace, e.cfg.ReservationImage = api.DefaultNamespace, api.DefaultPauseImage
	e.preempts, e.reserveKick = make(chan preemption, 4), make(chan struct{}, 1)
	e.ledger.UpsertNode(node("n", 1))
	e.ledger.UpsertPod(victim)
	e.ledger.UpsertPod(high)

	var order []string
	var made *corev1.Pod
	c := e.client.(*fake.Clientset)
	c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "eviction" {
			order = append(order, "evict")
			return false, nil, nil
		}
		made = a.(k8stesting.CreateAction).GetObject().(*corev1.Pod).DeepCopy()
		order = append(order, "reserve")
		return false, nil, nil
	})
	c.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		order = append(order, "delete "+a.(k8stesting.DeleteAction).GetName())
		return false, nil, nil
	})
	for range 3 {
		res := call(t, e.handleFilter, http.MethodPost, filterBody(t, high, "n"))
		require.Equal(t, http.StatusOK, res.Code)
	}
	require.Len(t, e.preempts, 1, "one plan to evict, however many cycles")
	p := <-e.preempts
	e.syncReservations(t.Context())
	require.NoError(t, e.evictPlan(t.Context(), p))
	name := ReservationName(string(high.UID))
	require.Equal(t, []string{"reserve", "delete " + name, "evict"}, order)

	require.NotNil(t, made)
	require.Equal(t, api.DefaultNamespace, made.Namespace)
	require.Equal(t, "n", made.Spec.NodeName)
	require.Equal(t, string(high.UID), made.Labels[api.LabelReservedFor])
	require.Equal(t, "ns/high", made.Annotations[api.AnnotationReservedFor])
	require.Equal(t, []string{api.FinalizerReservation}, made.Finalizers)
	require.Equal(t, api.PriorityClassWorkloadHigh, made.Spec.PriorityClassName)
	require.Equal(t, high.Spec.Tolerations, made.Spec.Tolerations)
	require.False(t, *made.Spec.AutomountServiceAccountToken)
	require.Len(t, made.Spec.Containers, 1)
	res := made.Spec.Containers[0].Resources
	want := high.Spec.Containers[0].Resources.Requests
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, api.DefaultGPUResource} {
		q := want[r]
		require.Zero(t, q.Cmp(res.Requests[r]), "request %s", r)
	}
	gpu := want[api.DefaultGPUResource]
	require.Zero(t, gpu.Cmp(res.Limits[api.DefaultGPUResource]), "an extended resource's limit")
	_, cpuLimit := res.Limits[corev1.ResourceCPU]
	require.False(t, cpuLimit)
}

// A plan the evictor's queue cannot take is dropped with its nomination:
// its victims were marked evicted, so a nomination kept would be renewed
// with nothing to evict at every try, holding the node's room for good
// while nobody is evicted (review finding). The next try plans afresh and
// evicts.
func TestDroppedPlanEndsItsNomination(t *testing.T) {
	victim := pod("victim", api.LabelGPUSpec, "g1", "n")
	victim.Spec.Priority = ptr.To(int32(100))
	high := pod("high", api.LabelGPUSpec, "g1", "")
	high.Spec.Priority = ptr.To(int32(2000))
	e := testExtender(t, true, victim, high)
	e.preempts = make(chan preemption) // nobody receives: every plan is dropped
	e.ledger.UpsertNode(node("n", 1))
	e.ledger.UpsertPod(victim)

	res := call(t, e.handleFilter, http.MethodPost, filterBody(t, high, "n"))
	require.Equal(t, http.StatusOK, res.Code)
	require.Equal(t, 1.0, testutil.ToFloat64(e.metrics.preemptions.WithLabelValues("dropped")))

	e.preempts = make(chan preemption, 1)
	res = call(t, e.handleFilter, http.MethodPost, filterBody(t, high, "n"))
	require.Equal(t, http.StatusOK, res.Code)
	require.Len(t, e.preempts, 1, "the next try plans again")
	p := <-e.preempts
	assert.False(t, p.plan.Renewed, "a new nomination, not the dropped one renewed")
	assert.Len(t, p.plan.Evict, 1, "the victim is evicted this time")
}
