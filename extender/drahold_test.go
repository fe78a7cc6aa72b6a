package extender

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	listersresourcev1 "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/extender/ledger"
)

// draClaimObj is a claim of the namespace "ns" owned by Pod owner, allocated
// (one device) if allocated, reserved for consumers.
func draClaimObj(name string, owner *corev1.Pod, allocated bool, consumers ...resourcev1.ResourceClaimConsumerReference) *resourcev1.ResourceClaim {
	c := &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), ResourceVersion: "1",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}}},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpu",
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.nvidia.com", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}}}}},
		Status: resourcev1.ResourceClaimStatus{ReservedFor: consumers},
	}
	if allocated {
		c.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
			{Request: "gpu", Driver: "gpu.nvidia.com", Pool: "n", Device: "gpu-0"}}}}
	}
	return c
}

func consumer(p *corev1.Pod) resourcev1.ResourceClaimConsumerReference {
	return resourcev1.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID}
}

// TestDecideHold: the hold goes only once the GPU Pod is bound and the
// placeholder is no consumer any more (the Pod reserved again if its bind's
// Unreserve took it out: the Binding had landed), or once the Pod is gone —
// then with the placeholder, when the claim was already the Pod's.
func TestDecideHold(t *testing.T) {
	ph := pod("ph", api.LabelStock, "d1", "n")
	p := pod("p", api.LabelGPUSpec, "d1", "")
	bound := pod("p", api.LabelGPUSpec, "d1", "n")
	deleting := p.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{}
	hold := holdFor(p)
	naming := p.DeepCopy()
	naming.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To("c")}}
	phGone := map[types.UID]bool{ph.UID: true}
	now := metav1.Now()
	tests := []struct {
		name  string
		claim *resourcev1.ResourceClaim
		pod   *corev1.Pod
		gone  map[types.UID]bool // the consumers that no longer exist
		want  holdAction
	}{
		{"hand-over under way", draClaimObj("c", p, true, consumer(ph), consumer(p), hold), p, nil, holdAction{keep: true, dropGone: true}},
		{"hand-over done, the Pod not reserved yet", draClaimObj("c", p, true, consumer(ph), hold), naming, nil, holdAction{keep: true, reserve: true, dropGone: true}},
		{"hand-over before the owner change", draClaimObj("c", ph, true, consumer(ph), hold), naming, nil, holdAction{keep: true, dropGone: true}},
		{"bound, the placeholder still there", draClaimObj("c", p, true, consumer(ph), consumer(p), hold), bound, nil, holdAction{keep: true}},
		{"bound, the placeholder deleted", draClaimObj("c", p, true, consumer(ph), consumer(p), hold), bound, phGone, holdAction{reserve: true, dropGone: true}},
		{"bound, Unreserve took the Pod out", draClaimObj("c", p, true, hold), bound, nil, holdAction{reserve: true, dropGone: true}},
		{"bound and reserved", draClaimObj("c", p, true, consumer(p), hold), bound, nil, holdAction{reserve: true, dropGone: true}},
		{"bound with a claim of its own", draClaimObj("c", ph, true, consumer(ph), consumer(p), hold), bound, nil, holdAction{dropPod: true}},
		{"gone after the owner change", draClaimObj("c", p, true, consumer(ph), consumer(p), hold), nil, nil, holdAction{dropPod: true, deletePlaceholders: true}},
		{"being deleted after the owner change", draClaimObj("c", p, true, consumer(ph), consumer(p), hold), deleting, nil, holdAction{dropPod: true, deletePlaceholders: true}},
		{"gone before the owner change", draClaimObj("c", ph, true, consumer(ph), consumer(p), hold), nil, nil, holdAction{dropPod: true}},
		{"bound, Unreserve took the Pod out, the placeholder deleted", draClaimObj("c", p, true, consumer(ph), hold), bound, phGone, holdAction{reserve: true, dropGone: true}},
	}
	// A tenant rewrites the kind of its claim's controller reference
	// (kube-scheduler and the kubelet compare UIDs only) once its Pod is
	// bound with it: the Pod's reference must stay, or kube-controller-
	// manager deallocates the device the Pod runs on once the placeholder
	// goes (review finding: the reservation was dropped).
	rewritten := draClaimObj("c", p, true, consumer(ph), consumer(p), hold)
	rewritten.OwnerReferences[0].Kind = "pod"
	boundNaming := bound.DeepCopy()
	boundNaming.Status.ResourceClaimStatuses = naming.Status.ResourceClaimStatuses
	unowned := draClaimObj("c", p, true, consumer(ph), consumer(p), hold)
	unowned.OwnerReferences = nil
	tests = append(tests, []struct {
		name  string
		claim *resourcev1.ResourceClaim
		pod   *corev1.Pod
		gone  map[types.UID]bool
		want  holdAction
	}{
		{"bound, the owner reference's kind rewritten", rewritten, boundNaming, phGone, holdAction{reserve: true, dropGone: true}},
		{"bound naming the claim, no owner reference left", unowned, boundNaming, phGone, holdAction{}},
	}...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, decideHold(tt.claim, p.UID, tt.pod, tt.gone))
		})
	}
	going := draClaimObj("c", p, true, consumer(ph), consumer(p), hold)
	going.DeletionTimestamp = &now
	assert.Equal(t, holdAction{dropPod: true, deletePlaceholders: true}, decideHold(going, p.UID, p, nil), "a claim being deleted: nobody finishes the hand-over")
	other := pod("p", api.LabelGPUSpec, "d1", "")
	other.UID = "another"
	assert.Equal(t, holdAction{dropPod: true, deletePlaceholders: true}, decideHold(draClaimObj("c", p, true, consumer(ph), hold), p.UID, other, nil), "a new Pod of the same name is not the one held for")
}

// draStockExtender is testExtender with the claims a DRA hand-over reads.
func draStockExtender(t *testing.T, pods []*corev1.Pod, claims ...*resourcev1.ResourceClaim) *Extender {
	t.Helper()
	e := testExtender(t, true, pods...)
	objs := objects(pods)
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, holdIndex: holdIndexFunc})
	for _, c := range claims {
		require.NoError(t, idx.Add(c))
		objs = append(objs, c)
	}
	e.client = fake.NewClientset(objs...)
	e.draStock = &draStock{claims: listersresourcev1.NewResourceClaimLister(idx), held: idx}
	return e
}

// TestHandClaimRechecks: a placeholder's claim is handed over only while it
// is the placeholder's alone. A hand-over to p1 whose later step failed
// left the claim reserved (and held) for p1, or owned by p1; the ledger's
// view may lag that: a second Pod p2 must not be handed the same claim
// (before, it was — reserved for both, owned by p2 — and p1 or p2 stayed
// Pending on a claim that was not its own). Nor a claim being deleted.
func TestHandClaimRechecks(t *testing.T) {
	ph := pod("ph", api.LabelStock, "d1", "n")
	ph.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To("ph-gpu")}}
	p1, p2 := pod("p1", api.LabelGPUSpec, "d1", ""), pod("p2", api.LabelGPUSpec, "d1", "")
	own := draClaimObj("p2-gpu", p2, false)
	deleting := draClaimObj("ph-gpu", ph, true, consumer(ph))
	deleting.DeletionTimestamp = &metav1.Time{}
	tests := []struct {
		name  string
		claim *resourcev1.ResourceClaim
		want  string
	}{
		{"reserved and held for p1", draClaimObj("ph-gpu", ph, true, consumer(ph), consumer(p1), holdFor(p1)), "reserved for pods p1 too"},
		{"owned by p1", draClaimObj("ph-gpu", p1, true, consumer(ph), consumer(p1), holdFor(p1)), "not its own any more"},
		{"being deleted", deleting, "being deleted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := draStockExtender(t, []*corev1.Pod{ph, p1, p2}, tt.claim, own)
			err := e.handClaim(t.Context(), p2, own, ledger.Placeholder{UID: ph.UID, Namespace: "ns", Name: "ph", Node: "n"}, "gpu")
			require.ErrorContains(t, err, tt.want)
			got, err := e.client.ResourceV1().ResourceClaims("ns").Get(t.Context(), "ph-gpu", metav1.GetOptions{})
			require.NoError(t, err)
			assert.Equal(t, tt.claim.Status.ReservedFor, got.Status.ReservedFor, "the claim was changed")
			assert.Equal(t, tt.claim.OwnerReferences, got.OwnerReferences, "the claim was changed")
		})
	}

	// The placeholder's alone: handed (reserved and held for p2, owned by it).
	e := draStockExtender(t, []*corev1.Pod{ph, p1, p2}, draClaimObj("ph-gpu", ph, true, consumer(ph)), own)
	require.NoError(t, e.handClaim(t.Context(), p2, own, ledger.Placeholder{UID: ph.UID, Namespace: "ns", Name: "ph", Node: "n"}, "gpu"))
	got, err := e.client.ResourceV1().ResourceClaims("ns").Get(t.Context(), "ph-gpu", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, []resourcev1.ResourceClaimConsumerReference{consumer(ph), holdFor(p2), consumer(p2)}, got.Status.ReservedFor,
		"held first, reserved last (the status change that requeues p2)")
	assert.Equal(t, p2.UID, metav1.GetControllerOf(got).UID)
}

// TestHandedToChecksSpec: a hand-over under way is finished only with a
// claim held for the Pod that asks for what the Pod's own claim asks for.
func TestHandedToChecksSpec(t *testing.T) {
	ph := pod("ph", api.LabelStock, "d1", "n")
	p := pod("p", api.LabelGPUSpec, "d1", "")
	own := draClaimObj("p-gpu", p, false)
	held := draClaimObj("ph-gpu", ph, true, consumer(ph), consumer(p), holdFor(p))
	e := draStockExtender(t, []*corev1.Pod{ph, p}, held, own)
	assert.Equal(t, "ph-gpu", ptr.Deref(e.handedTo(p, own), resourcev1.ResourceClaim{}).Name, "held for p: finish it")

	other := held.DeepCopy()
	other.Spec.Devices.Requests[0].Exactly.Count = 2
	e = draStockExtender(t, []*corev1.Pod{ph, p}, other, own)
	assert.Nil(t, e.handedTo(p, own), "a claim asking for other devices")

	reservedOnly := draClaimObj("ph-gpu", ph, true, consumer(ph), consumer(p))
	e = draStockExtender(t, []*corev1.Pod{ph, p}, reservedOnly, own)
	assert.Nil(t, e.handedTo(p, own), "reserved for p, but no hold: a hand-over the leader did not begin")
}
