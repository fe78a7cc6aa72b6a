package extender

import (
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

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

// planRetry is how long a Pod whose out-of-cycle preemption planned
// nothing waits before the leader plans for it again. The claims' resync
// brings every waiting Pod back every 5 s, and a plan walks every node and
// claim under the ledger's lock: 47 ms at 5,000 nodes and 40,000 claims
// (review measurement), so 100 waiting Pods of one priority — nothing to
// preempt — held the lock 4.7 s of every 5 s without it.
const planRetry = 30 * time.Second

// planBackoff remembers, per Pod, when an out-of-cycle plan may be tried
// again; entries past their time go at the next after (a deleted Pod never
// comes back to clear its own), so it holds about the Pods waiting now.
type planBackoff struct {
	mu    sync.Mutex
	until map[types.UID]time.Time
}

// wait reports whether uid must still wait at now.
func (b *planBackoff) wait(uid types.UID, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.until[uid]
	if ok && now.Before(t) {
		return true
	}
	delete(b.until, uid)
	return false
}

// after makes uid wait for d from now.
func (b *planBackoff) after(uid types.UID, now time.Time, d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.until == nil {
		b.until = map[types.UID]time.Time{}
	}
	for k, t := range b.until {
		if !now.Before(t) {
			delete(b.until, k)
		}
	}
	b.until[uid] = now.Add(d)
}

// unplannable says why the ledger cannot plan a preemption for pod out of
// the scheduling cycle, or "". In the cycle, kube-scheduler's own filters
// (inter-Pod affinity, topology spread, host ports, volumes) narrow the
// nodes the extender plans on; out of it the leader knows only the node
// selector, affinity and tolerations (nodesFor), so for a Pod with any of
// these it could evict other tenants' Pods on a node the Pod can never
// run on, and again after each nomination lapsed.
func unplannable(pod *corev1.Pod) string {
	if a := pod.Spec.Affinity; a != nil && ((a.PodAffinity != nil && len(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0) ||
		(a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0)) {
		return "required inter-Pod affinity"
	}
	if len(pod.Spec.TopologySpreadConstraints) > 0 {
		return "topology spread constraints"
	}
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil || v.Ephemeral != nil {
			return "volume " + v.Name + " (a claim)"
		}
	}
	for _, c := range pod.Spec.Containers {
		for _, port := range c.Ports {
			if port.HostPort != 0 {
				return "host port " + strconv.Itoa(int(port.HostPort))
			}
		}
	}
	return ""
}

// preemptForDevices plans and enqueues a preemption for the Pod, whose
// request req (its claim's devices included) fits none of nodes.
func (e *Extender) preemptForDevices(pod *corev1.Pod, req ledger.Request, nodes []string) {
	now := e.cfg.Clock.Now()
	if e.draStock.planBackoff.wait(pod.UID, now) {
		return
	}
	if why := unplannable(pod); why != "" {
		e.log.Info("DRA Pod short of devices not preempted for: the leader cannot check its placement out of the scheduling cycle",
			"pod", pod.Namespace+"/"+pod.Name, "because", why)
		e.draStock.planBackoff.after(pod.UID, now, planRetry)
		return
	}
	req.Protected = e.guard.protected
	p, capped := e.ledger.PlanPreemption(req, nodes)
	if p == nil {
		e.draStock.planBackoff.after(pod.UID, now, planRetry)
	}
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
