package extender

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	listersv1 "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/extender/ledger"
)

// DRA stock takeover (README "Stock for DRA specs"). kube-scheduler's
// DynamicResources filter sees every device a placeholder's claim holds as
// taken, so a GPU Pod of a DRA spec never reaches the extender's filter
// while stock holds the devices it needs. The leader therefore acts
// outside the scheduling cycle: when a GPU Pod's claim appears
// unallocated and the Pod should take stock (ledger.TakeStock), it writes
// the placeholder's allocation into the Pod's claim — the API server
// accepts a claim allocated by a controller other than the scheduler —
// while the placeholder's own claim still names the devices, so no
// allocator can give them to anyone in between. The claim's update
// requeues the Pod; its DynamicResources filter now sees it allocated on
// the placeholder's node, and the extender's filter and bind take the
// placeholder there as for any takeover: deleted (grace 0) before the
// Binding. Nothing is undone on failure: until the bind deletes the
// placeholder its devices are its own (its claim), and a Pod that never
// binds leaves them there (its claim goes with it, or DynamicResources'
// PostFilter deallocates it).

// draStock queues the claims of GPU Pods that may take DRA stock.
type draStock struct {
	queue  workqueue.TypedRateLimitingInterface[types.NamespacedName]
	claims listersv1.ResourceClaimLister
}

// enqueueClaim queues an unallocated claim owned by a Pod.
func (d *draStock) enqueueClaim(c *resourcev1.ResourceClaim) {
	if c.Status.Allocation == nil && c.DeletionTimestamp == nil && podOwner(c) != nil {
		d.queue.Add(types.NamespacedName{Namespace: c.Namespace, Name: c.Name})
	}
}

// enqueuePod queues the claims of an unbound runplane GPU Pod (seen after
// its claim, or updated by a failed scheduling cycle: a new leader learns
// of Pods whose claims did not change since).
func (d *draStock) enqueuePod(p *corev1.Pod) {
	if p.Spec.NodeName != "" || p.Spec.SchedulerName != api.SchedulerName || p.Labels[api.LabelGPUSpec] == "" {
		return
	}
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			d.queue.Add(types.NamespacedName{Namespace: p.Namespace, Name: *s.ResourceClaimName})
		}
	}
}

func podOwner(c *resourcev1.ResourceClaim) *metav1.OwnerReference {
	for i := range c.OwnerReferences {
		ref := &c.OwnerReferences[i]
		if ref.Kind == "Pod" && ref.Controller != nil && *ref.Controller {
			return ref
		}
	}
	return nil
}

// draStockHandlers registers the event handlers that feed the queue.
func (e *Extender) draStockHandlers(claimInf, podInf cache.SharedIndexInformer, claims listersv1.ResourceClaimLister) error {
	e.draStock = &draStock{
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName](),
			workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "runplane-dra-stock"}),
		claims: claims,
	}
	d := e.draStock
	if _, err := claimInf.AddEventHandler(feed(d.enqueueClaim, func(*resourcev1.ResourceClaim) {})); err != nil {
		return fmt.Errorf("extender: resourceclaim handler: %w", err)
	}
	if _, err := podInf.AddEventHandler(feed(d.enqueuePod, func(*corev1.Pod) {})); err != nil {
		return fmt.Errorf("extender: pod handler: %w", err)
	}
	return nil
}

// takeDRAStock is the runnable working the queue (the leader acts).
func (e *Extender) takeDRAStock(ctx context.Context) error {
	q := e.draStock.queue
	go func() {
		<-ctx.Done()
		q.ShutDown()
	}()
	for {
		key, shutdown := q.Get()
		if shutdown {
			return nil
		}
		err := e.handOver(ctx, key)
		switch {
		case err == nil:
			q.Forget(key)
		case errors.Is(err, errRetry):
			q.AddRateLimited(key)
		default:
			e.log.Info("DRA stock takeover failed", "claim", key.String(), "err", err)
			q.Forget(key)
		}
		q.Done(key)
	}
}

// errRetry: the informers lag; look again shortly.
var errRetry = errors.New("not seen yet")

// handOver hands a same-spec placeholder's devices to the Pod's claim key
// when the ledger says the Pod takes stock.
func (e *Extender) handOver(ctx context.Context, key types.NamespacedName) error {
	if !e.isLeader() {
		return nil
	}
	claim, err := e.draStock.claims.ResourceClaims(key.Namespace).Get(key.Name)
	if err != nil || claim.Status.Allocation != nil || claim.DeletionTimestamp != nil {
		return nil //nolint:nilerr // gone, or allocated: nothing to hand over
	}
	owner := podOwner(claim)
	if owner == nil {
		return nil
	}
	pod, err := e.podLister.Pods(key.Namespace).Get(owner.Name)
	if err != nil || pod.UID != owner.UID {
		return errRetry // the Pod informer lags its claim
	}
	if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil || pod.Spec.SchedulerName != api.SchedulerName ||
		pod.Labels[api.LabelGPUSpec] == "" || len(pod.Spec.ResourceClaims) != 1 {
		return nil // one claim per Pod, as a catalog spec makes it
	}
	req, err := e.request(pod)
	if err != nil {
		return nil //nolint:nilerr // an unknown spec: its filter says so
	}
	req.Preempt = false
	// The claim's needs (the Pod's status may not name its claim yet).
	var needs ledger.Resources
	for class, n := range claimOf(claim).Needs {
		if needs.Scalar == nil {
			needs.Scalar = map[corev1.ResourceName]int64{}
		}
		needs.Scalar[ledger.DRAResource(class)] = n
	}
	for name, n := range needs.Scalar {
		if req.Requests.Scalar == nil {
			req.Requests.Scalar = map[corev1.ResourceName]int64{}
		}
		req.Requests.Scalar[name] = n
	}
	ph := e.ledger.TakeStock(req, e.nodesFor(pod))
	if ph == nil {
		return nil
	}
	if err := e.allocateFrom(ctx, claim, *ph, pod.Spec.ResourceClaims[0].Name); err != nil {
		e.ledger.Unreserve(pod.UID)
		return err
	}
	e.log.Info("DRA stock handed over", "pod", key.Namespace+"/"+pod.Name, "placeholder", ph.Namespace+"/"+ph.Name, "node", ph.Node)
	return nil
}

// allocateFrom writes the placeholder's allocation into claim (the Pod's
// claim podClaim): same spec, same template, so the same requests.
func (e *Extender) allocateFrom(ctx context.Context, claim *resourcev1.ResourceClaim, ph ledger.Placeholder, podClaim string) error {
	phPod, err := e.podLister.Pods(ph.Namespace).Get(ph.Name)
	if err != nil || phPod.UID != ph.UID {
		return fmt.Errorf("placeholder %s/%s: gone", ph.Namespace, ph.Name)
	}
	var phClaim *resourcev1.ResourceClaim
	for _, s := range phPod.Status.ResourceClaimStatuses {
		if s.Name == podClaim && s.ResourceClaimName != nil {
			phClaim, err = e.draStock.claims.ResourceClaims(ph.Namespace).Get(*s.ResourceClaimName)
			if err != nil {
				return fmt.Errorf("placeholder %s/%s: claim %s: %w", ph.Namespace, ph.Name, *s.ResourceClaimName, err)
			}
		}
	}
	if phClaim == nil || phClaim.Status.Allocation == nil {
		return fmt.Errorf("placeholder %s/%s: no allocated claim %q", ph.Namespace, ph.Name, podClaim)
	}
	if !equality.Semantic.DeepEqual(phClaim.Spec, claim.Spec) {
		return fmt.Errorf("placeholder %s/%s: its claim asks for other devices than %s's", ph.Namespace, ph.Name, claim.Name)
	}
	c := claim.DeepCopy()
	c.Status.Allocation = phClaim.Status.Allocation.DeepCopy()
	c.Status.Allocation.AllocationTimestamp = &metav1.Time{Time: time.Now()}
	// The claim's resourceVersion is the precondition: a scheduler that
	// allocated it meanwhile wins (Conflict), and nothing was handed over.
	if _, err := e.client.ResourceV1().ResourceClaims(c.Namespace).UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("allocating claim %s/%s the devices of placeholder %s/%s: %w", c.Namespace, c.Name, ph.Namespace, ph.Name, err)
	}
	return nil
}

// nodesFor are the known nodes the Pod's node selector, required affinity
// and tolerations admit (the in-tree filters the scheduler will apply to
// the node the claim ties the Pod to).
func (e *Extender) nodesFor(pod *corev1.Pod) []string {
	nodes, err := e.nodeLister.List(labels.Everything())
	if err != nil {
		return nil
	}
	affinity := nodeaffinity.GetRequiredNodeAffinity(pod)
	noSchedule := func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}
	var out []string
	for _, n := range nodes {
		if ok, err := affinity.Match(n); err != nil || !ok || n.Spec.Unschedulable {
			continue
		}
		if _, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), n.Spec.Taints, pod.Spec.Tolerations, noSchedule, false); untolerated {
			continue
		}
		out = append(out, n.Name)
	}
	return out
}
