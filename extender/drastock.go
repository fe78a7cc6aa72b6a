package extender

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	resourceclient "k8s.io/client-go/kubernetes/typed/resource/v1"
	listersv1 "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/extender/ledger"
)

// DRA stock takeover (README "Stock for DRA specs"). kube-scheduler's
// DynamicResources filter sees every device a placeholder's claim holds as
// taken, so a GPU Pod of a DRA spec never reaches the extender's filter
// while stock holds the devices it needs. The leader therefore acts
// outside the scheduling cycle: when a GPU Pod's claim appears
// unallocated and the Pod should take stock (ledger.TakeStock), it hands
// the placeholder's allocated claim itself to the Pod — reserved and held
// for the Pod too (drahold.go), owned by it, named in its status; the
// Pod's own, unallocated claim deleted. The claim never loses its
// allocation, so no allocator ever sees its devices free. (Copying the placeholder's allocation into
// the Pod's own claim is not safe: kube-scheduler v1.37 keeps allocated
// devices as a set, and the placeholder's claim going away removes them
// from it while the Pod's claim still names them — another Pod was
// allocated the same device in TestDRATakeoverSameSpec.) The Pod is
// requeued by its claim's changes; DynamicResources finds the claim
// allocated on the placeholder's node, and the extender's filter and bind
// take the placeholder there as for any takeover: deleted (grace 0)
// before the Binding, after which kube-controller-manager drops it from
// the claim's consumers.

// draStock queues the claims of GPU Pods that may take DRA stock.
type draStock struct {
	queue  workqueue.TypedRateLimitingInterface[types.NamespacedName]
	claims listersv1.ResourceClaimLister
	// held indexes the claims by the Pod their hold is for (drahold.go).
	held cache.Indexer
	// planBackoff: out-of-cycle preemption tries that planned nothing, by
	// Pod (drapreempt.go).
	planBackoff planBackoff
}

// enqueueClaim queues an unallocated claim owned by a Pod, and a held one.
func (d *draStock) enqueueClaim(c *resourcev1.ResourceClaim) {
	if (c.Status.Allocation == nil && c.DeletionTimestamp == nil && podOwner(c) != nil) || holdOf(c) != nil {
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

// resync queues every unallocated claim owned by a Pod.
func (d *draStock) resync() {
	all, err := d.claims.List(labels.Everything())
	if err != nil {
		return // a lister's List of its own store does not fail
	}
	for _, c := range all {
		d.enqueueClaim(c)
	}
}

// podOwner is the claim's controller, whatever kind it names: kube-scheduler
// and the kubelet accept a claim as a Pod's when the controller reference's
// UID is the Pod's (resourceclaim.IsForPod, metav1.IsControlledBy), so the
// extender judges ownership by UID alone too — a tenant that rewrites the
// kind of its claim's reference (kind: pod) must not make a claim its
// running Pod uses look like nobody's.
func podOwner(c *resourcev1.ResourceClaim) *metav1.OwnerReference {
	return metav1.GetControllerOf(c)
}

// draStockHandlers registers the event handlers that feed the queue.
func (e *Extender) draStockHandlers(claimInf, podInf cache.SharedIndexInformer, claims listersv1.ResourceClaimLister) error {
	e.draStock = &draStock{
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName](),
			workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "runplane-dra-stock"}),
		claims: claims,
	}
	d := e.draStock
	if err := claimInf.AddIndexers(cache.Indexers{holdIndex: holdIndexFunc}); err != nil {
		return fmt.Errorf("extender: resourceclaim hold index: %w", err)
	}
	d.held = claimInf.GetIndexer()
	if _, err := claimInf.AddEventHandler(feed(d.enqueueClaim, func(*resourcev1.ResourceClaim) {})); err != nil {
		return fmt.Errorf("extender: resourceclaim handler: %w", err)
	}
	podChanged := func(p *corev1.Pod) {
		d.enqueuePod(p)
		if p.Spec.NodeName != "" || p.DeletionTimestamp != nil {
			d.enqueueHeld(p)
		}
	}
	if _, err := podInf.AddEventHandler(feed(podChanged, d.enqueueHeld)); err != nil {
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
	// What TakeStock decides changes without any event on the claim or
	// its Pod (a placeholder bound, a device freed, an informer of a new
	// leader catching up): look at every waiting claim again now and then.
	go wait.Until(func() {
		if e.isLeader() {
			e.draStock.resync()
		}
	}, draStockResync, ctx.Done())
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

// draStockResync is how often the leader looks at every waiting claim.
const draStockResync = 5 * time.Second

// errRetry: the informers lag; look again shortly.
var errRetry = errors.New("not seen yet")

// handOver hands a same-spec placeholder's devices to the Pod's claim key
// when the ledger says the Pod takes stock.
func (e *Extender) handOver(ctx context.Context, key types.NamespacedName) error {
	if !e.isLeader() {
		return nil
	}
	claim, err := e.draStock.claims.ResourceClaims(key.Namespace).Get(key.Name)
	if err != nil {
		return nil //nolint:nilerr // gone: nothing to hand over
	}
	if holdOf(claim) != nil {
		return e.tendHold(ctx, claim)
	}
	if claim.Status.Allocation != nil || claim.DeletionTimestamp != nil {
		return nil // allocated: nothing to hand over
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
	if len(pod.Status.ResourceClaimStatuses) != 1 || ptr.Deref(pod.Status.ResourceClaimStatuses[0].ResourceClaimName, "") != claim.Name {
		// kube-controller-manager names the claim in the Pod's status
		// after creating it; the hand-over rewrites that, so it waits
		// (the Pod's update is queued again) — or the hand-over named the
		// placeholder's claim and died before deleting this one.
		return nil
	}
	if x := e.handedTo(pod, claim); x != nil {
		// A hand-over a dead leader began: finish it.
		return e.finishHandover(ctx, pod, claim, x, pod.Spec.ResourceClaims[0].Name)
	}
	req, err := e.request(pod)
	if err != nil {
		return nil //nolint:nilerr // an unknown spec: its filter says so
	}
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
	nodes := e.nodesFor(pod)
	ph := e.ledger.TakeStock(req, nodes)
	if ph == nil {
		e.preemptForDevices(pod, req, nodes)
		return nil
	}
	if err := e.handClaim(ctx, pod, claim, *ph, pod.Spec.ResourceClaims[0].Name); err != nil {
		e.ledger.Unreserve(pod.UID)
		return err
	}
	e.log.Info("DRA stock handed over", "pod", key.Namespace+"/"+pod.Name, "placeholder", ph.Namespace+"/"+ph.Name, "node", ph.Node)
	return nil
}

// handClaim hands the placeholder's claim (its pod claim podClaim) to the
// Pod, whose own claim is claim: each step keeps the devices allocated,
// and each write has a precondition (resourceVersion or UID), so a step
// that lost a race (the scheduler allocated the Pod's claim, the
// placeholder went) changes nothing; steps already done are safe to
// leave (the claim stays allocated, held for the Pod until it is bound or
// gone — drahold.go). The claim must still be the placeholder's alone
// (owned by it, reserved for it only, not being deleted): a hand-over
// whose later step failed left it reserved for its first Pod, which
// finishes it, and no second Pod may be handed it.
func (e *Extender) handClaim(ctx context.Context, pod *corev1.Pod, claim *resourcev1.ResourceClaim, ph ledger.Placeholder, podClaim string) error {
	phPod, err := e.podLister.Pods(ph.Namespace).Get(ph.Name)
	if err != nil || phPod.UID != ph.UID || phPod.DeletionTimestamp != nil {
		return fmt.Errorf("placeholder %s/%s: gone", ph.Namespace, ph.Name)
	}
	var phClaim *resourcev1.ResourceClaim
	for _, s := range phPod.Status.ResourceClaimStatuses {
		if s.Name == podClaim && s.ResourceClaimName != nil {
			if phClaim, err = e.draStock.claims.ResourceClaims(ph.Namespace).Get(*s.ResourceClaimName); err != nil {
				return fmt.Errorf("placeholder %s/%s: claim %s: %w", ph.Namespace, ph.Name, *s.ResourceClaimName, err)
			}
		}
	}
	if phClaim == nil || phClaim.Status.Allocation == nil {
		return fmt.Errorf("placeholder %s/%s: no allocated claim %q", ph.Namespace, ph.Name, podClaim)
	}
	if err := placeholdersOwn(phClaim, phPod); err != nil {
		return fmt.Errorf("placeholder %s/%s: %w", ph.Namespace, ph.Name, err)
	}
	if !equality.Semantic.DeepEqual(phClaim.Spec, claim.Spec) {
		return fmt.Errorf("placeholder %s/%s: its claim asks for other devices than %s's", ph.Namespace, ph.Name, claim.Name)
	}
	return e.finishHandover(ctx, pod, claim, phClaim, podClaim)
}

// placeholdersOwn checks that a claim is still the placeholder's alone:
// owned by it, reserved for it and nothing else, not being deleted.
func placeholdersOwn(c *resourcev1.ResourceClaim, ph *corev1.Pod) error {
	if o := podOwner(c); o == nil || o.UID != ph.UID {
		return fmt.Errorf("claim %s is not its own any more (handed over)", c.Name)
	}
	if c.DeletionTimestamp != nil {
		return fmt.Errorf("claim %s is being deleted", c.Name)
	}
	for _, r := range c.Status.ReservedFor {
		if r.UID != ph.UID {
			return fmt.Errorf("claim %s is reserved for %s %s too (a hand-over under way)", c.Name, r.Resource, r.Name)
		}
	}
	return nil
}

// handedTo is an allocated claim other than own that the leader held for
// the Pod (only the leader writes a hold, in the hand-over's first step):
// a hand-over under way, to finish. Only a claim that asks for what own
// asks for and is not being deleted is finished; one being deleted is
// released by tendHold.
func (e *Extender) handedTo(pod *corev1.Pod, own *resourcev1.ResourceClaim) *resourcev1.ResourceClaim {
	objs, err := e.draStock.held.ByIndex(holdIndex, string(pod.UID))
	if err != nil {
		return nil
	}
	for _, o := range objs {
		c, ok := o.(*resourcev1.ResourceClaim)
		if !ok || c.Namespace != pod.Namespace || c.UID == own.UID || c.Status.Allocation == nil || c.DeletionTimestamp != nil {
			continue
		}
		if !equality.Semantic.DeepEqual(c.Spec, own.Spec) {
			continue
		}
		return c
	}
	return nil
}

// finishHandover does what is left of handing phClaim to the Pod, whose
// own claim is claim; every step is skipped once done.
func (e *Extender) finishHandover(ctx context.Context, pod *corev1.Pod, claim, phClaim *resourcev1.ResourceClaim, podClaim string) error {
	var err error
	claims := e.client.ResourceV1().ResourceClaims(pod.Namespace)
	// 1. Held for the Pod (drahold.go): whatever happens to the Pods, the
	// claim keeps a consumer, so kube-controller-manager does not
	// deallocate it.
	c := phClaim.DeepCopy()
	if holdOf(c) == nil {
		c.Status.ReservedFor = append(c.Status.ReservedFor, holdFor(pod))
		if c, err = claims.UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("holding claim %s/%s for Pod %s: %w", pod.Namespace, phClaim.Name, pod.Name, err)
		}
	}
	// 2. Owned by the Pod: it goes with the Pod, not with the placeholder,
	// and kube-scheduler and the kubelet accept it as the Pod's.
	if o := podOwner(c); o == nil || o.UID != pod.UID {
		c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
		if _, err = claims.Update(ctx, c, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("handing claim %s/%s to Pod %s: %w", c.Namespace, c.Name, pod.Name, err)
		}
	}
	// 3. Named in the Pod's status as its claim podClaim (its only one).
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": pod.UID},
		"status":   map[string]any{"resourceClaimStatuses": []corev1.PodResourceClaimStatus{{Name: podClaim, ResourceClaimName: ptr.To(c.Name)}}},
	})
	if err != nil {
		return fmt.Errorf("encoding Pod status patch: %w", err)
	}
	if _, err = e.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("naming claim %s in Pod %s/%s's status: %w", c.Name, pod.Namespace, pod.Name, err)
	}
	// 4. The Pod's own claim, unallocated, goes.
	err = claims.Delete(ctx, claim.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &claim.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Pod %s/%s's own claim %s: %w", pod.Namespace, pod.Name, claim.Name, err)
	}
	// 5. Reserved for the Pod, last: a change of the claim's status once
	// the Pod names it is what requeues the Pod in kube-scheduler for
	// certain. (Its DynamicResources hints skip the Pod's update of step 3
	// when the scheduler's claim cache does not have step 2 yet, and a
	// claim update that leaves the status alone: the Pod stayed Pending
	// until the scheduler's 5-minute flush.) tendHold does it too.
	if err := reserveFor(ctx, claims, c.Name, pod); err != nil {
		return fmt.Errorf("reserving claim %s/%s for Pod %s: %w", pod.Namespace, c.Name, pod.Name, err)
	}
	return nil
}

// reserveFor adds the Pod to the claim's consumers, unless it is there.
func reserveFor(ctx context.Context, claims resourceclient.ResourceClaimInterface, name string, pod *corev1.Pod) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c, err := claims.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if slices.ContainsFunc(c.Status.ReservedFor, func(r resourcev1.ResourceClaimConsumerReference) bool { return r.UID == pod.UID }) {
			return nil
		}
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourcev1.ResourceClaimConsumerReference{Resource: "pods", Name: pod.Name, UID: pod.UID})
		_, err = claims.UpdateStatus(ctx, c, metav1.UpdateOptions{})
		return err
	})
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
