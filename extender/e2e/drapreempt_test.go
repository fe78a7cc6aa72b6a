package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/extender"
)

// TestDRAPreemptDevices: two DRA-only nodes of two GPUs each, every
// device held by runplane-batch GPU Pods of a DRA spec (a Deployment of
// four, one tenant namespace). A runplane-workload-high GPU Pod of the
// same spec in another tenant namespace — whose DynamicResources filter
// rejects every node, so kube-scheduler never asks the extender — gets a
// device: the leader plans the preemption out of the scheduling cycle,
// one victim is evicted (once), the Pod binds with that victim's device,
// and the victim's replacement from its Deployment does not take it: it
// waits, refused. (Before, the Pod stayed Pending: "cannot allocate all
// claims" on every node, no victim.)
func TestDRAPreemptDevices(t *testing.T) {
	setup(t)
	group := "dra-preempt"
	addDRANodes(t, group, 2, 2, "64")
	batchNS, highNS := draNamespace(t, group+"-batch"), draNamespace(t, group+"-high")
	c := env.Client()
	t.Cleanup(func() {
		if t.Failed() {
			logDRA(t, batchNS)
			logDRA(t, highNS)
			logUnbound(t, highNS, group)
		}
	})
	batch := draPod("", group, false)
	batch.Spec.PriorityClassName = api.PriorityClassBatch
	draDeployment(t, batchNS, "batch", 4, batch)
	victims := map[types.UID]string{} // victim -> its device
	var running []corev1.Pod
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		running = withDevices(t, batchNS, "app=batch")
		require.Len(t, running, 4, "batch Pods bound with a device")
	}, 2*time.Minute, poll, "four batch Pods holding every device")
	for _, p := range running {
		victims[p.UID] = claimDevices(t.Context(), t, &p)[0]
	}

	high := draPod("high", group, false)
	high.Spec.PriorityClassName = api.PriorityClassWorkloadHigh
	createPod(t, c, highNS, high)
	var device string
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		got := withDevices(t, highNS, api.LabelGPUSpec)
		require.Len(t, got, 1, "the high-priority Pod bound with a device")
		device = claimDevices(context.Background(), t, &got[0])[0]
	}, 2*time.Minute, poll, "the high-priority Pod to preempt and bind")

	// Exactly one victim went, the one whose device the Pod has, and the
	// extender evicted it once.
	pods, err := listPods(t.Context(), c, batchNS, "app=batch")
	require.NoError(t, err)
	present := map[types.UID]bool{}
	for _, p := range pods {
		present[p.UID] = true
	}
	var gone []types.UID
	for uid, dev := range victims {
		if !present[uid] {
			gone = append(gone, uid)
			assert.Equal(t, dev, device, "the Pod got the evicted victim's device")
		}
	}
	require.Len(t, gone, 1, "victims evicted")
	evs, err := c.EventsV1().Events(batchNS).List(t.Context(), metav1.ListOptions{FieldSelector: "reason=" + extender.ReasonPreempted})
	require.NoError(t, err)
	perVictim := map[types.UID]int{}
	for _, e := range evs.Items {
		perVictim[e.Regarding.UID]++
		assert.Contains(t, e.Note, fmt.Sprintf("Preempted by %s/high", highNS))
	}
	assert.Equal(t, map[types.UID]int{gone[0]: 1}, perVictim, "Preempted Events")

	// Barrier: the victim's replacement was tried by the scheduler and
	// refused; it holds no device, and no device has two claims.
	var replacement string
	for _, p := range pods {
		if _, old := victims[p.UID]; !old {
			replacement = p.Name
		}
	}
	require.NotEmpty(t, replacement, "the Deployment replaced its victim")
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		msg, err := schedulingEvent(context.Background(), c, batchNS, replacement)
		require.NoError(t, err)
		require.NotEmpty(t, msg)
	}, time.Minute, poll, "the replacement's FailedScheduling event")
	p, err := c.CoreV1().Pods(batchNS).Get(t.Context(), replacement, metav1.GetOptions{})
	require.NoError(t, err)
	require.Empty(t, p.Spec.NodeName, "the replacement took the freed device")
	require.Empty(t, claimDevices(t.Context(), t, p), "the replacement's claim has a device")
	holders := map[string][]string{}
	for _, ns := range []string{batchNS, highNS} {
		byDevice, _, err := deviceHolders(t.Context(), ns)
		require.NoError(t, err)
		for dev, claims := range byDevice {
			holders[dev] = append(holders[dev], claims...)
		}
	}
	for dev, claims := range holders {
		assert.Len(t, claims, 1, "device %s allocated to %v", dev, claims)
	}
}

// withDevices lists the namespace's bound, live Pods of selector whose
// claim has a device.
func withDevices(t require.TestingT, ns, selector string) []corev1.Pod {
	all, err := listPods(context.Background(), env.Client(), ns, selector)
	require.NoError(t, err)
	var out []corev1.Pod
	for _, p := range all {
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil && len(claimDevices(context.Background(), t, &p)) == 1 {
			out = append(out, p)
		}
	}
	return out
}
