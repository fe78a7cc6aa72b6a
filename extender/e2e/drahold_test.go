package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
)

// blockedHandover makes a DRA hand-over that cannot end in a bind: one
// kwok node, one device, a placeholder holding it; a Pod of high priority
// (not preemptible by a GPU Pod) bound there by name holds a host port the
// GPU Pod "work" asks for too, so kube-scheduler's NodePorts filter keeps
// work Pending while the leader hands it the placeholder's claim (the
// ledger does not look at host ports). It returns once until holds for
// the placeholder's claim and work.
func blockedHandover(t *testing.T, group string, until func(*resourcev1.ResourceClaim, *corev1.Pod) bool) handover {
	t.Helper()
	setup(t)
	c := env.Client()
	group = freeGroup(t, c, group)
	nodes := addDRANodes(t, group, 1, 1, "32")
	ns := draNamespace(t, group)
	draStockDeployment(t, ns, "stock-d1", group, 1)
	ph := waitRunning(t, c, ns, "app=stock-d1", 1)[0]
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		p, err := c.CoreV1().Pods(ns).Get(context.Background(), ph.Name, metav1.GetOptions{})
		require.NoError(t, err)
		ph = *p
		require.Len(t, claimDevices(context.Background(), t, p), 1)
	}, 30*time.Second, poll, "the placeholder's claim holds the device")
	phClaim := *ph.Status.ResourceClaimStatuses[0].ResourceClaimName
	t.Cleanup(func() {
		if t.Failed() {
			logDRA(t, ns)
		}
	})

	port := []corev1.ContainerPort{{ContainerPort: 8080, HostPort: 18080}}
	blocker := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "port-holder"}, Spec: corev1.PodSpec{
		NodeName: nodes[0], PriorityClassName: api.PriorityClassWorkloadHigh, TerminationGracePeriodSeconds: ptr.To[int64](0),
		Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10", Ports: port}},
	}}
	createPod(t, c, ns, blocker)
	work := draPod("work", group, false)
	work.Spec.Containers[0].Ports = port
	work = createPod(t, c, ns, work)
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		claim, err := c.ResourceV1().ResourceClaims(ns).Get(context.Background(), phClaim, metav1.GetOptions{})
		require.NoError(t, err)
		p, err := c.CoreV1().Pods(ns).Get(context.Background(), work.Name, metav1.GetOptions{})
		require.NoError(t, err)
		require.True(t, until(claim, p), "hand-over step not reached")
	}, time.Minute, 20*time.Millisecond, "the placeholder's claim handed to %s", work.Name)
	return handover{group: group, ns: ns, node: nodes[0], ph: ph, claim: phClaim}
}

// handover is what blockedHandover made.
type handover struct {
	group, ns, node string
	ph              corev1.Pod
	claim           string // the placeholder's claim, handed to work
}

// ownedBy: the hand-over's second step, the claim owned by the GPU Pod.
func ownedBy(uid types.UID) func(*resourcev1.ResourceClaim, *corev1.Pod) bool {
	return func(c *resourcev1.ResourceClaim, _ *corev1.Pod) bool {
		ref := metav1.GetControllerOf(c)
		return ref != nil && ref.UID == uid
	}
}

// TestDRAHandoverSurvivesFailedBind: what a takeover's bind leaves when it
// fails after deleting the placeholder (the extender killed before the
// Binding, or the Binding refused): kube-scheduler's Unreserve takes the
// GPU Pod out of the claim's reservedFor, and kube-controller-manager drops
// the deleted placeholder. The claim must stay allocated — held for the
// Pod — and be the Pod's when it binds. (Before the hold, with the
// Unreserve first, kube-controller-manager dropped the last consumer and
// deallocated the claim, and the scheduler could give the device to any
// Pod; with the Pod bound — a Binding whose answer was lost — that was 9
// GPU Pods bound for 8 devices in TestDRATakeoverRaceWithRestart.
// TestDecideHold covers the bound Pod.)
func TestDRAHandoverSurvivesFailedBind(t *testing.T) {
	c := env.Client()
	h := blockedHandover(t, "dra-failed-bind", func(claim *resourcev1.ResourceClaim, p *corev1.Pod) bool {
		// The whole hand-over: the Pod's status names the claim.
		return ownedBy(p.UID)(claim, p) && len(p.Status.ResourceClaimStatuses) == 1 &&
			ptr.Deref(p.Status.ResourceClaimStatuses[0].ResourceClaimName, "") == claim.Name
	})
	ns, ph, claimName := h.ns, h.ph, h.claim
	p, err := c.CoreV1().Pods(ns).Get(t.Context(), "work", metav1.GetOptions{})
	require.NoError(t, err)
	claims := c.ResourceV1().ResourceClaims(ns)
	before, err := claims.Get(t.Context(), claimName, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, before.Status.Allocation)

	// kube-scheduler's Unreserve patch (dynamicresources.go), then the
	// placeholder deleted by the bind: kube-controller-manager then drops
	// the last Pod consumer (in a real failed bind these two race).
	patch := fmt.Sprintf(`{"metadata": {"uid": %q}, "status": {"reservedFor": [{"$patch": "delete", "uid": %q}]}}`, before.UID, p.UID)
	_, err = claims.Patch(t.Context(), claimName, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
	require.NoError(t, err)
	require.NoError(t, c.CoreV1().Pods(ns).Delete(t.Context(), ph.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &ph.UID}}))
	// Barrier: kube-controller-manager has dropped the deleted placeholder.
	var after *resourcev1.ResourceClaim
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		after, err = claims.Get(context.Background(), claimName, metav1.GetOptions{})
		require.NoError(t, err)
		require.False(t, slices.ContainsFunc(after.Status.ReservedFor, func(r resourcev1.ResourceClaimConsumerReference) bool { return r.UID == ph.UID }))
	}, time.Minute, poll, "the deleted placeholder dropped from the claim's consumers")
	require.NotNil(t, after.Status.Allocation, "the GPU Pod's claim lost its allocation: reservedFor %+v", after.Status.ReservedFor)

	// The Pod's next cycle binds it with the claim; the hold goes.
	require.NoError(t, c.CoreV1().Pods(ns).Delete(t.Context(), "port-holder", metav1.DeleteOptions{}))
	require.Equal(t, h.node, waitBound(t, ns, p.Name))
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		got, err := claims.Get(context.Background(), claimName, metav1.GetOptions{})
		require.NoError(t, err)
		var uids []types.UID
		for _, r := range got.Status.ReservedFor {
			uids = append(uids, r.UID)
		}
		require.Equal(t, []types.UID{p.UID}, uids, "reserved for the bound Pod only (no placeholder, no hold)")
		require.NotNil(t, got.Status.Allocation)
		require.Equal(t, before.Status.Allocation.Devices.Results, got.Status.Allocation.Devices.Results)
	}, time.Minute, poll, "the bound Pod's claim allocated and reserved for it")
}

// TestDRATakeoverGPUPodDeleted: a GPU Pod deleted after the placeholder's
// claim was handed to it (owned by it) and before its bind. The
// placeholder must not keep the devices for a Pod that is gone: the leader
// deletes it, the claim goes with the Pod, and a new GPU Pod binds on the
// device. (Before, the placeholder stayed pledged to the gone Pod, holding
// the device for ever: the new Pod stayed Pending.)
func TestDRATakeoverGPUPodDeleted(t *testing.T) {
	c := env.Client()
	var workUID types.UID
	h := blockedHandover(t, "dra-gpu-deleted", func(claim *resourcev1.ResourceClaim, p *corev1.Pod) bool {
		workUID = p.UID
		return ownedBy(p.UID)(claim, p)
	})
	ns, node, ph := h.ns, h.node, h.ph
	require.NoError(t, c.CoreV1().Pods(ns).Delete(t.Context(), "work", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &workUID}}))
	next := createPod(t, c, ns, draPod("next", h.group, false))
	require.Equal(t, node, waitBound(t, ns, next.Name))
	bound, err := c.CoreV1().Pods(ns).Get(t.Context(), next.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{node + "/gpu-0"}, claimDevices(t.Context(), t, bound), "the new GPU Pod has the device")
	pods, err := listPods(t.Context(), c, ns, "app=stock-d1")
	require.NoError(t, err)
	assert.False(t, slices.ContainsFunc(pods, func(p corev1.Pod) bool { return p.UID == ph.UID }), "the placeholder of the gone Pod still exists")
}
