package ledger

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
)

// foreignPod is a Pod of the default scheduler (priority 0) on node, of
// gpus GPUs and cpu CPUs, owned by the ReplicaSet owner.
func foreignPod(name, node, owner string, gpus, cpu int64) *corev1.Pod {
	return foreignPodAt(name, node, owner, gpus, cpu, time.Time{})
}

// foreignPodAt is foreignPod created at born.
func foreignPodAt(name, node, owner string, gpus, cpu int64, born time.Time) *corev1.Pod {
	p := testPod(name, "", "", node, gpus, corev1.PodRunning)
	p.CreationTimestamp = metav1.NewTime(born)
	p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = *resource.NewQuantity(cpu, resource.DecimalSI)
	p.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = *resource.NewQuantity(1<<30, resource.BinarySI)
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: owner, UID: types.UID("rs-" + owner), Controller: ptr.To(true)}}
	return withPriority(p, 0)
}

func victimNames(p *Preemption) []string {
	if p == nil {
		return nil
	}
	var out []string
	for _, v := range p.Victims {
		out = append(out, v.Name)
	}
	return out
}

// TestVictimRules: victims free what the Pod is short of, a replacement
// of a victim is never a victim of the same Pod again, and the caps hold.
func TestVictimRules(t *testing.T) {
	tests := []struct {
		name        string
		opts        Options
		pods        []*corev1.Pod
		gpus        int64
		wantVictims []string
		wantCapped  string
		wantReason  string
	}{
		{
			// 8 GPUs, 6 held by a GPU Pod; CPU is plenty: the CPU-only
			// Pods free nothing the preemptor needs.
			name: "a CPU-only Pod frees nothing where GPUs are missing",
			pods: []*corev1.Pod{foreignPod("cpu-1", "a", "web", 0, 4), foreignPod("cpu-2", "a", "web", 0, 4), foreignPod("gpu-1", "a", "inf", 6, 8)},
			gpus: 4, wantVictims: []string{"gpu-1"},
		},
		{
			name:       "only CPU-only Pods: no plan",
			pods:       []*corev1.Pod{foreignPod("cpu-1", "a", "web", 0, 4), withPriority(testPod("own", "gpu", "g8", "a", 8, corev1.PodRunning), 1000)},
			gpus:       4,
			wantReason: "preempting every lower-priority Pod would not make room",
		},
		{
			name:       "cap per Pod",
			opts:       Options{MaxEvictionsPerPod: 2},
			pods:       []*corev1.Pod{foreignPod("g1", "a", "x", 2, 1), foreignPod("g2", "a", "y", 2, 1), foreignPod("g3", "a", "z", 2, 1), foreignPod("g4", "a", "w", 2, 1)},
			gpus:       6,
			wantCapped: CapPod, wantReason: "this Pod reached its cap of evictions per minute",
		},
		{
			name:       "cap per node",
			opts:       Options{MaxEvictionsPerNode: 1},
			pods:       []*corev1.Pod{foreignPod("g1", "a", "x", 4, 1), foreignPod("g2", "a", "y", 4, 1)},
			gpus:       8,
			wantCapped: CapNode, wantReason: "the node reached its cap of evictions per minute",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := New(tt.opts)
			l.UpsertNode(bigNode("a", 8))
			for _, p := range tt.pods {
				l.UpsertPod(p)
			}
			in := withPriority(testPod("in", "gpu", "g4", "", tt.gpus, corev1.PodPending), 1000)
			res := l.Filter(RequestFor(in, false), []string{"a"}, true)
			require.ElementsMatch(t, tt.wantVictims, victimNames(res.Preemption))
			require.Equal(t, tt.wantCapped, res.Capped)
			if tt.wantReason != "" {
				require.Contains(t, res.Reasons()["a"], tt.wantReason)
			}
		})
	}
}

// TestChurnStops: the probe's loop. A victim of the default scheduler is
// evicted for a GPU Pod, its ReplicaSet's replacement lands on the freed
// room before the GPU Pod binds (no reservation here): the replacement is
// not evicted again for that Pod, and Pods of other schedulers on that
// node are left alone for the back-off, then eligible again.
func TestChurnStops(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	l := New(Options{Clock: clk, PreemptBackoff: time.Minute})
	l.UpsertNode(bigNode("a", 8))
	l.UpsertPod(foreignPodAt("inf-1", "a", "inf", 8, 8, clk.Now().Add(-time.Hour)))
	in := withPriority(testPod("in", "gpu", "g8", "", 8, corev1.PodPending), 1000)
	filter := func() FilterResult { return l.Filter(RequestFor(in, false), []string{"a"}, true) }

	require.Equal(t, []string{"inf-1"}, victimNames(filter().Preemption))
	l.DeletePod("uid-inf-1")
	l.UpsertPod(foreignPodAt("inf-2", "a", "inf", 8, 8, clk.Now())) // its replacement took the room
	res := filter()
	require.Nil(t, res.Preemption, "the replacement of a victim is not evicted again for the same Pod")

	// Another ReplicaSet's Pod on the node: the back-off holds it too.
	l.DeletePod("uid-inf-2")
	l.UpsertPod(foreignPod("batch-1", "a", "batch", 8, 8))
	res = filter()
	require.Nil(t, res.Preemption)
	require.Contains(t, res.Reasons()["a"], "not preempted again for a while")

	clk.Step(2 * time.Minute)
	require.Equal(t, []string{"batch-1"}, victimNames(filter().Preemption), "after the back-off")

	// Once it binds, another Pod's preemption starts afresh.
	l.DeletePod("uid-batch-1")
	require.Equal(t, "a", filter().Chosen)
	bound := in.DeepCopy()
	bound.Spec.NodeName = "a"
	l.UpsertPod(bound)
	l.mu.Lock()
	require.Empty(t, l.preempts, "a bound Pod's record goes")
	l.mu.Unlock()
}

// TestBackoffAfterFailedEviction: a nomination whose evictions of
// another scheduler's Pods end without a bind there (the eviction failed)
// backs the node off for those Pods; runplane's own are still eligible.
func TestBackoffAfterFailedEviction(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	l := New(Options{Clock: clk, PreemptBackoff: time.Minute})
	l.UpsertNode(bigNode("a", 8))
	l.UpsertPod(foreignPod("inf-1", "a", "inf", 4, 4))
	l.UpsertPod(withPriority(testPod("batch", "gpu", "g4", "a", 4, corev1.PodRunning), 100))
	in := withPriority(testPod("in", "gpu", "g8", "", 8, corev1.PodPending), 1000)
	res := l.Filter(RequestFor(in, false), []string{"a"}, true)
	require.ElementsMatch(t, []string{"inf-1", "batch"}, victimNames(res.Preemption))
	l.Unnominate(in.UID)

	small := withPriority(testPod("small", "gpu", "g4", "", 4, corev1.PodPending), 1000)
	res = l.Filter(RequestFor(small, false), []string{"a"}, true)
	require.Equal(t, []string{"batch"}, victimNames(res.Preemption), "the default scheduler's Pod is backed off")
}

// reservationPod is the reservation the extender makes for in on node.
func reservationPod(in *corev1.Pod, node string) *corev1.Pod {
	r := testPod("resv-"+in.Name, "", "", node, 0, corev1.PodRunning)
	r.Namespace = api.DefaultNamespace
	r.Labels[api.LabelReservedFor] = string(in.UID)
	r.Finalizers = []string{api.FinalizerReservation}
	r.DeletionTimestamp = &metav1.Time{Time: time.Now()} // deleted at once: held by its finalizer
	r.Spec.Containers[0].Resources.Requests = in.Spec.Containers[0].Resources.Requests.DeepCopy()
	r.Spec.Priority = in.Spec.Priority
	return r
}

// TestReservation: a nomination asks for a reservation; once it is
// bound the room is counted once, no other Pod takes it (the default
// scheduler sees it assigned), and the preemptor takes it at bind like a
// placeholder once its victims are gone.
func TestReservation(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	l := New(Options{Clock: clk, ReservationNamespace: api.DefaultNamespace, NominationTTL: time.Minute})
	l.UpsertNode(bigNode("a", 8))
	l.UpsertPod(foreignPod("inf-1", "a", "inf", 8, 8))
	in := withPriority(testPod("in", "gpu", "g8", "", 8, corev1.PodPending), 1000)
	l.UpsertPod(in)
	require.NotNil(t, l.Filter(RequestFor(in, false), []string{"a"}, true).Preemption)

	create, remove := l.Reservations()
	require.Empty(t, remove)
	require.Len(t, create, 1)
	require.Equal(t, ReservationRequest{For: in.UID, Namespace: "ns", Name: "in", Node: "a", Requests: l.unpack(l.pack(PodRequests(in)))}, create[0])

	r := reservationPod(in, "a")
	r.CreationTimestamp = metav1.NewTime(clk.Now())
	l.UpsertPod(r)
	create, _ = l.Reservations()
	require.Empty(t, create, "made already")
	l.DeletePod("uid-inf-1")
	require.Equal(t, int64(0), l.Free("a").Scalar[gpu], "the reservation and the nomination count once")

	// Another Pod, even of a higher priority and the same spec, cannot
	// take the reserved room; a reservation of another namespace is no
	// reservation.
	other := withPriority(testPod("other", "gpu", "g8", "", 8, corev1.PodPending), 1000)
	res := l.Filter(RequestFor(other, false), []string{"a"}, true)
	require.Empty(t, res.Feasible)
	require.Nil(t, res.Preemption, "a reservation is not preempted by a Pod of its own priority")

	res = l.Filter(RequestFor(in, false), []string{"a"}, true)
	require.Equal(t, "a", res.Chosen)
	require.NotNil(t, res.Claim)
	require.True(t, res.Claim.Reservation)
	require.Equal(t, r.UID, res.Claim.UID)
	ph, err := l.BeginBind(RequestFor(in, false), "a")
	require.NoError(t, err)
	require.Equal(t, r.UID, ph.UID)
	l.EndBind(in.UID, true, true)
	l.DeletePod(r.UID)
	bound := in.DeepCopy()
	bound.Spec.NodeName = "a"
	l.UpsertPod(bound)
	require.Equal(t, int64(0), l.Free("a").Scalar[gpu])
	create, remove = l.Reservations()
	require.Empty(t, create)
	require.Empty(t, remove)
}

// TestReservationLifecycle: stale reservations are deleted — preemptor
// bound elsewhere or gone, nomination expired or dropped, or, after a
// restart with no nomination, older than NominationTTL — and a new
// leader's preemptor takes its reservation. A reservation a kubelet
// rejected is deleted and made again only once the room is free.
func TestReservationLifecycle(t *testing.T) {
	setup := func(t *testing.T) (*Ledger, *clocktesting.FakeClock, *corev1.Pod, *corev1.Pod) {
		clk := clocktesting.NewFakeClock(time.Now())
		l := New(Options{Clock: clk, ReservationNamespace: api.DefaultNamespace, NominationTTL: time.Minute})
		l.UpsertNode(bigNode("a", 8))
		l.UpsertNode(bigNode("b", 8))
		l.UpsertPod(foreignPod("inf-a", "a", "inf", 8, 8))
		l.UpsertPod(foreignPod("inf-b", "b", "inf", 8, 8))
		in := withPriority(testPod("in", "gpu", "g8", "", 8, corev1.PodPending), 1000)
		l.UpsertPod(in)
		require.NotNil(t, l.Filter(RequestFor(in, false), []string{"a", "b"}, true).Preemption)
		r := reservationPod(in, "a")
		r.CreationTimestamp = metav1.NewTime(clk.Now())
		l.UpsertPod(r)
		return l, clk, in, r
	}
	removed := func(l *Ledger) []types.UID {
		_, remove := l.Reservations()
		var out []types.UID
		for _, p := range remove {
			out = append(out, p.UID)
		}
		return out
	}
	t.Run("preemptor bound elsewhere", func(t *testing.T) {
		l, _, in, r := setup(t)
		b := in.DeepCopy()
		b.Spec.NodeName = "b"
		l.UpsertPod(b)
		require.Equal(t, []types.UID{r.UID}, removed(l))
	})
	t.Run("preemptor deleted", func(t *testing.T) {
		l, _, in, r := setup(t)
		l.DeletePod(in.UID)
		require.Equal(t, []types.UID{r.UID}, removed(l))
	})
	t.Run("nomination expired", func(t *testing.T) {
		l, clk, _, r := setup(t)
		require.Empty(t, removed(l))
		clk.Step(2 * time.Minute)
		l.Sweep()
		require.Equal(t, []types.UID{r.UID}, removed(l))
	})
	t.Run("eviction failed", func(t *testing.T) {
		l, _, in, r := setup(t)
		l.Unnominate(in.UID)
		require.Equal(t, []types.UID{r.UID}, removed(l))
	})
	t.Run("new leader", func(t *testing.T) {
		_, clk, in, r := setup(t)
		l := New(Options{Clock: clk, ReservationNamespace: api.DefaultNamespace, NominationTTL: time.Minute})
		l.UpsertNode(bigNode("a", 8))
		l.UpsertPod(r) // listed before its preemptor
		l.UpsertPod(in)
		require.Empty(t, removed(l), "kept for its preemptor")
		other := withPriority(testPod("other", "gpu", "g8", "", 8, corev1.PodPending), 1000)
		require.Empty(t, l.Filter(RequestFor(other, false), []string{"a"}, true).Feasible)
		res := l.Filter(RequestFor(in, false), []string{"a"}, true)
		require.Equal(t, "a", res.Chosen)
		require.Equal(t, r.UID, res.Claim.UID)

		clk.Step(2 * time.Minute)
		l.Sweep()
		l2 := New(Options{Clock: clk, ReservationNamespace: api.DefaultNamespace, NominationTTL: time.Minute})
		l2.UpsertNode(bigNode("a", 8))
		l2.UpsertPod(r)
		l2.UpsertPod(in)
		require.Equal(t, []types.UID{r.UID}, removed(l2), "no nomination and older than NominationTTL")
	})
	t.Run("rejected by the kubelet", func(t *testing.T) {
		l, _, _, r := setup(t)
		failed := r.DeepCopy()
		failed.Status.Phase = corev1.PodFailed
		l.UpsertPod(failed)
		create, remove := l.Reservations()
		require.Empty(t, create, "its name is still taken")
		require.Equal(t, r.UID, remove[0].UID)
		l.DeletePod(r.UID)
		create, _ = l.Reservations()
		require.Empty(t, create, "not again while the victim holds the room")
		l.DeletePod("uid-inf-a")
		create, _ = l.Reservations()
		require.Len(t, create, 1, "the room is free")
	})
}

// TestVictimsPromisedOnce: a victim planned for one Pod (its eviction
// under way) is room that Pod's nomination holds: a second preemptor
// neither counts it nor evicts it again, and a Pod's renewed plan does not
// evict its own victims twice.
func TestVictimsPromisedOnce(t *testing.T) {
	l := New(Options{})
	l.UpsertNode(bigNode("a", 8))
	for i := range 4 {
		l.UpsertPod(foreignPod(fmt.Sprintf("inf-%d", i), "a", fmt.Sprintf("rs-%d", i), 2, 2))
	}
	p1 := withPriority(testPod("p1", "gpu", "g4", "", 4, corev1.PodPending), 1000)
	p2 := withPriority(testPod("p2", "gpu", "g4", "", 4, corev1.PodPending), 1000)
	res := l.Filter(RequestFor(p1, false), []string{"a"}, true)
	first := victimNames(res.Preemption)
	require.Len(t, first, 2)
	require.Len(t, res.Preemption.Evict, 2)
	res = l.Filter(RequestFor(p1, false), []string{"a"}, true)
	require.True(t, res.Preemption.Renewed)
	require.Empty(t, res.Preemption.Evict, "evicted already")

	res = l.Filter(RequestFor(p2, false), []string{"a"}, true)
	second := victimNames(res.Preemption)
	require.Len(t, second, 2)
	for _, v := range second {
		require.NotContains(t, first, v, "p1's victim")
	}
	p3 := withPriority(testPod("p3", "gpu", "g4", "", 4, corev1.PodPending), 1000)
	res = l.Filter(RequestFor(p3, false), []string{"a"}, true)
	require.Nil(t, res.Preemption, "every victim's room is promised")
}
