package ledger

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Devices of Dynamic Resource Allocation. A node's devices come from its
// ResourceSlices, counted per DeviceClass as a resource of the ledger's
// vector (DRAResource); what is used is counted per device from the
// allocated ResourceClaims — a device two claims allocate (a takeover
// hands a placeholder's devices to a GPU Pod's claim before the
// placeholder's claim goes) counts once. A Pod's record knows the devices
// of its claims (held), which is what deleting it frees: for a
// placeholder taken over and for a preemption's victims. A Pod being
// scheduled asks for the devices of its claims not yet allocated
// (AddClaimNeeds); its assumption stops counting them once the claim is
// seen allocated (kube-scheduler's DynamicResources plugin allocates it
// before the extender's bind), since the claim counts them from then on.

// DRAResourcePrefix + a DeviceClass name is the ledger's resource for the
// devices of that class: Kubernetes' own name for them counted as an
// extended resource (the DRA extended-resource mapping), so a failed
// node's reason names the class that is short.
const DRAResourcePrefix = "deviceclass.resource.kubernetes.io/"

// DRAResource is the ledger's resource for the devices of a DeviceClass.
func DRAResource(class string) corev1.ResourceName {
	return corev1.ResourceName(DRAResourcePrefix + class)
}

// Device is one device a ResourceSlice publishes: ID is driver/pool/name
// (DeviceID), Classes the DeviceClasses whose selectors admit it.
type Device struct {
	ID      string
	Classes []string
}

// DeviceID names a device as an allocation result does.
func DeviceID(driver, pool, device string) string { return driver + "/" + pool + "/" + device }

// Claim is a ResourceClaim as the ledger counts it.
type Claim struct {
	UID             types.UID
	Namespace, Name string
	// Pods are its owner (a claim made from a Pod's template belongs to
	// that Pod) and the Pods it is reserved for.
	Pods []types.UID
	// Devices are the IDs of the allocated devices; empty while the claim
	// is not allocated.
	Devices []string
	// Needs are, per DeviceClass, the devices the claim asks for while it
	// is not allocated (requests of mode ExactCount; a request for All
	// devices is left to the scheduler, which checked it before asking).
	Needs map[string]int64
}

type devInfo struct {
	node  string
	slots []int // the DRAResource slots of its classes
}

// draBook is the ledger's DRA state. Callers hold l.mu.
type draBook struct {
	devs      map[string]*devInfo
	sliceDevs map[string][]string // ResourceSlice -> its device IDs
	refs      map[string]int      // device -> allocated claims naming it
	devClaims map[string][]types.UID
	claims    map[types.UID]*Claim
	byName    map[types.NamespacedName]types.UID
	podClaims map[types.UID][]types.UID
	slot      map[int]bool // slots that are DRAResources
}

func newDRABook() draBook {
	return draBook{devs: map[string]*devInfo{}, sliceDevs: map[string][]string{}, refs: map[string]int{}, devClaims: map[string][]types.UID{},
		claims: map[types.UID]*Claim{}, byName: map[types.NamespacedName]types.UID{},
		podClaims: map[types.UID][]types.UID{}, slot: map[int]bool{}}
}

// addAt adds x to slot i.
func (v *vec) addAt(i int, x int64) {
	for len(*v) <= i {
		*v = append(*v, 0)
	}
	(*v)[i] += x
}

// draSlot interns the resource of a DeviceClass. Callers hold l.mu.
func (l *Ledger) draSlot(class string) int {
	i := l.slot(DRAResource(class))
	l.dra.slot[i] = true
	return i
}

// SetSlice records the devices of a ResourceSlice on node (replacing what
// the slice published before); nil devices forget the slice. Devices of a
// slice without a node (network-attached) are not counted.
func (l *Ledger) SetSlice(name, node string, devices []Device) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range l.dra.sliceDevs[name] {
		l.dropDevice(id)
	}
	delete(l.dra.sliceDevs, name)
	if node == "" || len(devices) == 0 {
		return
	}
	n := l.node(node)
	ids := make([]string, 0, len(devices))
	for _, d := range devices {
		if _, dup := l.dra.devs[d.ID]; dup {
			continue // published twice (a pool's slices during an update)
		}
		info := &devInfo{node: node}
		for _, c := range d.Classes {
			info.slots = append(info.slots, l.draSlot(c))
		}
		l.dra.devs[d.ID] = info
		ids = append(ids, d.ID)
		for _, s := range info.slots {
			n.draAlloc.addAt(s, 1)
			n.alloc.addAt(s, 1)
			if l.dra.refs[d.ID] > 0 {
				n.used.addAt(s, 1)
			}
		}
	}
	l.dra.sliceDevs[name] = ids
	l.refreshHeldOn(node)
}

func (l *Ledger) dropDevice(id string) {
	info := l.dra.devs[id]
	if info == nil {
		return
	}
	delete(l.dra.devs, id)
	n := l.nodes[info.node]
	if n == nil {
		return
	}
	for _, s := range info.slots {
		n.draAlloc.addAt(s, -1)
		n.alloc.addAt(s, -1)
		if l.dra.refs[id] > 0 {
			n.used.addAt(s, -1)
		}
	}
	l.refreshHeldOn(info.node)
}

// ref counts one more (d 1) or one less (d -1) allocated claim naming a
// device; the device is used on its node while any does.
func (l *Ledger) ref(id string, d int) {
	before := l.dra.refs[id]
	after := before + d
	if after <= 0 {
		delete(l.dra.refs, id)
	} else {
		l.dra.refs[id] = after
	}
	if (before > 0) == (after > 0) {
		return
	}
	info := l.dra.devs[id]
	if info == nil {
		return // its slice is not known (yet): SetSlice counts it then
	}
	n := l.node(info.node)
	for _, s := range info.slots {
		n.used.addAt(s, int64(d))
	}
}

// UpsertClaim records a ResourceClaim.
func (l *Ledger) UpsertClaim(c Claim) {
	l.mu.Lock()
	defer l.mu.Unlock()
	pods := l.unlinkClaim(c.UID)
	cc := c
	l.dra.claims[c.UID] = &cc
	l.dra.byName[types.NamespacedName{Namespace: c.Namespace, Name: c.Name}] = c.UID
	for _, id := range c.Devices {
		l.ref(id, 1)
		l.dra.devClaims[id] = append(l.dra.devClaims[id], c.UID)
		pods = l.sharers(id, pods)
	}
	for _, p := range c.Pods {
		l.dra.podClaims[p] = append(l.dra.podClaims[p], c.UID)
		if !slices.Contains(pods, p) {
			pods = append(pods, p)
		}
		if len(c.Devices) > 0 {
			l.dropDRANeeds(p)
		}
	}
	for _, p := range pods {
		l.refreshHeld(p)
	}
}

// DeleteClaim forgets a ResourceClaim: its devices are free once no other
// claim names them.
func (l *Ledger) DeleteClaim(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.unlinkClaim(uid) {
		l.refreshHeld(p)
	}
}

// unlinkClaim removes a claim's counts and links and returns its Pods.
func (l *Ledger) unlinkClaim(uid types.UID) []types.UID {
	old := l.dra.claims[uid]
	if old == nil {
		return nil
	}
	delete(l.dra.claims, uid)
	name := types.NamespacedName{Namespace: old.Namespace, Name: old.Name}
	if l.dra.byName[name] == uid {
		delete(l.dra.byName, name)
	}
	var pods []types.UID
	for _, id := range old.Devices {
		l.ref(id, -1)
		rest := slices.DeleteFunc(l.dra.devClaims[id], func(c types.UID) bool { return c == uid })
		if len(rest) == 0 {
			delete(l.dra.devClaims, id)
		} else {
			l.dra.devClaims[id] = rest
		}
		pods = l.sharers(id, pods)
	}
	for _, p := range old.Pods {
		rest := slices.DeleteFunc(l.dra.podClaims[p], func(c types.UID) bool { return c == uid })
		if len(rest) == 0 {
			delete(l.dra.podClaims, p)
		} else {
			l.dra.podClaims[p] = rest
		}
		if !slices.Contains(pods, p) {
			pods = append(pods, p)
		}
	}
	return pods
}

// sharers appends to pods the Pods of every claim naming device id: whether
// their devices are shared changed.
func (l *Ledger) sharers(id string, pods []types.UID) []types.UID {
	for _, c := range l.dra.devClaims[id] {
		for _, p := range l.dra.claims[c].Pods {
			if !slices.Contains(pods, p) {
				pods = append(pods, p)
			}
		}
	}
	return pods
}

// sharing returns the Pods, other than pod, that share a claim with pod
// (a takeover hands the placeholder's claim to the GPU Pod: both are its
// Pods until the placeholder is gone) or whose claims name a device pod's
// claims name (never made by runplane; a claim allocated by hand).
func (l *Ledger) sharing(pod types.UID, ns string) []types.UID {
	var out []types.UID
	for _, c := range l.claimsOf(pod, ns) {
		for _, q := range l.dra.claims[c].Pods {
			if r := l.pods[q]; r != nil && r.ns != ns {
				// A claim of ns names a Pod of another namespace (a
				// tenant's ownerRef): no Pod may use it, so it links none.
				continue
			}
			if q != pod && !slices.Contains(out, q) {
				out = append(out, q)
			}
		}
		for _, id := range l.dra.claims[c].Devices {
			if l.dra.refs[id] < 2 {
				continue
			}
			for _, o := range l.dra.devClaims[id] {
				for _, q := range l.dra.claims[o].Pods {
					if q != pod && !slices.Contains(out, q) {
						out = append(out, q)
					}
				}
			}
		}
	}
	return out
}

// dropDRANeeds: the Pod's claim is allocated, so its assumption stops
// counting devices (the claim counts them now).
func (l *Ledger) dropDRANeeds(pod types.UID) {
	a := l.assumed[pod]
	if a == nil {
		return
	}
	n := l.node(a.node)
	for i, x := range a.req {
		if x != 0 && l.dra.slot[i] {
			n.used[i] -= x
			a.req[i] = 0
		}
	}
}

// claimsOf are the claims naming the Pod (as owner or consumer) in its own
// namespace ns: a Pod can use only those, and a tenant may write any Pod's
// UID into its own claim's ownerReferences, so a claim of another namespace
// naming the Pod never counts as the Pod's.
func (l *Ledger) claimsOf(pod types.UID, ns string) []types.UID {
	var out []types.UID
	for _, c := range l.dra.podClaims[pod] {
		if l.dra.claims[c].Namespace == ns {
			out = append(out, c)
		}
	}
	return out
}

// heldOf are the devices of the Pod's allocated claims, per class slot.
func (l *Ledger) heldOf(pod types.UID, ns string) vec {
	var h vec
	for _, c := range l.claimsOf(pod, ns) {
		for _, id := range l.dra.claims[c].Devices {
			if info := l.dra.devs[id]; info != nil {
				for _, s := range info.slots {
					h.addAt(s, 1)
				}
			}
		}
	}
	return h
}

// refreshHeld recomputes what deleting the Pod frees.
func (l *Ledger) refreshHeld(pod types.UID) {
	if p := l.pods[pod]; p != nil {
		l.refresh(p)
	}
}

// pledgedAway marks a placeholder whose claim a GPU Pod shares that is
// gone, being deleted or not seen yet: the claim is not the placeholder's
// any more (it goes with that Pod), so no Pod may take the placeholder;
// the leader deletes it (extender drahold.go), which frees the devices.
const pledgedAway types.UID = "(gone)"

// pledge marks a placeholder whose devices a live GPU Pod's claim names
// too as that Pod's: no other Pod may take it (its devices would stay the
// GPU Pod's). Callers hold l.mu.
func (l *Ledger) pledge(p *podRec) {
	p.pledged = ""
	if p.stockSpec == "" {
		return
	}
	for _, q := range l.sharing(p.uid, p.ns) {
		r := l.pods[q]
		switch {
		case r != nil && r.stockSpec == "" && r.live:
			p.pledged = q
			return
		case r == nil || r.stockSpec == "":
			p.pledged = pledgedAway
		}
	}
}

// repledge recomputes the pledge of the placeholders sharing a claim with
// a GPU Pod that was seen, changed or went: a pledge names live Pods only.
// Callers hold l.mu.
func (l *Ledger) repledge(pod types.UID) {
	for _, c := range l.dra.podClaims[pod] {
		for _, q := range l.dra.claims[c].Pods {
			if r := l.pods[q]; r != nil && r.stockSpec != "" {
				l.refresh(r) // the index keeps a copy of the pledge
			}
		}
	}
}

// refreshHeldOn recomputes held for the Pods on a node whose devices
// changed (a slice seen after the claims that allocate from it).
func (l *Ledger) refreshHeldOn(node string) {
	for p := range l.dra.podClaims {
		if rec := l.pods[p]; rec != nil && rec.node == node {
			l.refresh(rec)
		}
	}
}

// setHeld records the Pod's devices; frees is then its requests plus them.
func (p *podRec) setHeld(h vec) {
	p.free = nil
	if len(h) == 0 {
		return
	}
	p.free = append(vec(nil), p.req...)
	p.free.add(h)
}

// frees is what deleting the Pod frees on its node: its requests and its
// claims' devices.
func (p *podRec) frees() vec {
	if p.free != nil {
		return p.free
	}
	return p.req
}

// AddClaimNeeds adds to a Pod's request the devices its claims not yet
// allocated ask for, per DeviceClass (pod.status.resourceClaimStatuses
// names its claims). A claim the ledger has not seen yet adds nothing:
// kube-scheduler asks the extender only once the claim exists, and its
// DynamicResources filter has already found devices on every node it
// asks about.
func (l *Ledger) AddClaimNeeds(req *Request, pod *corev1.Pod) {
	if len(pod.Status.ResourceClaimStatuses) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.ResourceClaimName == nil {
			continue
		}
		c := l.dra.claims[l.dra.byName[types.NamespacedName{Namespace: pod.Namespace, Name: *s.ResourceClaimName}]]
		if c == nil || len(c.Devices) > 0 {
			continue
		}
		for class, count := range c.Needs {
			if req.Requests.Scalar == nil {
				req.Requests.Scalar = map[corev1.ResourceName]int64{}
			}
			req.Requests.Scalar[DRAResource(class)] += count
		}
	}
}

// Devices are a node's devices of a DeviceClass: published, and used
// (allocated to any claim).
func (l *Ledger) Devices(node, class string) (total, used int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.nodes[node]
	if n == nil {
		return 0, 0
	}
	s := l.draSlot(class)
	return at(n.draAlloc, s), at(n.used, s)
}

// handedOver sets the probe's mustTake (or blocked) when the Pod's claim
// names devices another Pod's claim names too. Callers hold l.mu.
func (l *Ledger) handedOver(pr *probe) {
	for _, q := range l.sharing(pr.req.UID, pr.req.Namespace) {
		r := l.pods[q]
		switch {
		case r == nil || !r.live:
			// Gone or going: its claim goes with it.
		case r.stockSpec != "" && r.pledged == pr.req.UID && r.stockSpec == pr.req.Spec:
			pr.mustTake = r
		default:
			pr.blocked = fmt.Sprintf("its ResourceClaim's devices are allocated to Pod %s/%s's too", r.ns, r.name)
			pr.mustTake = nil
			return
		}
	}
}

// evaluateHandover: the Pod fits only on its placeholder's node, by
// taking that placeholder (whose devices its claim already names).
func (l *Ledger) evaluateHandover(pr *probe, n *node) verdict {
	ph := pr.mustTake
	if n == nil || !n.exists {
		return verdict{reason: unknownNode}
	}
	if n.name != ph.node {
		return verdict{reason: fmt.Sprintf("its ResourceClaim holds the devices of placeholder %s/%s on node %s", ph.ns, ph.name, ph.node)}
	}
	if !ph.claimable() {
		return verdict{reason: fmt.Sprintf("placeholder %s/%s, whose devices its ResourceClaim holds, is being taken", ph.ns, ph.name)}
	}
	if ok, short := fitsVec(n.alloc, n.used, ph.frees(), pr.vec, pr.nz); !ok {
		return verdict{reason: pr.insufficient(short)}
	}
	return verdict{fits: true, ph: ph, hasStock: true, packing: packing(pr.prim, n, pr.vec, at(ph.frees(), pr.prim))}
}

// TakeStock decides, outside any scheduling cycle (and among placeholders
// of the Pod's namespace only), whether a Pod whose
// DRA claims are not allocated yet takes over a same-spec placeholder:
// when its spec's stock is Required, or when no named node has free
// capacity (devices included) for it — kube-scheduler's DynamicResources
// filter would find every device held and never ask the extender. It
// reserves the best such placeholder for the Pod, as a filter does, and
// returns it; the caller hands the placeholder's devices to the Pod's
// claim (or calls Unreserve when it cannot). nil: the scheduler's own
// allocation is the way (free capacity, no stock, or a cycle already
// holds a reservation for the Pod).
func (l *Ledger) TakeStock(req Request, names []string) *Placeholder {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.assumed[req.UID] != nil {
		return nil
	}
	pr := l.newProbe(req)
	if pr.mustTake != nil || pr.blocked != "" {
		return nil // handed over already
	}
	// ResourceClaims are namespaced and a Pod uses only its namespace's:
	// only a placeholder of the Pod's own namespace can hand its claim over.
	pr.phNamespace = req.Namespace
	var best verdict
	var bestNode *node
	for _, name := range names {
		n := l.nodes[name]
		v := l.evaluate(pr, n, "")
		if !v.fits {
			continue
		}
		if v.ph == nil {
			return nil
		}
		if bestNode == nil || better(v, n.name, best, bestNode.name) {
			best, bestNode = v, n
		}
	}
	if bestNode == nil || best.ph.reservedFor != "" || len(best.ph.free) == 0 {
		return nil // no stock, or stock holding no devices to hand over
	}
	l.handled[req.UID] = true
	a := &assumption{uid: req.UID, node: bestNode.name, req: pr.vec, state: Reserved,
		expires: l.opts.Clock.Now().Add(l.opts.ReservationTTL), ph: best.ph.uid}
	l.assume(a)
	return &Placeholder{UID: best.ph.uid, Namespace: best.ph.ns, Name: best.ph.name, Node: bestNode.name, Spec: best.ph.stockSpec}
}

// goneRoom are a node's devices of allocated claims whose Pods are all
// gone, and how many such claims there are.
type goneRoom struct {
	devices vec
	claims  int
}

// goneClaims are, per node, the devices of allocated claims none of whose
// Pods the ledger knows any more: kube-controller-manager deallocates them
// next, so a preemption counts them as room coming, like a terminating
// Pod's. kube-scheduler may see them free before the ledger does; a
// preemptor's filter then runs while the ledger still counts them, and
// without them its nomination found no victim there and lapsed — and the
// victim's replacement took the device (TestDRAPreemptDevices, 1 run of
// 4). Only for a request of devices. Callers hold l.mu.
func (l *Ledger) goneClaims(pr *probe) map[string]goneRoom {
	if !slices.ContainsFunc(pr.nz, func(i int) bool { return l.dra.slot[i] }) {
		return nil
	}
	var out map[string]goneRoom
	for _, c := range l.dra.claims {
		if len(c.Devices) == 0 || len(c.Pods) == 0 || slices.ContainsFunc(c.Pods, func(p types.UID) bool { return l.pods[p] != nil }) {
			continue // not allocated, nobody's ever (not made for a Pod), or a Pod's
		}
		node := ""
		var v vec
		for _, id := range c.Devices {
			info := l.dra.devs[id]
			if info == nil || l.dra.refs[id] > 1 {
				continue // unpublished, or another claim names it too
			}
			node = info.node
			for _, s := range info.slots {
				v.addAt(s, 1)
			}
		}
		if node == "" {
			continue
		}
		if out == nil {
			out = map[string]goneRoom{}
		}
		g := out[node]
		g.devices.add(v)
		g.claims++
		out[node] = g
	}
	return out
}

// withoutDevices is v with its DRAResource slots zeroed: what a
// reservation Pod of a DRA Pod's nomination requests. No node has such an
// extended resource (a kubelet would reject the Pod), and no other
// scheduler may allocate GPU-class devices (README "Preemption for DRA
// specs"): the nomination in the ledger holds the devices, the
// reservation the CPU and memory. Callers hold l.mu.
func (l *Ledger) withoutDevices(v vec) vec {
	out := append(vec{}, v...)
	for i := range out {
		if l.dra.slot[i] {
			out[i] = 0
		}
	}
	return out
}

// Unreserve drops a Pod's reservation (not a bind in progress).
func (l *Ledger) Unreserve(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if a := l.assumed[uid]; a != nil && a.state == Reserved {
		l.unassume(a, false)
	}
}
