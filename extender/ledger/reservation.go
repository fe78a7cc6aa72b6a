package ledger

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/runplane/runplane/api"
)

// A reservation is a Pod the extender binds (nodeName set at creation, so
// no scheduler is involved) to the node where a GPU Pod preempts, sized
// like that Pod, and deletes at once, its finalizer holding it: every
// scheduler counts it as assigned (a Pod being deleted holds its room
// until it is gone), so the room the victims free cannot go to a Pod of
// another scheduler (the nomination itself lives in this ledger, which
// only the runplane-scheduler asks), while a kubelet never runs it. Only
// its preemptor may take it, at bind: its Binding first, then the
// finalizer goes. It is live while its finalizer stands.

// ReservationRequest is a reservation the extender must create.
type ReservationRequest struct {
	// For is the preempting Pod.
	For             types.UID
	Namespace, Name string
	Node            string
	Requests        Resources
}

// addReservation indexes a reservation Pod and gives it to its
// preemptor's nomination on the same node, which then holds the room
// through it (one count, not two). Callers hold l.mu.
func (l *Ledger) addReservation(r *podRec) {
	l.resv[r.uid] = r
	l.reservedFor[r.reservedFor] = r
	if a := l.assumed[r.reservedFor]; a != nil && a.state == Nominated && a.ph == "" {
		l.unassume(a, false)
		l.holdReservation(a)
		l.assume(a)
	}
}

// holdReservation makes a nomination hold the room through its Pod's
// reservation, when that is on the nominated node. Callers hold l.mu,
// before assume(a).
func (l *Ledger) holdReservation(a *assumption) {
	if r := l.reservedFor[a.uid]; r != nil && r.node == a.node && r.counted && r.live && r.claimedBy == "" {
		a.ph = r.uid
	}
}

// forgetReservation drops a deleted reservation Pod's index entries.
func (l *Ledger) forgetReservation(p *podRec) {
	if p.reservedFor == "" {
		return
	}
	delete(l.resv, p.uid)
	delete(l.resvDrop, p.uid)
	if l.reservedFor[p.reservedFor] == p {
		delete(l.reservedFor, p.reservedFor)
	}
	// A nomination keeps holding the room itself (a kubelet rejected the
	// reservation, or someone deleted it): the extender makes another.
	if a := l.assumed[p.reservedFor]; a != nil && a.state == Nominated && a.ph == p.uid {
		a.ph = ""
	}
}

// rejectedReservation notes a reservation Pod that turned terminal: a
// kubelet wrote the phase of the Pod it stopped (where the chart's policy
// runplane-reservation-status does not refuse it), and schedulers no
// longer count it. The extender releases it and makes another once the
// room is free.
func (l *Ledger) rejectedReservation(pod *corev1.Pod) {
	if l.opts.ReservationNamespace == "" || pod.Namespace != l.opts.ReservationNamespace {
		return
	}
	forUID := types.UID(pod.Labels[api.LabelReservedFor])
	if forUID == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rejected[forUID] = Placeholder{UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name, Node: pod.Spec.NodeName, Reservation: true}
	l.rejectedOnce[forUID] = true
}

// forgetRejected: uid is gone — a rejected reservation (now deleted),
// or a preemptor. Callers hold l.mu.
func (l *Ledger) forgetRejected(uid types.UID) {
	delete(l.rejectedOnce, uid)
	delete(l.rejected, uid)
	for x, ph := range l.rejected {
		if ph.UID == uid {
			delete(l.rejected, x)
		}
	}
}

// Reservations is the extender's work: the reservations to create (a
// nomination holds no reservation on its node) and the ones to delete —
// rejected by a kubelet, or stale: the preemptor is gone or bound, no
// nomination holds them any more (it expired, or the eviction failed),
// the preemptor's room is now on another node, or, without any
// nomination of its Pod (a new leader), older than NominationTTL.
func (l *Ledger) Reservations() (create []ReservationRequest, remove []Placeholder) {
	now := l.opts.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.resv {
		if !r.live {
			continue
		}
		x := l.pods[r.reservedFor]
		a := l.assumed[r.reservedFor]
		stale := x == nil || x.node != "" || l.resvDrop[r.uid] ||
			(a != nil && a.node != r.node) ||
			(a == nil && now.Sub(r.created) > l.opts.NominationTTL)
		if stale {
			remove = append(remove, Placeholder{UID: r.uid, Namespace: r.ns, Name: r.name, Node: r.node, Reservation: true})
		}
	}
	for _, ph := range l.rejected {
		remove = append(remove, ph)
	}
	for uid, a := range l.assumed {
		if a.state != Nominated || a.ph != "" || l.reservedFor[uid] != nil {
			continue
		}
		if _, pending := l.rejected[uid]; pending {
			continue // its name is still taken
		}
		// After a kubelet refused one, the next waits until the room is
		// free, or it is refused again (see extender/README.md).
		if l.rejectedOnce[uid] && !l.roomNow(a) {
			continue
		}
		x := l.pods[uid]
		if x == nil {
			continue
		}
		create = append(create, ReservationRequest{For: uid, Namespace: x.ns, Name: x.name, Node: a.node, Requests: l.unpack(l.withoutDevices(a.req))})
	}
	return create, remove
}

// roomNow: the node holds a's room besides a itself (its victims are
// gone). Callers hold l.mu.
func (l *Ledger) roomNow(a *assumption) bool {
	n := l.nodes[a.node]
	if n == nil || !n.exists {
		return false
	}
	var nz []int
	for i, x := range a.req {
		if x > 0 {
			nz = append(nz, i)
		}
	}
	ok, _ := fitsVec(n.alloc, n.used, a.req, a.req, nz)
	return ok
}
