package extender

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"

	"github.com/runplane/runplane/extender/ledger"
	"github.com/runplane/runplane/internal/kubeevents"
)

// Reasons of the Events the extender records. A bind records none: the
// scheduler's own Scheduled Event says where the Pod went and the Binding's
// claim annotation (runplane.io/claimed-stock) what it took, and an Event
// per bound Pod was one API write in seven of a takeover
// (extender/README.md, BindThroughput).
const (
	// ReasonPreempted: a Pod was evicted to make room for a higher-priority
	// GPU Pod (kube-scheduler's own preemption uses the same reason).
	ReasonPreempted = "Preempted"
	// ReasonPreemptionCapped (Warning, on the GPU Pod): a cap on
	// evictions kept the preemption that would make room for it.
	ReasonPreemptionCapped = "PreemptionCapped"
)

// eventRecorder starts the broadcaster (kubeevents.Start: in order in
// kubectl describe). Eventf only queues: the broadcaster writes from its
// own goroutine, so recording adds no API round trip to the caller (and
// drops Events, never blocks, when the API server is slow).
func eventRecorder(ctx context.Context, c kubernetes.Interface) events.EventRecorder {
	return kubeevents.Start(ctx, c, "runplane-extender")
}

// recordPreempted records, on a victim the extender evicted, which Pod it
// made room for and where.
func (e *Extender) recordPreempted(v ledger.Victim, p preemption) {
	if e.events == nil {
		return
	}
	victim := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: v.Namespace, Name: v.Name, UID: v.UID}}
	prio := int32(0)
	if p.preemptor.Spec.Priority != nil {
		prio = *p.preemptor.Spec.Priority
	}
	e.events.Eventf(victim, p.preemptor, corev1.EventTypeNormal, ReasonPreempted, "Preempt",
		"Preempted by %s (priority %d, this Pod's %d) to make room on %s", p.pod, prio, v.Priority, p.plan.Node)
}

// recordCapped warns on a GPU Pod that a cap on evictions kept its
// preemption (the Pod waits, or binds when room frees up otherwise).
func (e *Extender) recordCapped(pod *corev1.Pod, capped string) {
	e.metrics.preemptionCaps.WithLabelValues(capped).Inc()
	if e.events == nil {
		return
	}
	what := "this Pod's evictions"
	if capped == ledger.CapNode {
		what = "the evictions on the node"
	}
	e.events.Eventf(pod, nil, corev1.EventTypeWarning, ReasonPreemptionCapped, "Preempt",
		"Not preempting: %s reached the cap per minute (the extender's preemption.maxEvictionsPerPod, maxEvictionsPerNode); the Pod waits", what)
}
