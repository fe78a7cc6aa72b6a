package extender

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/extender/ledger"
)

// Reservations (extender/README.md, "Priority tiers and preemption"): the
// room a GPU Pod's victims free is held by a Pod bound to the node at
// creation, so every scheduler counts it; the ledger says which to make
// and which to delete, this file does it.

// reservationPeriod is how often the leader reconciles reservations
// besides the kick of a new nomination.
const reservationPeriod = time.Second

// ReservationName is the name of the reservation of the Pod uid: one per
// preemptor, so a create that raced another is AlreadyExists.
func ReservationName(uid string) string { return "runplane-reservation-" + uid }

// kickReservations asks the reconciler to run now (a nomination).
func (e *Extender) kickReservations() {
	select {
	case e.reserveKick <- struct{}{}:
	default:
	}
}

// reconcileReservations runs until ctx ends; only the leader acts.
func (e *Extender) reconcileReservations(ctx context.Context) error {
	t := time.NewTicker(reservationPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-e.reserveKick:
		}
		if e.isLeader() {
			e.syncReservations(ctx)
		}
	}
}

// syncReservations creates the missing reservations and deletes the stale.
func (e *Extender) syncReservations(ctx context.Context) {
	create, remove := e.ledger.Reservations()
	for _, ph := range remove {
		if err := e.releaseReservation(ctx, ph); err != nil {
			e.log.Info("releasing reservation", "pod", ph.Namespace+"/"+ph.Name, "err", err)
			continue
		}
		e.metrics.reservations.WithLabelValues("deleted").Inc()
	}
	e.ghostReservations(ctx)
	for _, r := range create {
		preemptor, err := e.podLister.Pods(r.Namespace).Get(r.Name)
		if err != nil || preemptor.UID != r.For {
			continue // gone; the ledger forgets it
		}
		made, err := e.client.CoreV1().Pods(e.cfg.Namespace).Create(ctx, e.reservationPod(preemptor, r), metav1.CreateOptions{})
		switch {
		case err == nil:
			e.metrics.reservations.WithLabelValues("created").Inc()
			// Deleted at once: its finalizer holds it for the schedulers,
			// and a kubelet stops it instead of holding the node's
			// resources for it (the GPU Pod is bound before it goes).
			if err := e.deleteReservation(ctx, made.Namespace, made.Name, made.UID); err != nil {
				e.log.Info("deleting reservation", "pod", made.Namespace+"/"+made.Name, "err", err)
			}
		case apierrors.IsAlreadyExists(err):
			// Made already (its informer event is on the way), or an old
			// one of the same Pod still being deleted.
		default:
			e.log.Info("creating reservation", "for", r.Namespace+"/"+r.Name, "node", r.Node, "err", err)
		}
	}
}

// ghostReservations deletes the reservations whose delete after their
// creation failed (or did not happen: the extender died in between): a
// reservation must never run on a kubelet, which would then refuse the
// GPU Pod bound into it.
func (e *Extender) ghostReservations(ctx context.Context) {
	sel := labels.SelectorFromSet(nil)
	if req, err := labels.NewRequirement(api.LabelReservedFor, selection.Exists, nil); err == nil {
		sel = sel.Add(*req)
	}
	pods, err := e.podLister.Pods(e.cfg.Namespace).List(sel)
	if err != nil {
		e.log.Info("listing reservations", "err", err)
		return
	}
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Spec.NodeName == "" {
			continue
		}
		if err := e.deleteReservation(ctx, p.Namespace, p.Name, p.UID); err != nil {
			e.log.Info("deleting reservation", "pod", p.Namespace+"/"+p.Name, "err", err)
		}
	}
}

// deleteReservation deletes a reservation Pod (its finalizer keeps it).
func (e *Extender) deleteReservation(ctx context.Context, ns, name string, uid types.UID) error {
	err := e.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To(int64(0)), Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting reservation %s/%s: %w", ns, name, err)
	}
	return nil
}

// releaseReservation lets a reservation Pod go: deleted (again: its
// delete after creation may have failed), then its finalizer removed, with
// the UID as precondition.
func (e *Extender) releaseReservation(ctx context.Context, ph ledger.Placeholder) error {
	if err := e.deleteReservation(ctx, ph.Namespace, ph.Name, ph.UID); err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": ph.UID, "finalizers": nil}})
	if err != nil {
		return fmt.Errorf("encoding finalizer patch: %w", err)
	}
	_, err = e.client.CoreV1().Pods(ph.Namespace).Patch(ctx, ph.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("releasing reservation %s/%s: %w", ph.Namespace, ph.Name, err)
	}
	return nil
}

// reservationPod is a pause Pod bound to r.Node, sized like the preemptor
// and of its priority (a Pod of a lower one cannot preempt it: the
// default scheduler's Pods are the ones it keeps out).
func (e *Extender) reservationPod(preemptor *corev1.Pod, r ledger.ReservationRequest) *corev1.Pod {
	requests, limits := resourceLists(r.Requests)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: ReservationName(string(r.For)), Namespace: e.cfg.Namespace,
			Finalizers: []string{api.FinalizerReservation},
			Labels: map[string]string{
				api.LabelReservedFor:          string(r.For),
				"app.kubernetes.io/name":      "runplane",
				"app.kubernetes.io/component": "reservation",
			},
			Annotations: map[string]string{api.AnnotationReservedFor: r.Namespace + "/" + r.Name},
		},
		Spec: corev1.PodSpec{
			NodeName:                      r.Node,
			SchedulerName:                 api.SchedulerName,
			PriorityClassName:             preemptor.Spec.PriorityClassName,
			Tolerations:                   preemptor.Spec.Tolerations,
			TerminationGracePeriodSeconds: ptr.To(int64(0)),
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(65535)),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: "pause", Image: e.cfg.ReservationImage,
				Resources: corev1.ResourceRequirements{Requests: requests, Limits: limits},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}

// resourceLists are the requests of r, and the limits that extended
// resources and hugepages must repeat (the API server requires them
// equal); CPU, memory and ephemeral storage get none.
func resourceLists(r ledger.Resources) (requests, limits corev1.ResourceList) {
	requests, limits = corev1.ResourceList{}, corev1.ResourceList{}
	if r.MilliCPU > 0 {
		requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(r.MilliCPU, resource.DecimalSI)
	}
	if r.Memory > 0 {
		requests[corev1.ResourceMemory] = *resource.NewQuantity(r.Memory, resource.BinarySI)
	}
	for name, v := range r.Scalar {
		if v <= 0 {
			continue
		}
		q := *resource.NewQuantity(v, resource.DecimalSI)
		requests[name] = q
		if name != corev1.ResourceEphemeralStorage {
			limits[name] = q
		}
	}
	return requests, limits
}
