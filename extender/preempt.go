package extender

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	policylisters "k8s.io/client-go/listers/policy/v1"

	"github.com/runplane/runplane/extender/ledger"
)

// Why the extender, not kube-scheduler's DefaultPreemption, picks victims:
// the runplane-scheduler profile disables NodeResourcesFit (the ledger is
// the resource authority, so stock can be taken), and with no in-tree
// filter failing, the default preemption's dry run reprieves every Pod and
// turns each node into an error ("expected at least one victim pod",
// k8s.io/kubernetes v1.36 and v1.37 pkg/scheduler/framework/preemption DryRunPreemption).
// So filter reports failed nodes as unresolvable, as before, and when no
// node fits the leader's ledger plans the preemption (Ledger.Filter) and
// this file evicts the victims, off the scheduling path.

// preemption is a plan the filter made: evict Victims for Pod.
type preemption struct {
	pod  types.NamespacedName
	uid  types.UID
	plan ledger.Preemption
	// preemptor is the Pod the plan is for (the related object of the
	// victims' Events).
	preemptor *corev1.Pod
}

// preemptQueue bounds the plans waiting for eviction; a plan that does not
// fit is dropped and made again at the Pod's next scheduling cycle.
const preemptQueue = 256

// enqueuePreemption hands a plan to the evictor without blocking the filter.
// "planned" counts nominations, not scheduling cycles: a Pod waiting for
// its victims is planned again at each cycle (Renewed) and evicts what is
// not terminating yet.
func (e *Extender) enqueuePreemption(pod *corev1.Pod, plan *ledger.Preemption) {
	if !plan.Renewed {
		e.metrics.preemptions.WithLabelValues("planned").Inc()
	}
	e.kickReservations()
	if len(plan.Evict) == 0 {
		return // only waiting for Pods already terminating, or evicted already
	}
	select {
	case e.preempts <- preemption{pod: types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}, uid: pod.UID, plan: *plan, preemptor: pod}:
	default:
		// The plan's victims are marked evicted already: a nomination kept
		// would be renewed with nothing to evict, holding the room for
		// good. Dropped, it is planned afresh at the Pod's next try.
		e.metrics.preemptions.WithLabelValues("dropped").Inc()
		e.ledger.Unnominate(pod.UID)
	}
}

// evictVictims runs the plans, one at a time, until ctx ends.
func (e *Extender) evictVictims(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case p := <-e.preempts:
			// The reservation first: from then on no scheduler places a
			// Pod in the room the plan counts on, free now or freed by
			// the victims (reservations.go).
			e.syncReservations(ctx)
			if err := e.evictPlan(ctx, p); err != nil {
				// The room stays held only as long as the plan can succeed.
				e.ledger.Unnominate(p.uid)
				e.metrics.preemptions.WithLabelValues("failed").Inc()
				e.log.Info("preemption failed", "pod", p.pod.String(), "node", p.plan.Node, "err", err)
				continue
			}
			e.metrics.preemptions.WithLabelValues("evicted").Inc()
			e.log.Info("preempting", "pod", p.pod.String(), "node", p.plan.Node, "victims", len(p.plan.Evict))
		}
	}
}

// evictPlan evicts every victim through the Eviction API, so
// PodDisruptionBudgets are enforced by the API server even when the
// extender's view of them is stale, and each victim terminates with its own
// grace period.
func (e *Extender) evictPlan(ctx context.Context, p preemption) error {
	for _, v := range p.plan.Evict {
		uid := v.UID
		ev := &policyv1.Eviction{
			ObjectMeta:    metav1.ObjectMeta{Namespace: v.Namespace, Name: v.Name},
			DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
		}
		err := e.client.PolicyV1().Evictions(v.Namespace).Evict(ctx, ev)
		switch {
		case err == nil:
			e.metrics.evictions.Inc()
			e.recordPreempted(v, p)
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			// Evicted, or already gone (Conflict: the name holds a newer Pod).
		case apierrors.IsTooManyRequests(err):
			return fmt.Errorf("evicting %s/%s for %s: a PodDisruptionBudget allows no disruption now: %w", v.Namespace, v.Name, p.pod, err)
		default:
			return fmt.Errorf("evicting %s/%s for %s: %w", v.Namespace, v.Name, p.pod, err)
		}
	}
	return nil
}

// disruptionGuard reports Pods a PodDisruptionBudget protects now (it
// allows no disruption), so the ledger plans around them.
type disruptionGuard struct {
	lister policylisters.PodDisruptionBudgetLister
}

func (g disruptionGuard) protected(namespace string, podLabels map[string]string) bool {
	if g.lister == nil {
		return false
	}
	pdbs, err := g.lister.PodDisruptionBudgets(namespace).List(labels.Everything())
	if err != nil {
		return false // the Eviction API still enforces them
	}
	for _, pdb := range pdbs {
		if pdb.Status.DisruptionsAllowed > 0 || pdb.Spec.Selector == nil {
			continue
		}
		// policy/v1: an empty selector selects every Pod of the namespace.
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			continue
		}
		if sel.Matches(labels.Set(podLabels)) {
			return true
		}
	}
	return false
}
