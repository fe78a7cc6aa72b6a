package extender

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/runplane/runplane/extender/ledger"
)

// Preemption for a GPU Pod of a DRA spec short of devices (README
// "Preemption for DRA specs"). DynamicResources rejects every node where
// the Pod's devices are taken, before kube-scheduler asks any extender,
// and its own preemption never frees a victim's devices (DynamicResources
// has no PreFilter AddPod/RemovePod): the extender's filter never sees
// the Pod. So the leader plans it where it looks at the Pod's unallocated
// claim anyway, after TakeStock found neither free room nor stock: the
// ledger plans over every node the Pod may go to as the filter would, and
// the plan is evicted like the filter's (caps, PodDisruptionBudgets,
// Events, metrics, back-off). The nomination keeps the victims' devices
// for the Pod: once their claims are deallocated, DynamicResources passes
// the node, and the extender's filter admits this Pod there and refuses
// every other.

// preemptForDevices plans and enqueues a preemption for the Pod, whose
// request req (its claim's devices included) fits none of nodes.
func (e *Extender) preemptForDevices(pod *corev1.Pod, req ledger.Request, nodes []string) {
	req.Protected = e.guard.protected
	p, capped := e.ledger.PlanPreemption(req, nodes)
	if p != nil {
		if !p.Renewed {
			e.log.Info("DRA Pod preempts for devices", "pod", pod.Namespace+"/"+pod.Name, "node", p.Node, "victims", len(p.Victims))
		}
		e.enqueuePreemption(pod, p)
	}
	if capped != "" {
		e.recordCapped(pod, capped)
	}
}
