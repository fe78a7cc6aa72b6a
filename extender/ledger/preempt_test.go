package ledger

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/internal/priorityclass"
)

// bigNode has room for 8 one-GPU testPods' CPU and memory.
func bigNode(name string, gpus int64) *corev1.Node {
	n := testNode(name, gpus)
	n.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("128")
	n.Status.Allocatable[corev1.ResourceMemory] = resource.MustParse("1Ti")
	return n
}

func withPriority(p *corev1.Pod, prio int32) *corev1.Pod {
	p.Spec.Priority = ptr.To(prio)
	return p
}

func TestPreemption(t *testing.T) {
	type pod struct {
		name, kind, node string
		gpus             int64
		prio             int32
		terminating      bool
		protected        bool
	}
	tests := []struct {
		name        string
		nodes       map[string]int64
		pods        []pod
		gpus        int64
		prio        int32
		never       bool
		wantNode    string   // "" when no preemption
		wantVictims []string // names
		wantWaiting int
		wantReason  map[string]string // node -> substring of its failure
	}{
		{
			name:  "fewest victims on one node",
			nodes: map[string]int64{"a": 8, "b": 8},
			pods: []pod{
				{name: "a1", kind: "gpu", node: "a", gpus: 4, prio: 100}, {name: "a2", kind: "gpu", node: "a", gpus: 4, prio: 100},
				{name: "b1", kind: "gpu", node: "b", gpus: 8, prio: 100},
			},
			gpus: 8, prio: 1000,
			wantNode: "b", wantVictims: []string{"b1"},
		},
		{
			name:  "only as many as needed, lowest priority first",
			nodes: map[string]int64{"a": 8},
			pods: []pod{
				{name: "low", kind: "gpu", node: "a", gpus: 4, prio: 10}, {name: "mid", kind: "gpu", node: "a", gpus: 4, prio: 100},
			},
			gpus: 4, prio: 1000,
			wantNode: "a", wantVictims: []string{"low"},
		},
		{
			name:  "placeholders of other specs are never victims",
			nodes: map[string]int64{"a": 8, "b": 8},
			pods: []pod{
				{name: "ph1", kind: "stock", node: "a", gpus: 4, prio: -1000}, {name: "ph2", kind: "stock", node: "a", gpus: 4, prio: -1000},
				{name: "b1", kind: "gpu", node: "b", gpus: 8, prio: 100},
			},
			gpus: 8, prio: 1000,
			wantNode: "b", wantVictims: []string{"b1"},
			wantReason: map[string]string{"a": "no lower-priority Pods to preempt"},
		},
		{
			// runplane-system: a tier a cluster admin adds above it still
			// never evicts runplane's own Pods (here one that holds GPUs,
			// so it would otherwise be the victim).
			name:  "runplane's own Pods are never victims",
			nodes: map[string]int64{"a": 8},
			pods:  []pod{{name: "own", kind: "gpu", node: "a", gpus: 8, prio: priorityclass.SystemValue}},
			gpus:  8, prio: priorityclass.SystemValue + 10,
			wantReason: map[string]string{"a": "no lower-priority Pods to preempt"},
		},
		{
			name:  "equal priority is never preempted",
			nodes: map[string]int64{"a": 8},
			pods:  []pod{{name: "a1", kind: "gpu", node: "a", gpus: 8, prio: 1000}},
			gpus:  8, prio: 1000,
			wantReason: map[string]string{"a": "no lower-priority Pods to preempt"},
		},
		{
			name:  "not enough room even evicting all lower",
			nodes: map[string]int64{"a": 8},
			pods:  []pod{{name: "hi", kind: "gpu", node: "a", gpus: 4, prio: 5000}, {name: "lo", kind: "gpu", node: "a", gpus: 4, prio: 10}},
			gpus:  8, prio: 1000,
			wantReason: map[string]string{"a": "would not make room"},
		},
		{
			name:  "preemptionPolicy Never",
			nodes: map[string]int64{"a": 8},
			pods:  []pod{{name: "a1", kind: "gpu", node: "a", gpus: 8, prio: 10}},
			gpus:  8, prio: 1000, never: true,
			wantReason: map[string]string{"a": "insufficient nvidia.com/gpu"},
		},
		{
			name:  "a PodDisruptionBudget protects",
			nodes: map[string]int64{"a": 8, "b": 8},
			pods: []pod{
				{name: "a1", kind: "gpu", node: "a", gpus: 8, prio: 10, protected: true},
				{name: "b1", kind: "gpu", node: "b", gpus: 4, prio: 100}, {name: "b2", kind: "gpu", node: "b", gpus: 4, prio: 100},
			},
			gpus: 8, prio: 1000,
			wantNode: "b", wantVictims: []string{"b1", "b2"},
			wantReason: map[string]string{"a": "no lower-priority Pods to preempt"},
		},
		{
			name:  "terminating Pods are room that is coming",
			nodes: map[string]int64{"a": 8},
			pods:  []pod{{name: "going", kind: "gpu", node: "a", gpus: 8, prio: 10, terminating: true}},
			gpus:  8, prio: 1000,
			wantNode: "a", wantWaiting: 1,
			wantReason: map[string]string{"a": "waiting for 1 terminating Pod(s) on the node to be gone"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := New(Options{})
			var names []string
			for n, g := range tt.nodes {
				l.UpsertNode(bigNode(n, g))
				names = append(names, n)
			}
			for _, p := range tt.pods {
				obj := withPriority(testPod(p.name, p.kind, "g1", p.node, p.gpus, corev1.PodRunning), p.prio)
				if p.terminating {
					obj.DeletionTimestamp = &metav1.Time{Time: time.Now()}
				}
				if p.protected {
					obj.Labels["app"] = "protected"
				}
				l.UpsertPod(obj)
			}
			in := withPriority(testPod("in", "gpu", "g8", "", tt.gpus, corev1.PodPending), tt.prio)
			if tt.never {
				in.Spec.PreemptionPolicy = ptr.To(corev1.PreemptNever)
			}
			req := RequestFor(in, false)
			req.Protected = func(_ string, labels map[string]string) bool { return labels["app"] == "protected" }
			res := l.Filter(req, names, true)
			require.Empty(t, res.Feasible)
			for n, want := range tt.wantReason {
				require.Contains(t, res.Reasons()[n], want)
			}
			if tt.wantNode == "" {
				require.Nil(t, res.Preemption)
				_, _, ok := l.Assumed(in.UID)
				require.False(t, ok, "no preemption, no nomination")
				return
			}
			require.NotNil(t, res.Preemption)
			require.Equal(t, tt.wantNode, res.Preemption.Node)
			var got []string
			for _, v := range res.Preemption.Victims {
				got = append(got, v.Name)
			}
			require.ElementsMatch(t, tt.wantVictims, got)
			require.Equal(t, tt.wantWaiting, res.Preemption.Waiting)
			node, state, ok := l.Assumed(in.UID)
			require.True(t, ok)
			require.Equal(t, Nominated, state)
			require.Equal(t, tt.wantNode, node)
		})
	}
}

// TestNominationHoldsTheRoom: while a preemptor's victims terminate, a
// lower-priority Pod does not take the room they free, and once they are
// gone the preemptor fits its nominated node; the nomination expires.
func TestNominationHoldsTheRoom(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	l := New(Options{Clock: clk, NominationTTL: time.Minute})
	l.UpsertNode(bigNode("a", 8))
	l.UpsertNode(bigNode("b", 8))
	l.UpsertPod(withPriority(testPod("va", "gpu", "g8", "a", 8, corev1.PodRunning), 10))
	l.UpsertPod(withPriority(testPod("vb", "gpu", "g8", "b", 8, corev1.PodRunning), 100))

	high := withPriority(testPod("high", "gpu", "g8", "", 8, corev1.PodPending), 1000)
	res := l.Filter(RequestFor(high, false), []string{"a", "b"}, true)
	require.NotNil(t, res.Preemption)
	require.Equal(t, "a", res.Preemption.Node, "the lower-priority victim")
	require.Equal(t, []Victim{{UID: types.UID("uid-va"), Namespace: "ns", Name: "va", Priority: 10}}, res.Preemption.Victims)
	require.False(t, res.Preemption.Renewed, "a new nomination")

	// The next scheduling cycle, before the victim is gone, plans the same
	// nomination again: renewed, not a new one.
	res = l.Filter(RequestFor(high, false), []string{"a", "b"}, true)
	require.NotNil(t, res.Preemption)
	require.Equal(t, "a", res.Preemption.Node)
	require.True(t, res.Preemption.Renewed, "the same nomination, planned again")
	// A dropped nomination (its eviction failed) is new when planned again.
	l.Unnominate(high.UID)
	res = l.Filter(RequestFor(high, false), []string{"a", "b"}, true)
	require.NotNil(t, res.Preemption)
	require.False(t, res.Preemption.Renewed, "a nomination made anew")

	// The victim is evicted and gone.
	l.DeletePod("uid-va")
	low := withPriority(testPod("low", "gpu", "g8", "", 8, corev1.PodPending), 50)
	res = l.Filter(RequestFor(low, false), []string{"a", "b"}, true)
	require.Empty(t, res.Feasible, "the preemptor's nomination holds node a")
	require.Contains(t, res.Reasons()["a"], "insufficient nvidia.com/gpu")

	res = l.Filter(RequestFor(high, false), []string{"a", "b"}, true)
	require.Equal(t, []string{"a"}, res.Feasible)
	require.Equal(t, "a", res.Chosen)

	// A nomination nobody follows up expires.
	l2 := New(Options{Clock: clk, NominationTTL: time.Minute})
	l2.UpsertNode(bigNode("a", 8))
	l2.UpsertPod(withPriority(testPod("va", "gpu", "g8", "a", 8, corev1.PodRunning), 10))
	require.NotNil(t, l2.Filter(RequestFor(high, false), []string{"a"}, true).Preemption)
	clk.Step(2 * time.Minute)
	l2.Sweep()
	_, _, ok := l2.Assumed(high.UID)
	require.False(t, ok)
}

// TestPreemptionOnlyWhenLeading: a follower (no reservation) plans nothing.
func TestPreemptionOnlyWhenLeading(t *testing.T) {
	l := New(Options{})
	l.UpsertNode(bigNode("a", 8))
	l.UpsertPod(withPriority(testPod("va", "gpu", "g8", "a", 8, corev1.PodRunning), 10))
	high := withPriority(testPod("high", "gpu", "g8", "", 8, corev1.PodPending), 1000)
	res := l.Filter(RequestFor(high, false), []string{"a"}, false)
	require.Nil(t, res.Preemption)
	require.Contains(t, res.Reasons()["a"], "insufficient")
}
