package ledger

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
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

	q := draPod("q", "gpu", "d1", "")
	l.UpsertPod(q)
	l.UpsertClaim(draClaim("q"))
	assert.Nil(t, l.TakeStock(draRequest(l, q), []string{"a"}), "ph is p's")

	l.DeletePod(p.UID)
	assert.Equal(t, pledgedAway, l.pods["uid-ph"].pledged, "a pledge names live Pods only")
	assert.Nil(t, l.TakeStock(draRequest(l, q), []string{"a"}), "ph's claim goes with p: q may not take it")

	// The leader deletes ph; the claim goes with its owner.
	l.DeletePod("uid-ph")
	l.DeleteClaim(handed.UID)
	res := l.Filter(draRequest(l, q), []string{"a"}, false)
	assert.Equal(t, []string{"a"}, res.Feasible, "the device is free again")
}

// PlanPreemption: a high-priority DRA Pod short of devices (no stock, no
// free device) is nominated where evicting one lower-priority holder
// frees one; a plan again renews the nomination and evicts nobody new;
// the nomination holds the device once its holder is gone, so a Pod of
// the victim's priority (its replacement) neither fits nor preempts,
// while the nominated Pod fits there. The reservation of the nomination
// requests no device.
func TestDRAPlanPreemption(t *testing.T) {
	l := New(Options{Clock: clocktesting.NewFakePassiveClock(time.Unix(0, 0))})
	draNode(l, "a", 2)
	for i := range 2 {
		v := draPod(fmt.Sprintf("batch-%d", i), "gpu", "d1", "a")
		v.Spec.Priority = ptr.To[int32](100)
		l.UpsertPod(v)
		l.UpsertClaim(draClaim(v.Name, devID("a", i)))
	}
	hi := draPod("hi", "gpu", "d1", "")
	hi.Spec.Priority = ptr.To[int32](2000)
	l.UpsertPod(hi)
	l.UpsertClaim(draClaim("hi"))

	never := draRequest(l, hi)
	never.Preempt = false
	p, _ := l.PlanPreemption(never, []string{"a"})
	assert.Nil(t, p, "a Pod that may not preempt")

	p, capped := l.PlanPreemption(draRequest(l, hi), []string{"a"})
	require.NotNil(t, p, "capped %q", capped)
	assert.Equal(t, "a", p.Node)
	assert.Len(t, p.Victims, 1, "one device is short: one victim")
	assert.False(t, p.Renewed)
	require.Len(t, p.Evict, 1)
	node, state, ok := l.Assumed(hi.UID)
	require.True(t, ok)
	assert.Equal(t, "a", node)
	assert.Equal(t, Nominated, state)
	create, _ := l.Reservations()
	require.Len(t, create, 1)
	assert.Zero(t, create[0].Requests.Scalar[draGPU], "the reservation requests no device")
	assert.EqualValues(t, 4000, create[0].Requests.MilliCPU, "the reservation holds the Pod's CPU")

	again, _ := l.PlanPreemption(draRequest(l, hi), []string{"a"})
	require.NotNil(t, again)
	assert.True(t, again.Renewed)
	assert.Equal(t, p.Victims, again.Victims)
	assert.Empty(t, again.Evict, "no victim evicted twice")

	// The victim goes; kube-scheduler sees its claim deallocated before
	// the ledger does and runs the Pod's filter: the nomination stays,
	// waiting for the gone Pod's claim.
	victim := p.Victims[0]
	l.DeletePod(victim.UID)
	res := l.Filter(draRequest(l, hi), []string{"a"}, true)
	require.NotNil(t, res.Preemption, "the nomination lapsed: %+v", res.Failed)
	assert.Empty(t, res.Preemption.Victims)
	assert.Equal(t, 1, res.Preemption.Waiting, "the gone victim's claim")
	// Its claim goes; its replacement comes.
	l.DeleteClaim(types.UID("claim-" + victim.Name))
	repl := draPod("batch-new", "gpu", "d1", "")
	repl.Spec.Priority = ptr.To[int32](100)
	l.UpsertPod(repl)
	l.UpsertClaim(draClaim("batch-new"))
	res = l.Filter(draRequest(l, repl), []string{"a"}, true)
	assert.Empty(t, res.Feasible, "the replacement took the nominated device")
	rp, _ := l.PlanPreemption(draRequest(l, repl), []string{"a"})
	assert.Nil(t, rp, "the replacement preempts nobody of its own priority")

	none, _ := l.PlanPreemption(draRequest(l, hi), []string{"a"})
	assert.Nil(t, none, "the Pod fits: nothing to plan")
	_, state, ok = l.Assumed(hi.UID)
	require.True(t, ok, "the nomination stays")
	assert.Equal(t, Nominated, state)
	res = l.Filter(draRequest(l, hi), []string{"a"}, true)
	assert.Equal(t, "a", res.Chosen, "the Pod's filter takes its room")
	rsv, _ := l.PlanPreemption(draRequest(l, hi), []string{"a"})
	assert.Nil(t, rsv, "a reserved Pod is the scheduling cycle's")
}
