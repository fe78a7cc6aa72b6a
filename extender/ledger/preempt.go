package ledger

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/runplane/runplane/internal/priorityclass"
)

// Victim is a Pod a preemption evicts to make room.
type Victim struct {
	UID             types.UID
	Namespace, Name string
	Priority        int32
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
	// why is set when preemption cannot make room on the node.
	why string
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

// preempt finds, among the failed nodes, the one where evicting the fewest
// lower-priority Pods makes room for the request (preferring the node it
// already nominated), and adds to every other failed node's reason why
// preemption does not help there. Callers hold l.mu for writing.
func (l *Ledger) preempt(pr *probe, failed []NodeFailure, preferNode string) *Preemption {
	var best *plan
	for i := range failed {
		n := l.nodes[failed[i].Node]
		if n == nil || !n.exists {
			continue
		}
		p := l.planOn(pr, n)
		if p.why != "" {
			failed[i].Reason += p.why
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
		return nil
	}
	return &best.Preemption
}

// planOn picks the victims on one node the way kube-scheduler's default
// preemption does: remove every lower-priority (unprotected) Pod, then
// reprieve them, most important first, while the request still fits. Pods
// already terminating count as room that is coming.
func (l *Ledger) planOn(pr *probe, n *node) *plan {
	req := &pr.req
	p := &plan{Preemption: Preemption{Node: n.name}, maxPrio: math.MinInt32}
	free := vec{}
	free.add(n.alloc)
	free.sub(n.used)
	var cands []*podRec
	for _, q := range n.pods {
		switch {
		case !q.live:
			free.add(q.req)
			p.Waiting++
		case q.stockSpec != "":
			// Placeholders of other specs are never touched (that spec's
			// headroom); one of the Pod's own spec is taken at bind, as
			// stock, which evaluate already offered.
		case q.priority < req.Priority && q.priority < priorityclass.SystemValue && (req.Protected == nil || !req.Protected(q.ns, q.labels)):
			// runplane's own Pods (priorityclass.SystemValue) are never
			// victims, whatever tier a cluster admin adds above them.
			cands = append(cands, q)
			free.add(q.req)
		}
	}
	if ok, _ := fitsVec(free, nil, nil, pr.vec, pr.nz); !ok {
		p.why = noVictims
		if len(cands) > 0 {
			p.why = notEnoughWay
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
	for _, q := range cands {
		free.sub(q.req)
		if ok, _ := fitsVec(free, nil, nil, pr.vec, pr.nz); ok {
			continue // reprieved
		}
		free.add(q.req)
		p.Victims = append(p.Victims, Victim{UID: q.uid, Namespace: q.ns, Name: q.name, Priority: q.priority})
		p.maxPrio = max(p.maxPrio, q.priority)
	}
	// Victims were found least important last; evict in a stable order.
	sort.Slice(p.Victims, func(i, j int) bool { return p.Victims[i].UID < p.Victims[j].UID })
	if len(p.Victims) == 0 && p.Waiting == 0 {
		p.why = noVictims
	}
	return p
}

// Unnominate drops a Pod's nomination (its victims could not be evicted):
// the room is nobody's until the Pod's next scheduling cycle plans again.
func (l *Ledger) Unnominate(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if a := l.assumed[uid]; a != nil && a.state == Nominated {
		l.unassume(a, false)
	}
}
