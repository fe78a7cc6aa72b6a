// Package ledger is the extender's per-node capacity book: allocatable minus
// the requests of bound, non-terminal Pods, minus Pods the extender has
// assumed onto a node but not yet seen bound. Stock placeholders are indexed
// per node and spec so a GPU Pod can count a same-spec, bound, unclaimed
// placeholder as capacity it may take. Every decision that consumes capacity
// (a filter's reservation, a bind) happens under one lock together with its
// fit check, so concurrent scheduling cycles never count capacity twice and
// two Pods never claim the same placeholder. The ledger is pure logic fed by
// informer events; it makes no API calls.
package ledger

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/runplane/runplane/api"
)

// State is where an assumed Pod stands.
type State int

const (
	// Reserved: a filter chose this node for the Pod; the scheduler has not
	// asked to bind yet. Expires after the reservation TTL.
	Reserved State = iota
	// Binding: a bind for the Pod is in progress.
	Binding
	// Bound: the Binding was created; waiting for the informer to catch up.
	Bound
	// Recovered: rebuilt after a restart from the claim annotation a previous
	// extender wrote before deleting a placeholder for this Pod.
	Recovered
	// Nominated: the Pod preempts lower-priority Pods on this node and
	// holds the room they free until it binds (or NominationTTL passes).
	Nominated
)

func (s State) String() string {
	return [...]string{"Reserved", "Binding", "Bound", "Recovered", "Nominated"}[s]
}

// doomed marks a placeholder whose deletion was requested: it is neither
// counted nor claimable while the informer has not yet seen it go.
const doomed types.UID = "-doomed-"

// ErrBindInProgress: the scheduler asked again for a Pod whose bind runs.
var ErrBindInProgress = errors.New("a bind for this Pod is already in progress")

// NoRoomError says why a node cannot take a Pod at bind time.
type NoRoomError struct{ Node, Reason string }

func (e *NoRoomError) Error() string { return fmt.Sprintf("node %s: %s", e.Node, e.Reason) }

// Request is a Pod asking for a node.
type Request struct {
	UID             types.UID
	Namespace, Name string
	Requests        Resources
	// Spec is the GPU spec of a workload Pod (label runplane.io/gpu-spec);
	// empty for a placeholder or a Pod runplane does not know.
	Spec string
	// Stock is the spec of a placeholder (label runplane.io/stock): it
	// goes to a node without claimable stock of that spec first (better).
	Stock string
	// Required: the Pod binds only by taking a same-spec placeholder.
	Required bool
	// Priority is the Pod's priority; Preempt says whether it may evict
	// lower-priority Pods when no node has room (preemptionPolicy is not
	// Never).
	Priority int32
	Preempt  bool
	// Protected reports a Pod that must not be preempted (a
	// PodDisruptionBudget allows no disruption of it); nil protects none.
	Protected func(namespace string, labels map[string]string) bool
}

// MayPreempt: the leader plans a preemption for the request when it fits
// no node.
func (r Request) MayPreempt() bool { return r.Preempt && !r.Required }

// RequestFor builds the Request of a Pod. Pods with neither runplane label
// take free capacity only, like placeholders.
func RequestFor(pod *corev1.Pod, required bool) Request {
	return Request{
		UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name,
		Requests: PodRequests(pod), Spec: pod.Labels[api.LabelGPUSpec], Stock: pod.Labels[api.LabelStock], Required: required,
		Priority: priority(pod),
		Preempt:  pod.Spec.PreemptionPolicy == nil || *pod.Spec.PreemptionPolicy != corev1.PreemptNever,
	}
}

// priority is the Pod's resolved priority (0 when the Priority admission
// plugin set none, as the scheduler counts it).
func priority(pod *corev1.Pod) int32 {
	if pod.Spec.Priority != nil {
		return *pod.Spec.Priority
	}
	return 0
}

// Placeholder identifies a claimed stock placeholder.
type Placeholder struct {
	UID             types.UID
	Namespace, Name string
	Node, Spec      string
	// Reservation: the room the Pod's own preemption reserved, not stock.
	Reservation bool
}

// String is the value of the claim annotation: node/namespace/name/uid.
func (p Placeholder) String() string {
	return p.Node + "/" + p.Namespace + "/" + p.Name + "/" + string(p.UID)
}

// ParseClaim reads a claim annotation written by Placeholder.String.
func ParseClaim(v string) (Placeholder, error) {
	parts := strings.Split(v, "/")
	if len(parts) != 4 || parts[0] == "" || parts[3] == "" {
		return Placeholder{}, fmt.Errorf("annotation %s: want node/namespace/name/uid, got %q", api.AnnotationClaimedStock, v)
	}
	return Placeholder{Node: parts[0], Namespace: parts[1], Name: parts[2], UID: types.UID(parts[3])}, nil
}

type podRec struct {
	uid       types.UID
	ns, name  string
	node      string
	req       vec
	counted   bool   // bound and not terminal: takes capacity on its node
	stockSpec string // placeholder of this spec (label runplane.io/stock)
	live      bool   // not being deleted
	claimedBy types.UID
	// surplus: a claimed placeholder's requests beyond its claimer's, still
	// counted on its node until it is deleted. The claim can be undone
	// (the bind fails before the delete, the scheduler binds elsewhere,
	// the reservation expires) and the placeholder then counts in full
	// again: lent out meanwhile, the surplus over-committed the node.
	surplus  vec
	record   types.UID // bound Pod: the placeholder its claim annotation names
	priority int32
	labels   map[string]string // the informer's map, for PodDisruptionBudget selectors
	// reservedFor: a reservation Pod (reservation.go) holding room for
	// this preemptor; only that Pod may take it.
	reservedFor types.UID
	created     time.Time // the Pod's creationTimestamp (a reservation's age)
	foreign     bool      // scheduled by another scheduler than runplane's
	owner       types.UID // controller (a ReplicaSet...): a victim's lineage
	// free is req plus the devices of the Pod's allocated ResourceClaims
	// (dra.go), nil when it holds none: what deleting it frees.
	free vec
	// pledged: a placeholder whose devices the claim of this GPU Pod names
	// too (a DRA takeover under way, dra.go): only that Pod may take it.
	pledged types.UID
}

// claimable: a bound, live, unclaimed placeholder. Bound is enough (it need
// not be Running yet): it holds its capacity in the ledger either way, and
// kube-scheduler does not requeue a Pod that waits for stock when a
// placeholder's status turns Running, only when it is bound — a Required
// Pod would wait for the scheduler's 5-minute flush.
func (p *podRec) claimable() bool {
	return p.stockSpec != "" && p.counted && p.live && p.claimedBy == ""
}

// node is one node's book. A filter reads the fields before draAlloc of
// every node: they come first, within 240 bytes (they were spread over
// 264).
type node struct {
	name   string
	exists bool
	alloc  vec
	used   vec
	// ready are the claimable placeholders per spec index (Ledger.specs),
	// by UID (stockindex.go): a filter asks "is this node warm" of every
	// node, and a GPU Pod that must take stock which placeholder it takes,
	// without walking the stock map and its records.
	ready [][]stockRef
	// alloc, used and ready start out in these arrays, in the node's own
	// allocation: a filter reads them for every node, and one allocation
	// is one or two cache lines instead of four scattered ones. (They move
	// out only when a cluster has more resource slots or specs than fit.)
	readyBuf          [2][]stockRef
	allocBuf, usedBuf [inlineSlots]int64
	// draAlloc are the devices its ResourceSlices publish, per class slot
	// (dra.go); alloc includes them.
	draAlloc vec
	stock    map[string][]*podRec // spec -> placeholders on the node
	// pods are the Pods counted in used: a preemption picks its victims
	// among them.
	pods map[types.UID]*podRec
	// placing counts the placeholders per spec index assumed onto the node
	// and not yet seen bound: stock on its way, for better's spread.
	placing []int32
}

// inlineSlots fits CPU, memory, Pods and three extended resources.
const inlineSlots = 6

type assumption struct {
	uid     types.UID
	node    string
	req     vec
	state   State
	expires time.Time
	ph      types.UID // claimed placeholder, or ""
	// stock is 1 + the spec index of a placeholder being placed (counted
	// in node.placing), 0 for any other Pod.
	stock int
}

// Options tune the ledger.
type Options struct {
	// ReservationTTL bounds how long a filter's reservation holds capacity
	// when no bind follows (the scheduling cycle failed later). Default 30s.
	ReservationTTL time.Duration
	// RecoveredTTL bounds a claim rebuilt after a restart. Default 2m.
	RecoveredTTL time.Duration
	// BoundTTL bounds how long a bound Pod stays assumed if the informer
	// never reports it. Default 2m.
	BoundTTL time.Duration
	// NominationTTL bounds how long a preempting Pod holds the room its
	// victims free: their termination grace, then the scheduler's retry.
	// Default 2m.
	NominationTTL time.Duration
	// Clock ages reservations; the real clock when nil.
	Clock clock.PassiveClock
	// ReservationNamespace is the only namespace whose Pods labelled
	// runplane.io/reserved-for are trusted as reservations (the
	// extender's own); empty trusts none.
	ReservationNamespace string
	// SchedulerName is runplane's scheduler (api.SchedulerName when
	// empty): Pods of any other are "foreign" to the preemption back-off.
	SchedulerName string
	// PreemptBackoff: how long Pods of other schedulers on a node are not
	// preempted again once an eviction there did not lead to a bind.
	// Default 2m.
	PreemptBackoff time.Duration
	// MaxEvictionsPerPod and MaxEvictionsPerNode cap the victims planned
	// per preempting Pod and per node in any minute. Default 8 and 16.
	MaxEvictionsPerPod, MaxEvictionsPerNode int
}

// Ledger is the per-node capacity book. The zero value is not usable; use New.
type Ledger struct {
	opts Options

	// mu guards the book: a filter reserves, so every verb changes it.
	mu      sync.Mutex
	nodes   map[string]*node
	arena   nodeArena // where nodes are allocated
	pods    map[types.UID]*podRec
	assumed map[types.UID]*assumption
	// handled are Pods this process has bound or tried to: their claim
	// annotations describe this process's own actions, not a predecessor's.
	handled map[types.UID]bool
	// inherits maps a Pod to the claim it took over from a predecessor
	// (recover), inheritedBy a placeholder to that Pod: one heir each. The
	// inheritance ends when another Pod claims or records the placeholder.
	inherits    map[types.UID]Placeholder
	inheritedBy map[types.UID]types.UID
	// recorded maps a placeholder to the bound Pod whose claim annotation
	// names it: that claim is settled, nobody can inherit it.
	recorded map[types.UID]types.UID
	gone     map[types.UID]chan struct{}
	slots    map[corev1.ResourceName]int
	names    []corev1.ResourceName
	// specs indexes the stock specs seen, for node.ready and node.placing.
	specs map[string]int
	// resv are the reservation Pods (by their UID), reservedFor the
	// latest of each preemptor (reservation.go).
	resv        map[types.UID]*podRec
	reservedFor map[types.UID]*podRec
	// resvDrop: reservations no nomination holds any more (preempt.go).
	resvDrop map[types.UID]bool
	// rejected: a preemptor's reservation a kubelet rejected (terminal
	// while present); rejectedOnce: it happened for that preemptor.
	rejected     map[types.UID]Placeholder
	rejectedOnce map[types.UID]bool
	// preempts are the preempting Pods' records, evictions the victims
	// planned per node (times), backoff when nodes' back-off ends.
	preempts  map[types.UID]*preemptRec
	victimOf  map[types.UID]types.UID // a planned victim's preemptor
	evictions map[string][]time.Time
	backoff   map[string]time.Time
	// dra: devices from ResourceSlices, allocated ResourceClaims (dra.go).
	dra draBook
}

// Defaults are the tunings New gives an Options' zero fields; the
// extender's configuration (extender/config) takes its preemption
// defaults from here.
func Defaults() Options {
	return Options{ReservationTTL: 30 * time.Second, RecoveredTTL: 2 * time.Minute, BoundTTL: 2 * time.Minute,
		NominationTTL: 2 * time.Minute, Clock: clock.RealClock{}, SchedulerName: api.SchedulerName,
		PreemptBackoff: 2 * time.Minute, MaxEvictionsPerPod: 8, MaxEvictionsPerNode: 16}
}

// positiveOr is v, or def when v is not positive: a negative TTL or cap
// from a Go caller is as unset as zero (the extender's configuration
// refuses both).
func positiveOr[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// New returns an empty ledger.
func New(opts Options) *Ledger {
	def := Defaults()
	opts.ReservationTTL, opts.RecoveredTTL = positiveOr(opts.ReservationTTL, def.ReservationTTL), positiveOr(opts.RecoveredTTL, def.RecoveredTTL)
	opts.BoundTTL, opts.NominationTTL = positiveOr(opts.BoundTTL, def.BoundTTL), positiveOr(opts.NominationTTL, def.NominationTTL)
	if opts.Clock == nil {
		opts.Clock = def.Clock
	}
	opts.SchedulerName = cmp.Or(opts.SchedulerName, def.SchedulerName)
	opts.PreemptBackoff = positiveOr(opts.PreemptBackoff, def.PreemptBackoff)
	opts.MaxEvictionsPerPod = positiveOr(opts.MaxEvictionsPerPod, def.MaxEvictionsPerPod)
	opts.MaxEvictionsPerNode = positiveOr(opts.MaxEvictionsPerNode, def.MaxEvictionsPerNode)
	return &Ledger{
		opts:    opts,
		nodes:   map[string]*node{},
		pods:    map[types.UID]*podRec{},
		assumed: map[types.UID]*assumption{},
		handled: map[types.UID]bool{},

		inherits:    map[types.UID]Placeholder{},
		inheritedBy: map[types.UID]types.UID{},
		recorded:    map[types.UID]types.UID{},
		gone:        map[types.UID]chan struct{}{},
		slots:       map[corev1.ResourceName]int{},
		specs:       map[string]int{},

		resv: map[types.UID]*podRec{}, reservedFor: map[types.UID]*podRec{}, resvDrop: map[types.UID]bool{},
		rejected: map[types.UID]Placeholder{}, rejectedOnce: map[types.UID]bool{},
		preempts: map[types.UID]*preemptRec{}, victimOf: map[types.UID]types.UID{}, evictions: map[string][]time.Time{}, backoff: map[string]time.Time{},
		dra: newDRABook(),
	}
}

// specIndex interns a stock spec for node.ready. Callers hold l.mu for writing.
func (l *Ledger) specIndex(spec string) int {
	i, ok := l.specs[spec]
	if !ok {
		i = len(l.specs)
		l.specs[spec] = i
	}
	return i
}

// stockOf is assumption.stock of req. Callers hold l.mu for writing.
func (l *Ledger) stockOf(req Request) int {
	if req.Stock == "" {
		return 0
	}
	return l.specIndex(req.Stock) + 1
}

// at32 is s[i], 0 past its end.
func at32(s []int32, i int) int32 {
	if i < len(s) {
		return s[i]
	}
	return 0
}

func (l *Ledger) node(name string) *node {
	n := l.nodes[name]
	if n == nil {
		// Not the informer object's name: the nodes and names that every
		// filter looks up (and compares) sit together in memory.
		n = l.arena.newNode(name)
		n.stock, n.pods = map[string][]*podRec{}, map[types.UID]*podRec{}
		n.used, n.ready = n.usedBuf[:0], n.readyBuf[:0]
		l.nodes[n.name] = n
	}
	return n
}

// UpsertNode records a node's allocatable.
func (l *Ledger) UpsertNode(n *corev1.Node) {
	l.mu.Lock()
	defer l.mu.Unlock()
	nd := l.node(n.Name)
	nd.exists = true
	nd.alloc = append(nd.allocBuf[:0], l.pack(FromList(n.Status.Allocatable))...)
	nd.alloc.add(nd.draAlloc)
}

// DeleteNode forgets a node's capacity (its Pods go with their own events).
func (l *Ledger) DeleteNode(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if nd := l.nodes[name]; nd != nil {
		nd.exists = false
		nd.alloc = nil
	}
}

func (l *Ledger) addRec(p *podRec) {
	if p.node == "" {
		return
	}
	n := l.node(p.node)
	if p.counted && p.claimedBy == "" {
		n.used.add(p.req)
		n.pods[p.uid] = p
	}
	if p.counted && p.claimedBy != "" {
		n.used.add(p.surplus)
	}
	if p.stockSpec != "" {
		n.stock[p.stockSpec] = append(n.stock[p.stockSpec], p)
		l.index(n, p)
	}
}

func (l *Ledger) removeRec(p *podRec) {
	if p.node == "" {
		return
	}
	n := l.node(p.node)
	if p.counted && p.claimedBy == "" {
		n.used.sub(p.req)
		delete(n.pods, p.uid)
	}
	if p.counted && p.claimedBy != "" {
		n.used.sub(p.surplus)
	}
	if p.stockSpec != "" {
		l.unindex(n, p)
		list := n.stock[p.stockSpec]
		for i, q := range list {
			if q.uid == p.uid {
				list[i] = list[len(list)-1]
				list[len(list)-1] = nil
				n.stock[p.stockSpec] = list[:len(list)-1]
				break
			}
		}
	}
}

// claim gives placeholder phUID to the assumption by: the placeholder
// stops counting on its node but for its surplus over by's requests.
func (l *Ledger) claim(phUID types.UID, by *assumption) {
	p := l.pods[phUID]
	if p == nil || p.claimedBy != "" {
		return
	}
	l.removeRec(p)
	p.claimedBy = by.uid
	p.surplus = nil
	for i, x := range p.req {
		if s := x - at(by.req, i); s > 0 {
			for len(p.surplus) <= i {
				p.surplus = append(p.surplus, 0)
			}
			p.surplus[i] = s
		}
	}
	l.addRec(p)
}

func (l *Ledger) release(phUID types.UID, deleted bool) {
	p := l.pods[phUID]
	if p == nil {
		return
	}
	l.removeRec(p)
	p.claimedBy, p.surplus = "", nil // unclaimed it counts in full again; doomed, not at all
	if deleted {
		p.claimedBy = doomed
	}
	l.addRec(p)
}

func (l *Ledger) assume(a *assumption) {
	l.assumed[a.uid] = a
	n := l.node(a.node)
	n.used.add(a.req)
	if a.stock > 0 {
		for len(n.placing) < a.stock {
			n.placing = append(n.placing, 0)
		}
		n.placing[a.stock-1]++
	}
	if a.ph != "" {
		// The placeholder is this Pod's now: a predecessor's claim on it
		// for another Pod is void (that Pod is not bound on its capacity).
		l.disinherit(a.ph, a.uid)
		l.claim(a.ph, a)
	}
}

// disinherit ends the inheritance of placeholder ph by any Pod but keep,
// and releases that heir's recovered assumption: the capacity it held for
// the heir is another Pod's now.
func (l *Ledger) disinherit(ph, keep types.UID) {
	heir, ok := l.inheritedBy[ph]
	if !ok || heir == keep {
		return
	}
	delete(l.inheritedBy, ph)
	delete(l.inherits, heir)
	if a := l.assumed[heir]; a != nil && a.state == Recovered {
		l.unassume(a, false)
	}
}

func (l *Ledger) unassume(a *assumption, phDeleted bool) {
	if l.assumed[a.uid] != a {
		return
	}
	delete(l.assumed, a.uid)
	n := l.node(a.node)
	n.used.sub(a.req)
	if a.stock > 0 {
		n.placing[a.stock-1]--
	}
	if a.ph != "" {
		if p := l.pods[a.ph]; p != nil && p.claimedBy == a.uid {
			l.release(a.ph, phDeleted)
		}
	}
}

func terminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// UpsertPod records a Pod as the informer sees it.
func (l *Ledger) UpsertPod(pod *corev1.Pod) {
	if terminal(pod) {
		l.DeletePod(pod.UID)
		l.rejectedReservation(pod)
		return
	}
	rec := &podRec{
		uid: pod.UID, ns: pod.Namespace, name: pod.Name, node: pod.Spec.NodeName,
		counted:   pod.Spec.NodeName != "",
		stockSpec: pod.Labels[api.LabelStock],
		live:      pod.DeletionTimestamp == nil,
		priority:  priority(pod),
		labels:    pod.Labels,
		created:   pod.CreationTimestamp.Time,
		foreign:   pod.Spec.SchedulerName != l.opts.SchedulerName,
	}
	if ref := metav1.GetControllerOf(pod); ref != nil {
		rec.owner = ref.UID
	}
	if l.opts.ReservationNamespace != "" && pod.Namespace == l.opts.ReservationNamespace && pod.Labels[api.LabelReservedFor] != "" {
		rec.reservedFor = types.UID(pod.Labels[api.LabelReservedFor])
		rec.stockSpec = "" // a reservation is its preemptor's alone
		// Deleted at once after its creation, it holds the room while its
		// finalizer stands (reservation.go).
		rec.live = slices.Contains(pod.Finalizers, api.FinalizerReservation)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.pods[pod.UID]
	if old != nil && old.node != "" && rec.node == "" {
		// A Pod's node never goes back to unset: this event predates a
		// binding the ledger already recorded (EndBind of a placeholder).
		return
	}
	if old != nil && old.node == rec.node && old.counted == rec.counted {
		rec.req = old.req // requests of a bound Pod do not change in ways we track
	} else {
		rec.req = l.pack(PodRequests(pod))
	}
	rec.setHeld(l.heldOf(pod.UID, pod.Namespace))
	l.pledge(rec)
	if old != nil {
		l.removeRec(old)
		rec.claimedBy, rec.surplus = old.claimedBy, old.surplus
	}
	l.pods[pod.UID] = rec
	if rec.node != "" {
		l.settle(pod, rec)
	}
	if a := l.assumed[pod.UID]; a != nil && rec.node != "" {
		// The Pod is bound: its own record now counts. Its placeholder, if
		// any, was deleted before the Binding was created.
		l.unassume(a, true)
	}
	l.addRec(rec)
	if rec.reservedFor != "" {
		l.addReservation(rec)
	}
	if rec.node != "" {
		l.preemptorBound(rec.uid, rec.node)
	}
	if rec.node == "" && !l.handled[pod.UID] && l.assumed[pod.UID] == nil {
		l.recover(pod)
	}
	if rec.claimable() {
		l.bequeath(rec)
	}
	if rec.stockSpec == "" {
		l.repledge(rec.uid)
	}
}

// bequeath gives a placeholder that shows up after the Pod that inherits
// its claim (a Pod list is in namespace/name order, so a GPU Pod often
// comes before the placeholder it claimed) to that Pod's recovered
// assumption, as recover does when the placeholder is already known:
// otherwise another Pod could claim it while the heir still counts on it.
func (l *Ledger) bequeath(ph *podRec) {
	heir, ok := l.inheritedBy[ph.uid]
	if !ok {
		return
	}
	a := l.assumed[heir]
	if a == nil || a.state != Recovered || a.ph != "" || a.node != ph.node {
		return
	}
	a.ph = ph.uid
	l.claim(ph.uid, a)
}

// settle notes the claim a bound Pod records. A Pod that inherited the same
// placeholder (its annotation was an intent superseded before the
// predecessor died) loses that inheritance: the bound Pod took it.
func (l *Ledger) settle(pod *corev1.Pod, rec *podRec) {
	c, err := ParseClaim(pod.Annotations[api.AnnotationClaimedStock])
	if err != nil {
		return
	}
	rec.record = c.UID
	l.recorded[c.UID] = rec.uid
	l.disinherit(c.UID, rec.uid)
}

// recover rebuilds the claim a previous extender made for an unbound Pod:
// it had deleted (or was about to delete) a placeholder for it, so the
// capacity that placeholder held belongs to this Pod, not to whoever comes
// next (such as the placeholder's replacement).
func (l *Ledger) recover(pod *corev1.Pod) {
	v, ok := pod.Annotations[api.AnnotationClaimedStock]
	if !ok {
		return
	}
	l.handled[pod.UID] = true // recover once per process
	claim, err := ParseClaim(v)
	if err != nil {
		return
	}
	_, settled := l.recorded[claim.UID]
	if _, taken := l.inheritedBy[claim.UID]; taken || settled {
		// Another Pod names the same placeholder (a claim intent that was
		// superseded before the predecessor died): only one inherits it.
		return
	}
	if p := l.pods[claim.UID]; p != nil && p.claimedBy != "" {
		// This process already gave the placeholder to another Pod (or
		// deleted it for a bind that failed): the annotation, seen late,
		// is a superseded intent.
		return
	}
	l.inherits[pod.UID], l.inheritedBy[claim.UID] = claim, pod.UID
	a := &assumption{uid: pod.UID, node: claim.Node, req: l.pack(PodRequests(pod)), state: Recovered,
		expires: l.opts.Clock.Now().Add(l.opts.RecoveredTTL)}
	if p := l.pods[claim.UID]; p != nil && p.claimedBy == "" && p.node == claim.Node {
		a.ph = claim.UID
	}
	l.assume(a)
}

// DeletePod forgets a Pod (deleted, or terminal).
func (l *Ledger) DeletePod(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if a := l.assumed[uid]; a != nil {
		l.unassume(a, false)
	}
	if p := l.pods[uid]; p != nil {
		if p.claimedBy != "" {
			// Deleted by this process's claim (or for a bind that failed):
			// settled, no late-seen annotation may inherit it. (The claimer's
			// own record, when it is seen bound, replaces this one.)
			l.recorded[uid] = p.claimedBy
		}
		l.removeRec(p)
		delete(l.pods, uid)
		l.forgetReservation(p)
		if p.record != "" && l.recorded[p.record] == uid {
			delete(l.recorded, p.record)
		}
	}
	l.repledge(uid)
	delete(l.handled, uid)
	delete(l.victimOf, uid)
	l.forgetRejected(uid)
	l.preemptorBound(uid, "")
	if c, ok := l.inherits[uid]; ok {
		delete(l.inherits, uid)
		if l.inheritedBy[c.UID] == uid {
			delete(l.inheritedBy, c.UID)
		}
	}
	if ch := l.gone[uid]; ch != nil {
		close(ch)
		delete(l.gone, uid)
	}
}

// WaitGone blocks until the informer has seen the Pod go, or ctx ends.
func (l *Ledger) WaitGone(ctx context.Context, uid types.UID) error {
	l.mu.Lock()
	if _, ok := l.pods[uid]; !ok {
		l.mu.Unlock()
		return nil
	}
	ch := l.gone[uid]
	if ch == nil {
		ch = make(chan struct{})
		l.gone[uid] = ch
	}
	l.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for placeholder %s to be gone: %w", uid, ctx.Err())
	}
}

// Inherits returns the placeholder whose claim the Pod inherited from a
// predecessor extender, or "".
func (l *Ledger) Inherits(uid types.UID) types.UID {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inherits[uid].UID
}

// Inherited returns the claim a Pod bound to node keeps: the one it
// inherited from a predecessor, if that placeholder was on node, is gone
// (the predecessor deleted it for this Pod) and no other Pod claimed or
// recorded it since. ok false: the Pod's capacity is not that
// placeholder's, so its claim annotation must say none.
func (l *Ledger) Inherited(uid types.UID, node string) (claim Placeholder, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.inherits[uid]
	if !ok || c.Node != node || l.inheritedBy[c.UID] != uid {
		return Placeholder{}, false
	}
	if _, exists := l.pods[c.UID]; exists {
		return Placeholder{}, false
	}
	return c, true
}

// Exists reports whether the ledger knows a (non-terminal) Pod.
func (l *Ledger) Exists(uid types.UID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.pods[uid]
	return ok
}

// Sweep drops assumptions whose time is up.
func (l *Ledger) Sweep() {
	now := l.opts.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range l.assumed {
		if a.state != Binding && now.After(a.expires) {
			l.unassume(a, a.state == Bound)
			if a.state == Nominated {
				l.nominationEnded(a.uid, a.node, now)
			}
		}
	}
}

// verdict is the evaluation of one node for one request.
type verdict struct {
	fits     bool
	reason   string
	ph       *podRec // placeholder to claim, if the Pod needs one
	hasStock bool    // a claimable same-spec placeholder is on the node
	// spreads: a placeholder on a node that holds no claimable stock of
	// its spec, nor any being placed (node.placing), yet (better).
	spreads bool
	packing float64 // utilisation of the primary resource after placement
}

func primary(req Resources) corev1.ResourceName {
	var names []string
	for k, v := range req.Scalar {
		if v > 0 {
			names = append(names, string(k))
		}
	}
	if len(names) == 0 {
		return corev1.ResourceCPU
	}
	sort.Strings(names)
	return corev1.ResourceName(names[0])
}

// probe is a request prepared once per call and evaluated on many nodes:
// the per-node work must stay a handful of comparisons at 5,000 nodes.
type probe struct {
	req      Request
	vec      vec
	nz       []int    // slots the request needs
	prim     int      // slot packing is measured on
	reasons  []string // by slot: insufficient's answers so far
	names    func(int) corev1.ResourceName
	required string
	warm     int // index of req.Spec in node.ready; -1 when no node has stock of it
	stock    int // index of req.Stock in node.ready (a placeholder's spec); -1 likewise
	// resv is the Pod's own reservation, if any: one lookup per call,
	// not per node.
	resv *podRec
	// mustTake: the placeholder whose devices the Pod's claim was handed
	// (a DRA takeover, dra.go): the Pod fits only by taking it. blocked:
	// why it fits nowhere (its claim's devices are another Pod's).
	mustTake *podRec
	blocked  string
	// phNamespace, when set, limits the placeholders to take to that
	// namespace (a DRA hand-over: a Pod can use only a claim of its own).
	phNamespace string
}

// newProbe prepares req. Callers hold l.mu.
func (l *Ledger) newProbe(req Request) *probe {
	p := &probe{req: req, vec: l.pack(req.Requests), prim: l.slot(primary(req.Requests)), names: l.slotName, warm: -1,
		stock: -1, resv: l.reservedFor[req.UID]}
	if i, ok := l.specs[req.Spec]; ok && req.Spec != "" {
		p.warm = i
	}
	if i, ok := l.specs[req.Stock]; ok && req.Stock != "" {
		p.stock = i
	}
	for i, x := range p.vec {
		if x > 0 {
			p.nz = append(p.nz, i)
		}
	}
	l.handedOver(p)
	if req.Required {
		p.required = fmt.Sprintf("GPU spec %q has stock: Required and the node has no unclaimed %s=%s placeholder", req.Spec, api.LabelStock, req.Spec)
	}
	return p
}

// insufficient is why the request does not fit a node short of slot
// short; one string per slot, shared by every node it fails.
func (pr *probe) insufficient(short int) string {
	for len(pr.reasons) <= short {
		pr.reasons = append(pr.reasons, "")
	}
	if r := pr.reasons[short]; r != "" {
		return r
	}
	r := "insufficient " + string(pr.names(short))
	if pr.req.Spec != "" {
		r += fmt.Sprintf(" and no unclaimed %s=%s placeholder", api.LabelStock, pr.req.Spec)
	}
	pr.reasons[short] = r
	return r
}

const unknownNode = "node not (yet) known to the runplane extender"

func (l *Ledger) evaluate(pr *probe, n *node, prefer types.UID) verdict {
	if n == nil || !n.exists {
		return verdict{reason: unknownNode}
	}
	if pr.mustTake != nil {
		return l.evaluateHandover(pr, n)
	}
	if pr.blocked != "" {
		return verdict{reason: pr.blocked}
	}
	req := &pr.req
	var v verdict
	freeOK, short := fitsVec(n.alloc, n.used, nil, pr.vec, pr.nz)
	if freeOK && !req.Required {
		// No claim needed: only whether the node is warm matters (scoring).
		v.hasStock = len(n.readyOf(pr.warm)) > 0
		v.spreads = pr.req.Stock != "" && (pr.stock < 0 || len(n.readyOf(pr.stock)) == 0 && at32(n.placing, pr.stock) == 0)
		v.fits = true
		v.packing = packing(pr.prim, n, pr.vec, 0)
		return v
	}
	ph, freed := n.pick(pr, prefer)
	v.hasStock = ph != nil
	if r := pr.resv; ph == nil && r != nil && r.node == n.name && r.counted && r.live && r.claimedBy == "" {
		// The room the Pod's own preemption reserved (reservation.go).
		if ok, _ := fitsVec(n.alloc, n.used, r.frees(), pr.vec, pr.nz); ok {
			ph, freed, v.hasStock = r, at(r.frees(), pr.prim), true
		}
	}
	switch {
	case req.Required && ph == nil:
		v.reason = pr.required
		return v
	case ph != nil:
		v.fits, v.ph = true, ph
	default:
		v.reason = pr.insufficient(short)
		return v
	}
	v.packing = packing(pr.prim, n, pr.vec, freed)
	return v
}

// packing is how full slot prim of n is once req is placed and what
// freed of it is gone (a placeholder's, taken).
func packing(prim int, n *node, req vec, freed int64) float64 {
	alloc := at(n.alloc, prim)
	if alloc <= 0 {
		return 0
	}
	used := at(n.used, prim) + at(req, prim) - freed
	// Plain comparisons: math.Min and math.Max handle NaN and signed
	// zeros, which a ratio of counts never is, at a cost a filter pays
	// 5,000 times.
	switch f := float64(used) / float64(alloc); {
	case f < 0:
		return 0
	case f > 1:
		return 1
	default:
		return f
	}
}

// better orders feasible nodes: a warm node (same-spec stock) first —
// for a placeholder, a node without stock of its spec — then, among warm
// nodes, one with free room before one whose placeholder must be taken,
// then the fuller one, then by name so every cycle agrees.
//
// Placeholders spread because GPU Pods pack: a placeholder put on the
// fullest node, the one its spec's GPU Pods are filling, was taken by the
// next of them where free capacity on a node beside it would have done,
// and its replacement again — in BindThroughput 668 takeovers for 500
// placeholders, each one a claim annotation, a delete, a create, a
// Binding and a scheduling cycle more for the same headroom. For the
// same reason a GPU Pod takes stock only once no warm node has free room
// for it: the free room is as warm, and taking the placeholder would spend
// the headroom and pay for its refill (BindThroughput: 330–365 takeovers
// in a burst that fits the warm nodes' free room, 0 after).
func better(a verdict, an string, b verdict, bn string) bool {
	if a.hasStock != b.hasStock {
		return a.hasStock
	}
	if a.spreads != b.spreads {
		return a.spreads
	}
	if (a.ph == nil) != (b.ph == nil) {
		return a.ph == nil
	}
	if a.packing != b.packing {
		return a.packing > b.packing
	}
	return an < bn
}

// FilterResult is the outcome of Filter.
type FilterResult struct {
	// Feasible are the nodes the Pod fits, in the order asked.
	Feasible []string
	// Failed are the nodes the Pod does not fit, in the order asked, with
	// why. A slice, not a map: at 5,000 nodes of a full cluster, hashing
	// every failed node into a map cost more than the filter itself, and
	// a filter that reserves a node is answered without them.
	Failed []NodeFailure
	// Chosen is the node reserved for the Pod ("" when none fits or when
	// Filter was asked not to reserve).
	Chosen string
	// Claim is the placeholder the Pod will take on Chosen, if it needs one.
	Claim *Placeholder
	// Preemption is set when no node fits but evicting lower-priority Pods
	// on one makes room (leader only): the Pod is nominated there, and the
	// caller evicts the victims.
	Preemption *Preemption
	// Capped is set when no preemption was planned and a cap on
	// evictions kept one from a node (CapPod or CapNode).
	Capped string
}

// NodeFailure is why the Pod does not fit a node.
type NodeFailure struct {
	Node, Reason string
}

// Reasons maps each failed node to why the Pod does not fit there.
func (r FilterResult) Reasons() map[string]string {
	m := make(map[string]string, len(r.Failed))
	for _, f := range r.Failed {
		m[f.Node] = f.Reason
	}
	return m
}

// Filter evaluates the Pod on every named node. With reserve (the leader
// does), it also reserves the best node for the Pod, superseding any earlier
// reservation of the same Pod, so the next scheduling cycle already sees
// this capacity as taken. The per-node work is a map lookup and a handful
// of comparisons: at 5,000 nodes a scheduling cycle must stay cheap.
func (l *Ledger) Filter(req Request, names []string, reserve bool) FilterResult {
	return FilterAppend(l, FilterResult{}, req, names, reserve)
}

// Name is a node name as a caller holds it: a string, or the bytes of a
// request read in place. A filter keeps none of them: the names it
// answers with are the ledger's own (5,000 names copied out of every
// request were most of what a scheduling cycle allocated).
type Name interface{ ~string | ~[]byte }

// FilterAppend is Filter of names of either kind, with the feasible and
// failed nodes appended to into's (emptied) slices, so a caller can reuse
// them from cycle to cycle.
func FilterAppend[N Name](l *Ledger, into FilterResult, req Request, names []N, reserve bool) FilterResult {
	res := FilterResult{Feasible: into.Feasible[:0], Failed: into.Failed[:0]}
	l.mu.Lock()
	defer l.mu.Unlock()
	prev := l.assumed[req.UID]
	var prefer types.UID
	preferNode := ""
	if prev != nil {
		if prev.state == Binding || prev.state == Bound {
			for _, name := range names {
				res.Failed = append(res.Failed, NodeFailure{nameOf(l.nodes[string(name)], name), ErrBindInProgress.Error()})
			}
			return res
		}
		switch prev.state {
		case Recovered:
			preferNode, prefer = prev.node, prev.ph
		case Nominated:
			preferNode = prev.node // the room its victims free
		}
		l.unassume(prev, false)
	}
	if r := l.reservedFor[req.UID]; preferNode == "" && r != nil && r.live {
		preferNode = r.node // a reservation a predecessor made
	}
	pr := l.newProbe(req)
	if res.Feasible == nil {
		res.Feasible = make([]string, 0, len(names))
	}
	var best verdict
	var bestNode *node
	for _, name := range names {
		n := l.nodes[string(name)]
		v := l.evaluate(pr, n, prefer)
		if !v.fits {
			res.Failed = append(res.Failed, NodeFailure{nameOf(n, name), v.reason})
			continue
		}
		res.Feasible = append(res.Feasible, n.name)
		switch {
		case bestNode == nil:
		case n.name == preferNode:
		case bestNode.name == preferNode:
			continue
		case !better(v, n.name, best, bestNode.name):
			continue
		}
		best, bestNode = v, n
	}
	if bestNode == nil && reserve && req.MayPreempt() {
		res.Preemption, res.Capped = l.nominate(pr, prev, res.Failed, preferNode)
		return res
	}
	if !reserve || bestNode == nil {
		if prev != nil && !reserve {
			l.assume(prev)
		}
		return res
	}
	l.handled[req.UID] = true // its claim annotation, if any, is this process's own
	a := &assumption{uid: req.UID, node: bestNode.name, req: pr.vec, state: Reserved,
		expires: l.opts.Clock.Now().Add(l.opts.ReservationTTL), stock: l.stockOf(req)}
	if best.ph != nil {
		a.ph = best.ph.uid
		res.Claim = &Placeholder{UID: best.ph.uid, Namespace: best.ph.ns, Name: best.ph.name, Node: bestNode.name, Spec: best.ph.stockSpec,
			Reservation: best.ph.reservedFor != ""}
	}
	l.assume(a)
	res.Chosen = bestNode.name
	return res
}

// nameOf is the name of n, the node looked up by name: the ledger's own
// string, or a copy of name for a node the ledger does not know (nil).
func nameOf[N Name](n *node, name N) string {
	if n != nil {
		return n.name
	}
	return string(name)
}

// Prioritize scores the named nodes, 0..10 (scores[i] is names[i]'s): the
// node reserved for the Pod (or the best one) gets 10, so the scheduler
// picks the node the ledger reserved; other warm nodes 5..9, other nodes
// 0..4, by how full they would be.
func (l *Ledger) Prioritize(req Request, names []string) []int64 {
	scores := make([]int64, len(names))
	l.mu.Lock()
	defer l.mu.Unlock()
	chosen := ""
	// Score the Pod as if its own reservation were not there.
	if a := l.assumed[req.UID]; a != nil {
		chosen = a.node
		l.unassume(a, false)
		defer l.assume(a)
	}
	pr := l.newProbe(req)
	var best verdict
	var bestNode *node
	bestIdx := -1
	for i, name := range names {
		n := l.nodes[name]
		v := l.evaluate(pr, n, "")
		if !v.fits {
			continue
		}
		scores[i] = score(v)
		if n.name == chosen || (chosen == "" && (bestNode == nil || better(v, n.name, best, bestNode.name))) {
			best, bestNode, bestIdx = v, n, i
		}
	}
	if bestIdx >= 0 {
		scores[bestIdx] = ReservedScore
	}
	return scores
}

func score(v verdict) int64 {
	s := int64(v.packing*4 + 0.5) // math.Round for 0 <= packing <= 1
	if v.hasStock || v.spreads {
		s += 5
	}
	return s
}

// ReservedScore is the score of the node reserved for the Pod; every
// other node scores at most ReservedScore-1. It is kube-scheduler's
// MaxExtenderPriority: with the extender's weight (profile.DefaultWeight),
// one point is worth more than all in-tree scores together, so the
// scheduler picks the reserved node.
const ReservedScore = 10

// BeginBind moves the Pod's reservation on node to Binding, or, when the
// scheduler picked another node, re-checks that node and reserves it. It
// returns the placeholder the bind must claim, if any.
func (l *Ledger) BeginBind(req Request, nodeName string) (*Placeholder, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.handled[req.UID] = true
	a := l.assumed[req.UID]
	if a != nil && (a.state == Binding || a.state == Bound) {
		return nil, ErrBindInProgress
	}
	// A recovered claim was assumed without a fit check (it records what a
	// predecessor did): check it now like any other.
	if a == nil || a.node != nodeName || a.state == Recovered || a.state == Nominated {
		var prefer types.UID
		if a != nil {
			prefer = a.ph
			l.unassume(a, false)
		}
		pr := l.newProbe(req)
		v := l.evaluate(pr, l.nodes[nodeName], prefer)
		if !v.fits {
			return nil, &NoRoomError{Node: nodeName, Reason: v.reason}
		}
		a = &assumption{uid: req.UID, node: nodeName, req: pr.vec, stock: l.stockOf(req)}
		if v.ph != nil {
			a.ph = v.ph.uid
		}
		l.assume(a)
	}
	a.state = Binding
	if a.ph == "" {
		return nil, nil
	}
	p := l.pods[a.ph]
	if p == nil {
		return nil, nil // already gone: its capacity is free and ours
	}
	return &Placeholder{UID: p.uid, Namespace: p.ns, Name: p.name, Node: nodeName, Spec: p.stockSpec, Reservation: p.reservedFor != ""}, nil
}

// EndBind records a bind's outcome. On failure the Pod's assumption is
// released; phDeleted says whether its placeholder was already deleted (its
// capacity then stays uncounted until the informer sees it go).
func (l *Ledger) EndBind(uid types.UID, ok, phDeleted bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.assumed[uid]
	if a == nil || a.state != Binding {
		return
	}
	if ok {
		if p := l.pods[uid]; p != nil && p.node == "" && p.stockSpec != "" {
			// A placeholder: record it bound now rather than when the
			// informer says so. The scheduler retries Pods waiting for stock
			// on this very binding, and their filter must already see it.
			l.unassume(a, false)
			p.node, p.counted = a.node, true
			l.addRec(p)
			return
		}
		a.state = Bound
		a.expires = l.opts.Clock.Now().Add(l.opts.BoundTTL)
		return
	}
	l.unassume(a, phDeleted)
}

// Assumed reports a Pod's assumption, for tests and diagnostics.
func (l *Ledger) Assumed(uid types.UID) (nodeName string, state State, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.assumed[uid]
	if a == nil {
		return "", 0, false
	}
	return a.node, a.state, true
}

// Free is a node's allocatable minus what the ledger counts as used.
func (l *Ledger) Free(nodeName string) Resources {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.nodes[nodeName]
	if n == nil {
		return Resources{}
	}
	free := vec{}
	free.add(n.alloc)
	free.sub(n.used)
	return l.unpack(free)
}

// StockCount is the placeholders of one spec on one node.
type StockCount struct {
	Node, Spec string
	// Available are Running and unclaimed; Total includes pending-delete and
	// claimed ones still present.
	Available, Total int
}

// Stock lists placeholder counts per node and spec.
func (l *Ledger) Stock() []StockCount {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []StockCount
	for _, n := range l.nodes {
		for spec, m := range n.stock {
			c := StockCount{Node: n.name, Spec: spec, Total: len(m)}
			for _, p := range m {
				if p.claimable() {
					c.Available++
				}
			}
			out = append(out, c)
		}
	}
	return out
}
