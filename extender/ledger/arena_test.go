package ledger

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// TestNodeArena: names and nodes handed out stay intact while later ones
// fill and overflow their blocks (one name longer than a whole block).
func TestNodeArena(t *testing.T) {
	var a nodeArena
	var want []string
	var nodes []*node
	for i := range 3 * nodeBlock {
		name := fmt.Sprintf("node-%d-%s", i, strings.Repeat("x", i%40))
		if i == nodeBlock+1 {
			name = strings.Repeat("long", nameBlock)
		}
		want = append(want, name)
		nodes = append(nodes, a.newNode(name))
	}
	seen := map[*node]bool{}
	for i, n := range nodes {
		require.Equal(t, want[i], n.name, "node %d", i)
		require.False(t, seen[n], "node %d shares its struct", i)
		seen[n] = true
	}
}

// TestFilterManyNodes: a ledger of more nodes than one arena block holds
// answers for each of them.
func TestFilterManyNodes(t *testing.T) {
	l := New(Options{})
	var names []string
	for i := range 3*nodeBlock + 7 {
		names = append(names, fmt.Sprintf("n%d", i))
		l.UpsertNode(testNode(names[i], 1+int64(i%2)))
		if i%2 == 0 {
			l.UpsertPod(testPod(fmt.Sprintf("busy-%d", i), "gpu", "g1", names[i], 1, corev1.PodRunning))
		}
	}
	res := l.Filter(RequestFor(testPod("x", "gpu", "g1", "", 1, corev1.PodPending), false), names, false)
	require.Len(t, res.Feasible, len(names)/2)
	for i, n := range names {
		if i%2 == 0 {
			require.Contains(t, res.Reasons()[n], "insufficient", n)
		} else {
			require.NotContains(t, res.Reasons(), n)
		}
	}
}
