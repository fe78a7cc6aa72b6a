package ledger

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

const draClass = "gpu.nvidia.com"

var draGPU = DRAResource(draClass)

// draNode is a node whose GPUs are devices of one ResourceSlice only (no
// nvidia.com/gpu allocatable).
func draNode(l *Ledger, name string, gpus int) {
	l.UpsertNode(testNode(name, 0))
	devs := make([]Device, gpus)
	for i := range devs {
		devs[i] = Device{ID: devID(name, i), Classes: []string{draClass}}
	}
	l.SetSlice(name+"-slice", name, devs)
}

func devID(node string, i int) string {
	return DeviceID("gpu.nvidia.com", node, fmt.Sprintf("gpu-%d", i))
}

// draPod is a Pod of a DRA spec: 4 cpu, no extended resources, its claim
// named in its status (the resourceclaim controller made it).
func draPod(name, kind, spec, node string) *corev1.Pod {
	p := testPod(name, kind, spec, node, 0, corev1.PodRunning)
	p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: *resource.NewQuantity(4, resource.DecimalSI)}
	p.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To(name + "-gpu")}}
	return p
}

// draClaim is the claim of draPod; devices empty: not allocated yet.
func draClaim(pod string, devices ...string) Claim {
	c := Claim{UID: types.UID("claim-" + pod), Namespace: "ns", Name: pod + "-gpu", Pods: []types.UID{types.UID("uid-" + pod)}, Devices: devices}
	if len(devices) == 0 {
		c.Needs = map[string]int64{draClass: 1}
	}
	return c
}

func draRequest(l *Ledger, pod *corev1.Pod) Request {
	req := RequestFor(pod, false)
	l.AddClaimNeeds(&req, pod)
	return req
}

func TestDRADevicesCountPerDevice(t *testing.T) {
	l := New(Options{})
	draNode(l, "a", 2)
	total, used := l.Devices("a", draClass)
	assert.Equal(t, [2]int64{2, 0}, [2]int64{total, used})

	l.UpsertPod(draPod("p1", "", "", "a"))
	l.UpsertClaim(draClaim("p1", devID("a", 0)))
	// A second claim naming the same device (a takeover's hand-over)
	// does not use a second device.
	l.UpsertClaim(Claim{UID: "other", Namespace: "ns", Name: "other", Devices: []string{devID("a", 0)}})
	_, used = l.Devices("a", draClass)
	assert.EqualValues(t, 1, used, "a device two claims name counts once")

	x := draPod("x", "gpu", "d1", "")
	l.UpsertClaim(draClaim("x"))
	req := draRequest(l, x)
	assert.EqualValues(t, 1, req.Requests.Scalar[draGPU], "an unallocated claim asks for its devices")
	res := l.Filter(req, []string{"a"}, false)
	assert.Equal(t, []string{"a"}, res.Feasible)

	l.UpsertClaim(Claim{UID: "c2", Namespace: "ns", Name: "c2", Devices: []string{devID("a", 1)}})
	res = l.Filter(req, []string{"a"}, false)
	require.Len(t, res.Failed, 1)
	assert.Contains(t, res.Failed[0].Reason, "insufficient "+string(draGPU))

	l.DeleteClaim("c2")
	l.DeleteClaim("other")
	_, used = l.Devices("a", draClass)
	assert.EqualValues(t, 1, used, "the device p1's claim still names")
	l.SetSlice("a-slice", "a", nil)
	total, used = l.Devices("a", draClass)
	assert.Equal(t, [2]int64{0, 0}, [2]int64{total, used}, "slice gone: no devices")
}

// The scheduler allocates a Pod's claim (PreBind) before the extender's
// bind: from then on the claim counts the device, the Pod's assumption no
// longer does.
func TestDRAAssumptionStopsCountingAllocatedClaim(t *testing.T) {
	l := New(Options{})
	draNode(l, "a", 2)
	x := draPod("x", "gpu", "d1", "")
	l.UpsertPod(x)
	l.UpsertClaim(draClaim("x"))
	res := l.Filter(draRequest(l, x), []string{"a"}, true)
	require.Equal(t, "a", res.Chosen)
	_, err := l.BeginBind(draRequest(l, x), "a")
	require.NoError(t, err)
	l.UpsertClaim(draClaim("x", devID("a", 0)))

	y := draPod("y", "gpu", "d1", "")
	l.UpsertClaim(draClaim("y"))
	res = l.Filter(draRequest(l, y), []string{"a"}, false)
	assert.Equal(t, []string{"a"}, res.Feasible, "one device left: x's is counted once")
}

// A same-spec DRA placeholder's devices are capacity its spec's GPU Pod
// may take; a preemption's victims are the Pods holding devices.
func TestDRAStockAndVictims(t *testing.T) {
	l := New(Options{})
	draNode(l, "a", 1)
	l.UpsertPod(draPod("ph", "stock", "d1", "a"))
	l.UpsertClaim(draClaim("ph", devID("a", 0)))

	x := draPod("x", "gpu", "d1", "")
	l.UpsertClaim(draClaim("x"))
	res := l.Filter(draRequest(l, x), []string{"a"}, false)
	assert.Equal(t, []string{"a"}, res.Feasible, "the placeholder's device is x's to take")
	other := draPod("o", "gpu", "d2", "")
	l.UpsertClaim(draClaim("o"))
	res = l.Filter(draRequest(l, other), []string{"a"}, false)
	require.Len(t, res.Failed, 1, "another spec's Pod may not take it")

	// Preemption: a CPU-only Pod frees no device; a Pod holding one does.
	m := New(Options{})
	draNode(m, "b", 1)
	cpuOnly := foreignPod("web", "b", "", 0, 4)
	m.UpsertPod(cpuOnly)
	holder := draPod("inf", "", "", "b")
	holder.Spec.SchedulerName = "default-scheduler"
	m.UpsertPod(holder)
	m.UpsertClaim(draClaim("inf", devID("b", 0)))
	hi := draPod("hi", "gpu", "d1", "")
	hi.Spec.Priority = ptr.To[int32](1000)
	m.UpsertClaim(draClaim("hi"))
	res = m.Filter(draRequest(m, hi), []string{"b"}, true)
	require.NotNil(t, res.Preemption, "a preemption frees the device: %+v", res.Failed)
	assert.Equal(t, []string{"inf"}, victimNames(res.Preemption))
}

// A DRA takeover: TakeStock reserves a placeholder for a Pod whose claim
// is not allocated while no node has a free device; once the placeholder's
// claim is handed to the Pod, the Pod fits only by taking that
// placeholder, on its node, and no other Pod may take it.
func TestDRAHandover(t *testing.T) {
	l := New(Options{})
	draNode(l, "a", 1)
	draNode(l, "b", 1)
	l.UpsertPod(draPod("ph", "stock", "d1", "a"))
	l.UpsertClaim(draClaim("ph", devID("a", 0)))
	l.UpsertPod(draPod("busy", "", "", "b"))
	l.UpsertClaim(draClaim("busy", devID("b", 0)))

	p := draPod("p", "gpu", "d1", "")
	l.UpsertPod(p)
	l.UpsertClaim(draClaim("p"))
	ph := l.TakeStock(draRequest(l, p), []string{"a", "b"})
	require.NotNil(t, ph, "no free device anywhere: take the placeholder")
	assert.Equal(t, "ph", ph.Name)
	assert.Nil(t, l.TakeStock(draRequest(l, p), []string{"a", "b"}), "reserved already")

	// The placeholder's claim is handed to p (owned by p, reserved for
	// both), p's own claim deleted; b frees its device.
	handed := draClaim("ph", devID("a", 0))
	handed.Pods = []types.UID{"uid-p", "uid-ph"}
	l.UpsertClaim(handed)
	l.DeleteClaim("claim-p")
	l.DeleteClaim("claim-busy")
	_, used := l.Devices("a", draClass)
	assert.EqualValues(t, 1, used, "the handed-over device counts once")

	q := draPod("q", "gpu", "d1", "")
	l.UpsertPod(q)
	l.UpsertClaim(draClaim("q"))
	l.Unreserve(p.UID) // p's reservation expired: the claim still holds the device
	res := l.Filter(draRequest(l, q), []string{"a"}, false)
	assert.Empty(t, res.Feasible, "the placeholder is p's: q may not take it")

	res = l.Filter(draRequest(l, p), []string{"a", "b"}, true)
	assert.Equal(t, []string{"a"}, res.Feasible, "p goes where its device is, not to b's free one")
	require.NotNil(t, res.Claim, "p takes the placeholder whose device it holds")
	assert.Equal(t, "ph", res.Claim.Name)
	got, err := l.BeginBind(draRequest(l, p), "a")
	require.NoError(t, err)
	require.NotNil(t, got)
	assert.Equal(t, "ph", got.Name)

	// Stock of another namespace: its claim cannot be the Pod's.
	m := New(Options{})
	draNode(m, "c", 1)
	other := draPod("ph2", "stock", "d1", "c")
	other.Namespace = "stock-ns"
	m.UpsertPod(other)
	m.UpsertClaim(draClaim("ph2", devID("c", 0)))
	z := draPod("z", "gpu", "d1", "")
	m.UpsertPod(z)
	m.UpsertClaim(draClaim("z"))
	assert.Nil(t, m.TakeStock(draRequest(m, z), []string{"c"}), "a placeholder of another namespace")

	// Preferred with a free device somewhere: the scheduler allocates it.
	r := draPod("r", "gpu", "d1", "")
	l.UpsertPod(r)
	l.UpsertClaim(draClaim("r"))
	assert.Nil(t, l.TakeStock(draRequest(l, r), []string{"a", "b"}))
}

// TestDRAClaimOfAnotherNamespace: a tenant may write any Pod's UID into
// its own claim's ownerReferences (the claim a Pod of its own uses, so it
// is allocated); a claim of another namespace never counts as that Pod's:
// it neither blocks the Pod nor pledges, nor adds to what evicting it
// frees.
func TestDRAClaimOfAnotherNamespace(t *testing.T) {
	l := New(Options{})
	draNode(l, "a", 2)
	ph := draPod("ph", "stock", "d1", "a")
	l.UpsertPod(ph)
	l.UpsertClaim(draClaim("ph", devID("a", 0)))
	x := draPod("x", "", "", "a")
	x.Namespace, x.UID = "tenant-a", "uid-x"
	l.UpsertPod(x)
	forged := draClaim("x", devID("a", 1))
	forged.Namespace = "tenant-a"
	forged.Pods = []types.UID{"uid-x", "uid-p", "uid-ph"}
	l.UpsertClaim(forged)

	p := draPod("p", "gpu", "d1", "")
	l.UpsertPod(p)
	l.UpsertClaim(draClaim("p"))
	req := draRequest(l, p)
	res := l.Filter(req, []string{"a"}, true)
	assert.Equal(t, []string{"a"}, res.Feasible, "%v", res.Failed)
	require.NotNil(t, res.Claim, "p takes its namespace's placeholder: the forged claim pledged it to nobody")
	assert.Equal(t, "ph", res.Claim.Name)
}

// TestDRAPledgeOnlyToLivePods: a placeholder whose claim was handed to a
// GPU Pod is that Pod's while it lives; once the Pod is deleted (before its
// bind) the pledge names no Pod, the placeholder stays untakeable (its
// claim goes with the gone Pod), and the devices come back when the
// leader deletes the placeholder. A GPU Pod seen after the claim it shares
// gets the pledge then (informers deliver claims and Pods in any order).
func TestDRAPledgeOnlyToLivePods(t *testing.T) {
	l := New(Options{})
	draNode(l, "a", 1)
	l.UpsertPod(draPod("ph", "stock", "d1", "a"))
	handed := draClaim("ph", devID("a", 0))
	handed.Pods = []types.UID{"uid-p", "uid-ph"}
	l.UpsertClaim(handed)
	assert.Equal(t, pledgedAway, l.pods["uid-ph"].pledged, "p not seen yet: nobody may take ph")
	p := draPod("p", "gpu", "d1", "")
	l.UpsertPod(p)
	assert.Equal(t, types.UID("uid-p"), l.pods["uid-ph"].pledged, "p seen after the claim")
	checkIndex(t, l) // the index's copy of the pledge follows (review finding: it kept "(gone)")

	q := draPod("q", "gpu", "d1", "")
	l.UpsertPod(q)
	l.UpsertClaim(draClaim("q"))
	assert.Nil(t, l.TakeStock(draRequest(l, q), []string{"a"}), "ph is p's")

	l.DeletePod(p.UID)
	assert.Equal(t, pledgedAway, l.pods["uid-ph"].pledged, "a pledge names live Pods only")
	checkIndex(t, l)
	assert.Nil(t, l.TakeStock(draRequest(l, q), []string{"a"}), "ph's claim goes with p: q may not take it")

	// The leader deletes ph; the claim goes with its owner.
	l.DeletePod("uid-ph")
	l.DeleteClaim(handed.UID)
	res := l.Filter(draRequest(l, q), []string{"a"}, false)
	assert.Equal(t, []string{"a"}, res.Feasible, "the device is free again")
}

// TestDRAStockOfAnotherNamespace: a DRA placeholder is stock of its own
// namespace (its claim can be handed only there). A GPU Pod of another
// tenant that must take stock (Required), or that is short of CPU while a
// device is free, never takes it: that would delete the other tenant's
// stock for nothing of its own (review finding: Filter answered
// Claim = tenant-a/ph).
func TestDRAStockOfAnotherNamespace(t *testing.T) {
	l := New(Options{})
	draNode(l, "a", 2)
	ph := draPod("ph", "stock", "d1", "a")
	ph.Namespace = "tenant-a"
	l.UpsertPod(ph)
	held := draClaim("ph", devID("a", 0))
	held.Namespace = "tenant-a"
	l.UpsertClaim(held)

	// requiredIn is a GPU Pod of d1 in ns, with its unallocated claim,
	// that binds only by taking stock.
	requiredIn := func(name, ns string) Request {
		p := draPod(name, "gpu", "d1", "")
		p.Namespace = ns
		l.UpsertPod(p)
		own := draClaim(name)
		own.Namespace = ns
		l.UpsertClaim(own)
		req := draRequest(l, p)
		req.Required = true
		return req
	}
	res := l.Filter(requiredIn("p", "tenant-b"), []string{"a"}, true)
	assert.Nil(t, res.Claim, "tenant-b's Pod took tenant-a's placeholder")
	assert.Empty(t, res.Feasible, "stock Required, and the only placeholder is another namespace's")

	res = l.Filter(requiredIn("q", "tenant-a"), []string{"a"}, true)
	require.NotNil(t, res.Claim, "tenant-a's Pod takes its own stock: %v", res.Failed)
	assert.Equal(t, "ph", res.Claim.Name)
}
