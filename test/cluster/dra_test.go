package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/runplane/runplane/test/cluster"
)

// TestSchedulerAllocatesDRAGPUs: a kwok node whose GPUs are published only
// through its ResourceSlice (no nvidia.com/gpu allocatable) takes Pods with
// a claim from a template: the real kube-scheduler allocates each claim a
// distinct device of the node's pool, and a Pod beyond the node's devices
// stays Pending.
func TestSchedulerAllocatesDRAGPUs(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	ns := env.Namespace(t, "")
	c := env.Client()
	taint := corev1.Taint{Key: "runplane.io/test", Value: ns, Effect: corev1.TaintEffectNoSchedule}
	node := cluster.Node{Name: "dra-0", DRAGPUs: 2, NVLinkDomain: "d0", Taints: []corev1.Taint{taint}}
	require.NoError(t, env.AddNodes(ctx, node))
	t.Cleanup(func() {
		bg := context.Background()
		_ = c.ResourceV1().ResourceSlices().Delete(bg, cluster.GPUSlice(node.Name, 0, "").Name, metav1.DeleteOptions{})
		_ = c.CoreV1().Nodes().Delete(bg, node.Name, metav1.DeleteOptions{})
	})
	n, err := c.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	require.NoError(t, err)
	_, hasGPU := n.Status.Allocatable["nvidia.com/gpu"]
	assert.False(t, hasGPU, "a DRA-only node has no nvidia.com/gpu allocatable")

	_, err = c.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, cluster.GPUClaimTemplate(ns, "runplane-d1", 1), metav1.CreateOptions{})
	require.NoError(t, err)
	for i := range 3 {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Namespace: ns},
			Spec: corev1.PodSpec{
				Containers:   []corev1.Container{{Name: "main", Image: "main"}},
				Tolerations:  []corev1.Toleration{{Key: taint.Key, Operator: corev1.TolerationOpEqual, Value: taint.Value, Effect: taint.Effect}},
				NodeSelector: map[string]string{"kubernetes.io/hostname": node.Name},
			},
		}
		cluster.UseClaimTemplate(&pod.Spec, "runplane-d1")
		_, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	// Barrier: two Pods bound (the node has two devices).
	var bound []corev1.Pod
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		bound = bound[:0]
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" {
				bound = append(bound, p)
			}
		}
		return len(bound) == 2, nil
	})
	require.NoError(t, err, "two Pods with DRA GPU claims bound")
	devices := map[string]string{}
	for _, p := range bound {
		assert.Equal(t, node.Name, p.Spec.NodeName)
		require.Len(t, p.Status.ResourceClaimStatuses, 1, "pod %s: its generated claim", p.Name)
		claim, err := c.ResourceV1().ResourceClaims(ns).Get(ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
		require.NoError(t, err)
		require.NotNil(t, claim.Status.Allocation, "pod %s: claim %s allocated", p.Name, claim.Name)
		require.Len(t, claim.Status.Allocation.Devices.Results, 1)
		r := claim.Status.Allocation.Devices.Results[0]
		assert.Equal(t, cluster.GPUDriver, r.Driver)
		assert.Equal(t, node.Name, r.Pool, "the pool is the node's name")
		assert.Empty(t, devices[r.Device], "device %s allocated to %s and %s", r.Device, devices[r.Device], p.Name)
		devices[r.Device] = p.Name
		if assert.Len(t, claim.Status.ReservedFor, 1) {
			assert.Equal(t, p.UID, claim.Status.ReservedFor[0].UID, "claim reserved for its Pod")
		}
	}
	// The third Pod: the scheduler says why it waits.
	for _, name := range []string{"p0", "p1", "p2"} {
		p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		if p.Spec.NodeName == "" {
			waitForEvent(t, ctx, ns, name, "FailedScheduling", "cannot allocate all claims")
		}
	}
}
