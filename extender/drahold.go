package extender

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
)

// The hold (README "Stock for DRA specs"): a consumer reference that is
// not a Pod, which the leader adds to a placeholder's claim in the
// hand-over's first write, and takes away only once the GPU Pod is bound
// (and reserved) or gone. Without it the claim's Pod
// consumers can all go while the GPU Pod still needs the devices: the
// extender's bind deletes the placeholder before the Binding, and when the
// bind's answer is lost (the extender killed after the Binding) or the
// bind fails, kube-scheduler's Unreserve removes the GPU Pod from
// reservedFor — kube-controller-manager then saw no consumer left and
// deallocated the claim of a bound Pod, and the scheduler gave its device
// to another Pod (9 GPU Pods bound for 8 devices,
// TestDRATakeoverRaceWithRestart). kube-controller-manager keeps a claim
// allocated while a consumer it cannot check remains (v1.36 and later;
// v1.35's fails the claim's sync until the hold goes, which keeps the
// allocation too), and kube-scheduler's PostFilter deallocates only
// claims reserved for nobody but the Pod.
const (
	holdGroup    = "runplane.io"
	holdResource = "stockhandovers"
	// holdUIDPrefix + the GPU Pod's UID is the hold's UID (a consumer's
	// UID keys the list, and the Pod's own reference has the Pod's).
	holdUIDPrefix = "hold-"
)

// holdFor is the hold of a hand-over to pod.
func holdFor(pod *corev1.Pod) resourcev1.ResourceClaimConsumerReference {
	return resourcev1.ResourceClaimConsumerReference{APIGroup: holdGroup, Resource: holdResource, Name: pod.Name,
		UID: types.UID(holdUIDPrefix + string(pod.UID))}
}

func isHold(r resourcev1.ResourceClaimConsumerReference) bool {
	return r.APIGroup == holdGroup && r.Resource == holdResource && strings.HasPrefix(string(r.UID), holdUIDPrefix)
}

// holdOf is the claim's hold, nil when it has none.
func holdOf(c *resourcev1.ResourceClaim) *resourcev1.ResourceClaimConsumerReference {
	for i := range c.Status.ReservedFor {
		if isHold(c.Status.ReservedFor[i]) {
			return &c.Status.ReservedFor[i]
		}
	}
	return nil
}

// holdIndex indexes claims by the UID of the Pod their hold is for.
const holdIndex = "runplane-hold"

func holdIndexFunc(obj any) ([]string, error) {
	c, ok := obj.(*resourcev1.ResourceClaim)
	if !ok {
		return nil, nil
	}
	if h := holdOf(c); h != nil {
		return []string{strings.TrimPrefix(string(h.UID), holdUIDPrefix)}, nil
	}
	return nil, nil
}

// enqueueHeld queues the claims held for a GPU Pod (bound, or gone).
func (d *draStock) enqueueHeld(p *corev1.Pod) {
	if d.held == nil {
		return
	}
	objs, err := d.held.ByIndex(holdIndex, string(p.UID))
	if err != nil {
		return // an index registered with the informer does not fail
	}
	for _, o := range objs {
		if c, ok := o.(*resourcev1.ResourceClaim); ok {
			d.queue.Add(types.NamespacedName{Namespace: c.Namespace, Name: c.Name})
		}
	}
}

// holdAction is what the leader does with a held claim.
type holdAction struct {
	keep bool // the hand-over is under way: keep the hold (reserve may be set)
	// reserve: the GPU Pod is (again) in reservedFor — bound, after an
	// Unreserve took it away although the Binding landed; unbound, once
	// it names the claim, so that kube-scheduler looks at it again.
	reserve bool
	// dropPod: the GPU Pod's reference goes with the hold (it is gone, or
	// bound without this claim).
	dropPod bool
	// dropGone: the references of gone Pods (the deleted placeholder) go
	// too.
	dropGone bool
	// deletePlaceholders: the claim is no longer its placeholder's (owned
	// by the GPU Pod, or being deleted) and the GPU Pod will not use it:
	// its placeholders go, so the devices come back.
	deletePlaceholders bool
}

// decideHold is the pure core of tendHold: pod is the Pod the hold is for
// as the API has it (nil: gone or replaced); gone are the other Pod
// consumers that no longer exist (a placeholder the bind deleted).
func decideHold(c *resourcev1.ResourceClaim, holdPod types.UID, pod *corev1.Pod, gone map[types.UID]bool) holdAction {
	podGone := pod == nil || pod.UID != holdPod || isDone(pod)
	owned := false
	if o := podOwner(c); o != nil && o.UID == holdPod {
		owned = true
	}
	switch {
	case c.DeletionTimestamp != nil && (podGone || pod.Spec.NodeName == ""):
		// Going (its owner went): nobody finishes a hand-over of it.
		return holdAction{dropPod: true, deletePlaceholders: true}
	case podGone:
		return holdAction{dropPod: true, deletePlaceholders: owned}
	case pod.Spec.NodeName == "":
		// Under way; once the Pod names the claim (the hand-over's steps
		// done), reserved for it: the claim's status change requeues the
		// Pod in kube-scheduler (finishHandover's step 5, redone here).
		// The references of gone Pods (a placeholder a failed bind deleted)
		// go here too: kube-controller-manager 1.35 does not sync a claim
		// that has a consumer other than a Pod, so it never drops them.
		return holdAction{keep: true, reserve: owned && podNames(pod, c.Name), dropGone: true}
	case owned && slices.ContainsFunc(c.Status.ReservedFor, func(r resourcev1.ResourceClaimConsumerReference) bool {
		return isPodRef(r) && r.UID != holdPod && !gone[r.UID]
	}):
		// Bound while a placeholder still exists on the claim: keep the
		// devices held until it goes (its deletion requeues the claim).
		return holdAction{keep: true}
	case owned:
		// The placeholder's reference goes with the hold, and the Pod's is
		// (again) there: were kube-controller-manager to drop the
		// placeholder after a late Unreserve, it would find no consumer
		// left and deallocate the claim; a claim whose last consumer an
		// Unreserve removed stays allocated, and kube-controller-manager
		// reserves it again for its bound Pod.
		return holdAction{reserve: true, dropGone: true}
	case podNames(pod, c.Name):
		// Bound, naming the claim, but not its owner (its owner reference
		// was rewritten after the hand-over): the hold goes, the Pod's
		// reference stays — dropping it would leave the claim without a
		// consumer once the placeholder goes, and kube-controller-manager
		// would deallocate a device the Pod runs on.
		return holdAction{}
	default:
		// Bound with a claim of its own: a hand-over left after its first
		// step; the placeholder keeps its claim.
		return holdAction{dropPod: true}
	}
}

// tendHold acts on a held claim (the leader): see decideHold.
func (e *Extender) tendHold(ctx context.Context, c *resourcev1.ResourceClaim) error {
	h := holdOf(c)
	if h == nil {
		return nil
	}
	holdPod := types.UID(strings.TrimPrefix(string(h.UID), holdUIDPrefix))
	pod, err := e.currentPod(ctx, c.Namespace, h.Name)
	if err != nil {
		return fmt.Errorf("%w: claim %s/%s: %w", errRetry, c.Namespace, c.Name, err)
	}
	gone := map[types.UID]bool{}
	for _, r := range c.Status.ReservedFor {
		if !isPodRef(r) || r.UID == holdPod {
			continue
		}
		p, err := e.currentPod(ctx, c.Namespace, r.Name)
		if err != nil {
			return fmt.Errorf("%w: claim %s/%s: %w", errRetry, c.Namespace, c.Name, err)
		}
		// As kube-controller-manager judges a Pod consumer.
		gone[r.UID] = p == nil || p.UID != r.UID || isDone(p)
	}
	act := decideHold(c, holdPod, pod, gone)
	reserved := slices.ContainsFunc(c.Status.ReservedFor, func(r resourcev1.ResourceClaimConsumerReference) bool { return r.UID == holdPod })
	anyGone := slices.ContainsFunc(c.Status.ReservedFor, func(r resourcev1.ResourceClaimConsumerReference) bool { return gone[r.UID] })
	if act.keep && (!act.reserve || reserved) && (!act.dropGone || !anyGone) {
		return nil // nothing to write
	}
	if act.deletePlaceholders {
		// Before the hold goes: a leader that dies in between finds the
		// hold again and deletes what is left.
		if err := e.deleteClaimPlaceholders(ctx, c, holdPod); err != nil {
			return fmt.Errorf("%w: %w", errRetry, err)
		}
	}
	out := c.DeepCopy()
	out.Status.ReservedFor = slices.DeleteFunc(out.Status.ReservedFor, func(r resourcev1.ResourceClaimConsumerReference) bool {
		return (!act.keep && isHold(r)) || (act.dropPod && r.UID == holdPod) || (act.dropGone && gone[r.UID])
	})
	if act.reserve && !slices.ContainsFunc(out.Status.ReservedFor, func(r resourcev1.ResourceClaimConsumerReference) bool { return r.UID == holdPod }) {
		out.Status.ReservedFor = append(out.Status.ReservedFor, resourcev1.ResourceClaimConsumerReference{Resource: "pods", Name: pod.Name, UID: pod.UID})
	}
	// resourceVersion precondition: a claim changed meanwhile is looked at again.
	if _, err := e.client.ResourceV1().ResourceClaims(c.Namespace).UpdateStatus(ctx, out, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("%w: releasing the hold of claim %s/%s: %w", errRetry, c.Namespace, c.Name, err)
	}
	if act.keep {
		return nil
	}
	e.log.Info("DRA hand-over hold released", "claim", c.Namespace+"/"+c.Name, "pod", h.Name, "reserved", act.reserve, "placeholdersDeleted", act.deletePlaceholders)
	return nil
}

// podNames: the Pod's status names the claim as one of its own.
func podNames(p *corev1.Pod, claim string) bool {
	return slices.ContainsFunc(p.Status.ResourceClaimStatuses, func(s corev1.PodResourceClaimStatus) bool {
		return ptr.Deref(s.ResourceClaimName, "") == claim
	})
}

func isPodRef(r resourcev1.ResourceClaimConsumerReference) bool {
	return r.APIGroup == "" && r.Resource == "pods"
}

// isDone: the Pod will not run (again) — kube-controller-manager's test
// for dropping a Pod consumer.
func isDone(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || (p.DeletionTimestamp != nil && p.Spec.NodeName == "")
}

// currentPod is the Pod as the informer has it, or the API when the
// informer does not (a new leader's informer may lag); nil when it is gone.
func (e *Extender) currentPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	pod, err := e.podLister.Pods(ns).Get(name)
	if err == nil {
		return pod, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("pod %s/%s: %w", ns, name, err)
	}
	pod, err = e.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", ns, name, err)
	}
	return pod, nil
}

// deleteClaimPlaceholders deletes the live placeholders the claim is
// reserved for (UID precondition): the claim goes with the GPU Pod that
// owns it, and the devices with them — their Deployment replaces them.
func (e *Extender) deleteClaimPlaceholders(ctx context.Context, c *resourcev1.ResourceClaim, holdPod types.UID) error {
	for _, r := range c.Status.ReservedFor {
		if !isPodRef(r) || r.UID == holdPod {
			continue
		}
		ph, err := e.podLister.Pods(c.Namespace).Get(r.Name)
		if err != nil || ph.UID != r.UID || ph.Labels[api.LabelStock] == "" || ph.DeletionTimestamp != nil {
			continue //nolint:nilerr // gone or not a placeholder: nothing to delete
		}
		uid := ph.UID
		_, err = e.deletePod(ctx, c.Namespace, ph.Name, &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting placeholder %s/%s of claim %s: %w", c.Namespace, ph.Name, c.Name, err)
		}
		e.log.Info("DRA placeholder deleted: its claim was handed to a Pod that is gone", "placeholder", c.Namespace+"/"+ph.Name, "claim", c.Name)
	}
	return nil
}
