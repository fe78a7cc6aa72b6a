package ledger

import (
	"fmt"
	"math/rand"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// BenchmarkFilter is the ledger's share of a scheduling cycle at 5,000
// nodes holding 50,000 1-GPU Pods (2 of every 10 placeholders; 6 GPUs of
// 16 free on each node): one Filter of a 1-GPU Pod on every node, in the
// order the nodes were first seen and shuffled (kube-scheduler filters
// nodes in parallel, so its list is not in any one order), and of a Pod
// that must take a placeholder.
func BenchmarkFilter(b *testing.B) {
	const nodes, podsPerNode = 5000, 10
	l := New(Options{})
	names := make([]string, nodes)
	for i := range names {
		names[i] = fmt.Sprintf("node-%04d", i)
		n := testNode(names[i], 16)
		n.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("256")
		n.Status.Allocatable[corev1.ResourceMemory] = resource.MustParse("1Ti")
		l.UpsertNode(n)
		for j := range podsPerNode {
			kind := "gpu"
			if j < 2 {
				kind = "stock"
			}
			l.UpsertPod(testPod(fmt.Sprintf("p-%d-%d", i, j), kind, "g1", names[i], 1, corev1.PodRunning))
		}
	}
	shuffled := append([]string(nil), names...)
	rand.New(rand.NewSource(1)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	incoming := testPod("incoming", "gpu", "g1", "", 1, corev1.PodPending)
	for _, order := range []struct {
		name  string
		names []string
		// required: the Pod's spec is Required, so it fits only by
		// taking a placeholder: every node's are checked (node.pick).
		required bool
	}{{"first-seen", names, false}, {"shuffled", shuffled, false}, {"required", names, true}} {
		req := RequestFor(incoming, order.required)
		b.Run(order.name, func(b *testing.B) {
			var res FilterResult
			for b.Loop() {
				if res = FilterAppend(l, res, req, order.names, false); len(res.Feasible) != nodes {
					b.Fatalf("%d feasible nodes, want %d", len(res.Feasible), nodes)
				}
			}
		})
	}
}
