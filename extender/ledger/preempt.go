package ledger

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/runplane/runplane/internal/priorityclass"
)

// Victim is a Pod a preemption evicts to make room.
type Victim struct {
	UID             types.UID
	Namespace, Name string
	Priority        int32
	// Foreign: scheduled by another scheduler than runplane's.
	Foreign bool
}

// Preemption is how a Pod that fits no node gets room: the lower-priority
// Pods to evict on Node, and how many Pods already terminating there it
// waits for. The Pod holds the room (a Nominated assumption) meanwhile.
type Preemption struct {
	Node    string
	Victims []Victim
	// Waiting counts the Pods on Node that are already terminating (any
	// Pod being deleted, whatever its priority or why): room that is coming.
	Waiting int
	// Renewed: the Pod already held a nomination on Node (a later
	// scheduling cycle of the same Pod planned again); a new nomination
	// is false. Count plans on !Renewed: once per nomination.
	Renewed bool
	// Evict are the Victims not yet planned for this nomination: the
	// ones to evict now (the others are being evicted already).
	Evict []Victim
}

// Reason is the filter's message for the nominated node; the scheduler
// shows it in the Pod's FailedScheduling event.
func (p *Preemption) Reason() string {
	if len(p.Victims) == 0 {
		// Any terminating Pod counts, not only victims of this Pod.
		return fmt.Sprintf("waiting for %d terminating Pod(s) on the node to be gone; the Pod binds then", p.Waiting)
	}
	names := make([]string, len(p.Victims))
	for i, v := range p.Victims {
		names[i] = v.Namespace + "/" + v.Name
	}
	return fmt.Sprintf("preempting %d lower-priority Pod(s) (%s); the Pod binds once they are gone", len(p.Victims), strings.Join(names, ", "))
}

// Reasons appended to a failed node's when the Pod may preempt but cannot
// here: fixed strings, so the scheduler's event aggregates them.
const (
	noVictims    = "; no lower-priority Pods to preempt"
	notEnoughWay = "; preempting every lower-priority Pod would not make room"
)

// plan is one node's preemption and how it ranks.
type plan struct {
	Preemption
	maxPrio int32 // highest victim priority
	// why is set when preemption cannot make room on the node; capped
	// names the cap that kept it (CapPod, CapNode).
	why, capped string
	// refilled: Pods of another scheduler took room this Pod's evictions
	// freed on the node (its plan needed new ones of them).
	refilled bool
}

// less ranks plans: fewest Pods evicted, then the lowest-priority
// victims, then the node name.
func (a *plan) less(b *plan) bool {
	switch {
	case len(a.Victims) != len(b.Victims):
		return len(a.Victims) < len(b.Victims)
	case a.maxPrio != b.maxPrio:
		return a.maxPrio < b.maxPrio
	}
	return a.Node < b.Node
}

// Caps on evictions (FilterResult.Capped).
const (
	CapPod  = "pod"
	CapNode = "node"
)

// evictionWindow is the period of the eviction caps.
const evictionWindow = time.Minute

// preemptRec is what the ledger remembers of a preempting Pod until it
// binds or goes.
type preemptRec struct {
	node    string             // of its current nomination, "" when none
	foreign bool               // that nomination's victims include other schedulers' Pods
	evicted map[types.UID]bool // victims planned for that nomination
	// owners are the controllers of every victim planned for the Pod, and
	// when first: a replacement of a victim (created since) is never a
	// victim of the same Pod again (that is the churn loop).
	owners map[types.UID]time.Time
	times  []time.Time // when each victim was planned, for the cap per Pod
}

// replacement: q's controller lost a victim to this Pod before q was
// created (creation times have whole seconds: the second of the eviction
// counts as after it).
func (st *preemptRec) replacement(q *podRec) bool {
	if q.owner == "" || st.evicted[q.uid] {
		return false
	}
	first, ok := st.owners[q.owner]
	return ok && !q.created.Before(first.Truncate(time.Second))
}

// recent drops the times older than the window and counts the rest.
func recent(ts []time.Time, now time.Time) []time.Time {
	i := 0
	for i < len(ts) && now.Sub(ts[i]) >= evictionWindow {
		i++
	}
	return ts[i:]
}

// preempt finds, among the failed nodes, the one where evicting the fewest
// lower-priority Pods makes room for the request (preferring the node it
// already nominated), and adds to every other failed node's reason why
// preemption does not help there. capped is set when no node has a plan
// and a cap kept one. Callers hold l.mu for writing.
func (l *Ledger) preempt(pr *probe, failed []NodeFailure, preferNode string, now time.Time) (_ *Preemption, capped string) {
	st := l.preempts[pr.req.UID]
	gone := l.goneClaims(pr)
	var best *plan
	for i := range failed {
		n := l.nodes[failed[i].Node]
		if n == nil || !n.exists {
			continue
		}
		p := l.planOn(pr, n, st, gone[n.name], now)
		if p.refilled {
			// The room this Pod's evictions freed here went to Pods of
			// another scheduler: evicting them again would churn.
			l.nominationEnded(pr.req.UID, n.name, now)
			p = l.planOn(pr, n, st, gone[n.name], now)
		}
		if p.why != "" {
			failed[i].Reason += p.why
			if p.capped != "" && capped == "" {
				capped = p.capped
			}
			continue
		}
		switch {
		case best == nil, n.name == preferNode:
		case best.Node == preferNode, !p.less(best):
			continue
		}
		best = p
	}
	if best == nil {
		return nil, capped
	}
	return &best.Preemption, ""
}

// nominate plans the preemption for a Pod that fits none of the failed
// nodes and nominates it on the plan's node, which then holds the room;
// prev is the Pod's earlier assumption (unassumed already), preferNode the
// node to keep. The plan's node's reason becomes the plan's. Callers hold
// l.mu for writing.
func (l *Ledger) nominate(pr *probe, prev *assumption, failed []NodeFailure, preferNode string) (_ *Preemption, capped string) {
	now := l.opts.Clock.Now()
	uid := pr.req.UID
	p, capped := l.preempt(pr, failed, preferNode, now)
	if p == nil {
		return nil, capped
	}
	p.Renewed = prev != nil && prev.state == Nominated && prev.node == p.Node
	if prev != nil && prev.state == Nominated && prev.node != p.Node {
		l.nominationEnded(uid, prev.node, now)
	}
	l.recordPlan(uid, p, now)
	l.handled[uid] = true
	a := &assumption{uid: uid, node: p.Node, req: pr.vec, state: Nominated, expires: now.Add(l.opts.NominationTTL)}
	l.holdReservation(a)
	l.assume(a)
	for i := range failed {
		if failed[i].Node == p.Node {
			failed[i].Reason = p.Reason()
		}
	}
	return p, ""
}

// PlanPreemption is Filter's preemption for a Pod kube-scheduler cannot
// bring to the extender: a Pod of a DRA spec short of devices, which
// DynamicResources rejects on every node before any extender is asked
// (its default preemption never frees a victim's devices either). Called
// outside the scheduling cycle (the leader's DRA queue, after TakeStock
// found no stock), it plans over names as Filter would when no node
// fits, and nominates the Pod: the room — the victims' devices included —
// is the Pod's until it binds or the nomination expires, so the
// extender's filter refuses it to every other Pod. A plan again while the
// Pod waits renews the nomination (Renewed), as a scheduling cycle does.
// Nothing is planned when a node fits (the scheduler places the Pod
// there; a nomination it holds stays as it is), when the Pod may not
// preempt, or while it holds a reservation or a bind (a scheduling
// cycle has it).
func (l *Ledger) PlanPreemption(req Request, names []string) (_ *Preemption, capped string) {
	if !req.MayPreempt() {
		return nil, ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	prev := l.assumed[req.UID]
	preferNode := ""
	switch {
	case prev != nil && prev.state != Nominated:
		return nil, ""
	case prev != nil:
		preferNode = prev.node
		l.unassume(prev, false)
	default:
		if r := l.reservedFor[req.UID]; r != nil && r.live {
			preferNode = r.node // a reservation a predecessor made
		}
	}
	pr := l.newProbe(req)
	pr.phNamespace = req.Namespace // as TakeStock: only its namespace's claims
	failed := make([]NodeFailure, 0, len(names))
	for _, name := range names {
		n := l.nodes[name]
		v := l.evaluate(pr, n, "")
		if v.fits {
			if prev != nil {
				l.assume(prev) // its room, until the scheduler binds it
			}
			return nil, ""
		}
		failed = append(failed, NodeFailure{nameOf(n, name), v.reason})
	}
	return l.nominate(pr, prev, failed, preferNode)
}

// Reasons appended to a failed node's (fixed strings, so the scheduler's
// event aggregates them).
const (
	backingOff = "; Pods of other schedulers here are not preempted again for a while (an eviction here did not lead to a bind)"
	podCapped  = "; this Pod reached its cap of evictions per minute"
	nodeCapped = "; the node reached its cap of evictions per minute"
)

// planOn picks the victims on one node the way kube-scheduler's default
// preemption does: remove every eligible lower-priority Pod, then
// reprieve them, most important first, while the request still fits.
// Pods already terminating, and the Pod's own reservation, count as room.
// Eligible: unprotected by a PodDisruptionBudget, below runplane's own
// priority, holding some resource the request is short of on the node (a
// CPU-only Pod frees nothing where GPUs are missing), not a replacement of
// a Pod already evicted for this request, and not another scheduler's
// while the node backs off. gone are the node's devices of claims whose
// Pods are gone (goneClaims): room that is coming too.
func (l *Ledger) planOn(pr *probe, n *node, st *preemptRec, gone goneRoom, now time.Time) *plan {
	req := &pr.req
	p := &plan{Preemption: Preemption{Node: n.name}, maxPrio: math.MinInt32}
	free := vec{}
	free.add(n.alloc)
	free.sub(n.used)
	free.add(gone.devices)
	p.Waiting += gone.claims
	var lower []*podRec
	for _, q := range n.pods {
		switch {
		case !q.live:
			free.add(q.frees())
			p.Waiting++
		case l.victimOf[q.uid] != "" && l.victimOf[q.uid] != req.UID:
			// Another Pod's victim, its eviction under way: the room is
			// coming, and that Pod's nomination already counts it as used.
			free.add(q.frees())
		case q.reservedFor == req.UID:
			free.add(q.frees()) // the room this Pod's preemption holds
		case q.stockSpec != "":
			// Placeholders of other specs are never touched (that spec's
			// headroom); one of the Pod's own spec is taken at bind, as
			// stock, which evaluate already offered.
		case q.priority < req.Priority && q.priority < priorityclass.SystemValue && (req.Protected == nil || !req.Protected(q.ns, q.labels)):
			// runplane's own Pods (priorityclass.SystemValue) are never
			// victims, whatever tier a cluster admin adds above them.
			lower = append(lower, q)
		}
	}
	backoff := now.Before(l.backoff[n.name])
	sameNode := st != nil && st.node == n.name && len(st.evicted) > 0
	base := append(vec{}, free...)
	var cands []*podRec
	excluded := false
	for _, q := range lower {
		switch {
		case !freesShort(q.frees(), base, pr):
			continue
		case st != nil && st.replacement(q):
			continue
		case q.foreign && backoff:
			excluded = true
			continue
		}
		cands = append(cands, q)
		free.add(q.frees())
	}
	if ok, _ := fitsVec(free, nil, nil, pr.vec, pr.nz); !ok {
		switch {
		case excluded:
			p.why = backingOff
		case len(lower) > 0:
			p.why = notEnoughWay
		default:
			p.why = noVictims
		}
		return p
	}
	// Most important first: they are the first reprieved.
	sort.Slice(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.priority != b.priority {
			return a.priority > b.priority
		}
		return a.uid < b.uid
	})
	fresh := 0
	refilled := false
	for _, q := range cands {
		free.sub(q.frees())
		if ok, _ := fitsVec(free, nil, nil, pr.vec, pr.nz); ok {
			continue // reprieved
		}
		free.add(q.frees())
		p.Victims = append(p.Victims, Victim{UID: q.uid, Namespace: q.ns, Name: q.name, Priority: q.priority, Foreign: q.foreign})
		p.maxPrio = max(p.maxPrio, q.priority)
		if st == nil || !st.evicted[q.uid] {
			fresh++
			refilled = refilled || (q.foreign && sameNode)
		}
	}
	p.refilled = refilled
	// Victims were found least important last; evict in a stable order.
	sort.Slice(p.Victims, func(i, j int) bool { return p.Victims[i].UID < p.Victims[j].UID })
	switch {
	case len(p.Victims) == 0 && p.Waiting == 0:
		p.why = noVictims
	case st != nil && len(recent(st.times, now))+fresh > l.opts.MaxEvictionsPerPod:
		p.why, p.capped = podCapped, CapPod
	case len(recent(l.evictions[n.name], now))+fresh > l.opts.MaxEvictionsPerNode:
		p.why, p.capped = nodeCapped, CapNode
	case st == nil && fresh > l.opts.MaxEvictionsPerPod:
		p.why, p.capped = podCapped, CapPod
	}
	if p.why != "" {
		p.refilled = false
	}
	return p
}

// freesShort: q holds some resource the request is short of on the node,
// with free the room before any victim.
func freesShort(q, free vec, pr *probe) bool {
	for _, i := range pr.nz {
		if at(free, i) < at(pr.vec, i) && at(q, i) > 0 {
			return true
		}
	}
	return false
}

// recordPlan remembers the victims of the Pod's plan (new ones count
// against the caps). Callers hold l.mu.
func (l *Ledger) recordPlan(uid types.UID, p *Preemption, now time.Time) {
	st := l.preempts[uid]
	if st == nil {
		st = &preemptRec{owners: map[types.UID]time.Time{}}
		l.preempts[uid] = st
	}
	if st.node != p.Node {
		st.node, st.foreign, st.evicted = p.Node, false, map[types.UID]bool{}
	}
	st.times = recent(st.times, now)
	l.evictions[p.Node] = recent(l.evictions[p.Node], now)
	p.Evict = nil
	for _, v := range p.Victims {
		if st.evicted[v.UID] {
			continue
		}
		p.Evict = append(p.Evict, v)
		l.victimOf[v.UID] = uid
		st.evicted[v.UID] = true
		st.foreign = st.foreign || v.Foreign
		if q := l.pods[v.UID]; q != nil && q.owner != "" {
			if _, ok := st.owners[q.owner]; !ok {
				st.owners[q.owner] = now
			}
		}
		st.times = append(st.times, now)
		l.evictions[p.Node] = append(l.evictions[p.Node], now)
	}
}

// nominationEnded: the Pod's nomination on node ended without a bind
// there (it expired, an eviction failed, or its room moved). If Pods of
// another scheduler were evicted for it, they are not preempted on that
// node again during the back-off; its reservation there goes. Callers
// hold l.mu.
func (l *Ledger) nominationEnded(uid types.UID, node string, now time.Time) {
	if r := l.reservedFor[uid]; r != nil && r.node == node {
		l.resvDrop[r.uid] = true
	}
	st := l.preempts[uid]
	if st == nil || st.node != node {
		return
	}
	if st.foreign {
		l.backoff[node] = now.Add(l.opts.PreemptBackoff)
	}
	for v := range st.evicted {
		if l.victimOf[v] == uid {
			delete(l.victimOf, v)
		}
	}
	st.node, st.foreign, st.evicted = "", false, nil
}

// preemptorBound: the Pod was bound on node ("" when it is gone); a
// preemption for it elsewhere did not lead to a bind. Callers hold l.mu.
func (l *Ledger) preemptorBound(uid types.UID, node string) {
	st := l.preempts[uid]
	if st == nil {
		return
	}
	if st.node != "" && st.node != node {
		l.nominationEnded(uid, st.node, l.opts.Clock.Now())
	}
	for v := range st.evicted {
		if l.victimOf[v] == uid {
			delete(l.victimOf, v)
		}
	}
	delete(l.preempts, uid)
}

// Unnominate drops a Pod's nomination (its victims could not be evicted):
// the room is nobody's until the Pod's next scheduling cycle plans again.
func (l *Ledger) Unnominate(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if a := l.assumed[uid]; a != nil && a.state == Nominated {
		l.unassume(a, false)
		l.nominationEnded(uid, a.node, l.opts.Clock.Now())
	}
}
