package ledger

import (
	"cmp"
	"slices"

	"k8s.io/apimachinery/pkg/types"
)

// stockRef is a claimable placeholder in its node's index (node.ready):
// the fields a filter checks, copied out of its record. A GPU Pod that
// has to take stock checks the placeholders of every node it is asked
// about; reading them through their records was four or five cache
// misses per placeholder (a record spans five cache lines, its requests
// and UID are allocations of their own), 19% of the takeover shape's CPU
// and most of its p99 over the goal (extender/README.md). Copies go stale
// when the record changes, so every change of what they copy goes
// through removeRec/addRec or refresh.
type stockRef struct {
	uid     types.UID
	pledged types.UID
	rec     *podRec
	// frees is rec.frees() when it has at most inlineSlots slots (the
	// rest zero); wide holds it otherwise.
	frees [inlineSlots]int64
	wide  vec
}

func newStockRef(p *podRec) stockRef {
	r := stockRef{uid: p.uid, pledged: p.pledged, rec: p}
	if f := p.frees(); len(f) <= inlineSlots {
		copy(r.frees[:], f)
	} else {
		r.wide = f
	}
	return r
}

// fits: the request fits the node once the placeholder is gone.
func (r *stockRef) fits(n *node, pr *probe) bool {
	if r.wide != nil {
		ok, _ := fitsVec(n.alloc, n.used, r.wide, pr.vec, pr.nz)
		return ok
	}
	for _, i := range pr.nz {
		if at(n.alloc, i)-at(n.used, i)+r.freesAt(i) < pr.vec[i] {
			return false
		}
	}
	return true
}

// freesAt is frees' slot i.
func (r *stockRef) freesAt(i int) int64 {
	switch {
	case r.wide != nil:
		return at(r.wide, i)
	case i < inlineSlots:
		return r.frees[i]
	}
	return 0
}

func byUID(r stockRef, uid types.UID) int { return cmp.Compare(r.uid, uid) }

// readyOf are the claimable placeholders of spec index i on n, by UID
// (the order a filter's choice among them follows); none for i < 0.
func (n *node) readyOf(i int) []stockRef {
	if i < 0 || i >= len(n.ready) {
		return nil
	}
	return n.ready[i]
}

// pick is the placeholder the request takes on n, and what taking it
// frees of the request's primary resource: of those it may take and fits
// in, the preferred one, else the lowest UID, so every cycle agrees. The
// index is in UID order: without a preference the first will do. Only
// the index is read, not the records.
func (n *node) pick(pr *probe, prefer types.UID) (*podRec, int64) {
	ready, pick := n.readyOf(pr.warm), -1
	for i := range ready {
		r := &ready[i]
		if (r.pledged != "" && r.pledged != pr.req.UID) || !pr.mayTake(r.rec) || !r.fits(n, pr) {
			continue
		}
		if pick < 0 || r.uid == prefer {
			pick = i
		}
		if prefer == "" || ready[pick].uid == prefer {
			break
		}
	}
	if pick < 0 {
		return nil, 0
	}
	return ready[pick].rec, ready[pick].freesAt(pr.prim)
}

// index adds p to n's index if it is claimable. Callers hold l.mu.
func (l *Ledger) index(n *node, p *podRec) {
	if !p.claimable() {
		return
	}
	i := l.specIndex(p.stockSpec)
	for len(n.ready) <= i {
		n.ready = append(n.ready, nil)
	}
	list := n.ready[i]
	at, found := slices.BinarySearchFunc(list, p.uid, byUID)
	if found {
		list[at] = newStockRef(p)
		return
	}
	n.ready[i] = slices.Insert(list, at, newStockRef(p))
}

// unindex removes p from n's index (whether or not it is still claimable:
// what was indexed goes). Callers hold l.mu.
func (l *Ledger) unindex(n *node, p *podRec) {
	i, ok := l.specs[p.stockSpec]
	if !ok || p.stockSpec == "" || i >= len(n.ready) {
		return
	}
	list := n.ready[i]
	if at, found := slices.BinarySearchFunc(list, p.uid, byUID); found {
		n.ready[i] = slices.Delete(list, at, at+1)
	}
}

// refresh recomputes what deleting the Pod frees and whom it is pledged
// to, and re-indexes it: the index holds copies of both. Callers hold
// l.mu.
func (l *Ledger) refresh(p *podRec) {
	n := l.nodes[p.node]
	if n != nil {
		l.unindex(n, p)
	}
	p.setHeld(l.heldOf(p.uid, p.ns))
	l.pledge(p)
	if n != nil {
		l.index(n, p)
	}
}

// mayTake: a placeholder holding devices (a DRA spec's, its allocated
// claim) is stock of its own namespace — its claim can be handed only to a
// Pod there, and the chart keeps such stock per tenant namespace — so a Pod
// of another namespace never takes it (it would only delete another
// tenant's stock for its CPU and memory); a hand-over limits it further
// (phNamespace).
func (pr *probe) mayTake(ph *podRec) bool {
	if pr.phNamespace != "" && ph.ns != pr.phNamespace {
		return false
	}
	return ph.free == nil || ph.ns == pr.req.Namespace
}
