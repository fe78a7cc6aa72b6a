package extender

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		uid := ph.UID
		err := e.client.CoreV1().Pods(ph.Namespace).Delete(ctx, ph.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To(int64(0)), Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			e.log.Info("deleting reservation", "pod", ph.Namespace+"/"+ph.Name, "err", err)
			continue
		}
		e.metrics.reservations.WithLabelValues("deleted").Inc()
	}
	for _, r := range create {
		preemptor, err := e.podLister.Pods(r.Namespace).Get(r.Name)
		if err != nil || preemptor.UID != r.For {
			continue // gone; the ledger forgets it
		}
		_, err = e.client.CoreV1().Pods(e.cfg.Namespace).Create(ctx, e.reservationPod(preemptor, r), metav1.CreateOptions{})
		switch {
		case err == nil:
			e.metrics.reservations.WithLabelValues("created").Inc()
		case apierrors.IsAlreadyExists(err):
			// Made already (its informer event is on the way), or an old
			// one of the same Pod still being deleted.
		default:
			e.log.Info("creating reservation", "for", r.Namespace+"/"+r.Name, "node", r.Node, "err", err)
		}
	}
}

// reservationPod is a pause Pod bound to r.Node, sized like the preemptor
// and of its priority (a Pod of a lower one cannot preempt it: the
// default scheduler's Pods are the ones it keeps out).
func (e *Extender) reservationPod(preemptor *corev1.Pod, r ledger.ReservationRequest) *corev1.Pod {
	requests, limits := resourceLists(r.Requests)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: ReservationName(string(r.For)), Namespace: e.cfg.Namespace,
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
