// Package gate releases Pods held by the scheduling gate
// runplane.io/storage-prepared (added at admission by the webhook): the gate
// is removed once every PVC the Pod mounts is ready (no preparation asked, or
// the current attempt Succeeded). While a PVC's preparation has Failed the
// Pod stays gated and gets a Warning Event saying which PVC and why.
package gate

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/kubeevents"
	"github.com/runplane/runplane/pvcspec"
)

// indexGatedClaims indexes gated Pods by the PVCs they mount.
const indexGatedClaims = "runplane.gatedClaims"

// Reconciler removes the storage gate from ready Pods.
type Reconciler struct {
	client.Client
	Recorder events.EventRecorder
}

// Setup registers the gate controller with the manager.
func Setup(mgr ctrl.Manager) error {
	rec, err := kubeevents.ForManager(mgr, "runplane-storage-gate")
	if err != nil {
		return fmt.Errorf("gate: %w", err)
	}
	r := &Reconciler{Client: mgr.GetClient(), Recorder: rec}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, indexGatedClaims, func(o client.Object) []string {
		pod, ok := o.(*corev1.Pod)
		if !ok || !Gated(pod) {
			return nil
		}
		return Claims(pod)
	}); err != nil {
		return fmt.Errorf("gate: index: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("storage-gate").
		For(&corev1.Pod{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			pod, ok := o.(*corev1.Pod)
			return ok && Gated(pod)
		}))).
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(r.gatedPods)).
		Complete(r)
}

// Gated reports whether the Pod carries the storage gate.
func Gated(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == api.SchedulingGateStorage })
}

// Claims lists the PVCs a Pod mounts.
func Claims(pod *corev1.Pod) []string {
	var out []string
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			out = append(out, v.PersistentVolumeClaim.ClaimName)
		}
	}
	return out
}

func (r *Reconciler) gatedPods(ctx context.Context, o client.Object) []reconcile.Request {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexGatedClaims: o.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "listing gated Pods", "pvc", o.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(pods.Items))
	for _, p := range pods.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}})
	}
	return reqs
}

// Reconcile removes the gate when every PVC is ready.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pod corev1.Pod
	if err := r.Get(ctx, req.NamespacedName, &pod); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !Gated(&pod) || pod.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	var waiting, failed []string
	for _, name := range Claims(&pod) {
		var pvc corev1.PersistentVolumeClaim
		err := r.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: name}, &pvc)
		switch {
		case apierrors.IsNotFound(err):
			waiting = append(waiting, name+" (not found)")
			continue
		case err != nil:
			return reconcile.Result{}, fmt.Errorf("getting PVC %s: %w", name, err)
		}
		if pvcspec.Ready(&pvc) {
			continue
		}
		if bad, why := pvcspec.Failed(&pvc); bad {
			failed = append(failed, fmt.Sprintf("%s: %s", name, why))
		}
		waiting = append(waiting, name)
	}
	if len(failed) > 0 {
		r.Recorder.Eventf(&pod, nil, corev1.EventTypeWarning, "StoragePrepareFailed", "Gate",
			"preparation failed for PVC %s; the Pod stays gated until %s is bumped and succeeds",
			strings.Join(failed, "; "), api.AnnotationPrepareAttempt)
	}
	if len(waiting) > 0 {
		return reconcile.Result{}, nil // a PVC change requeues us
	}
	patch := client.MergeFromWithOptions(pod.DeepCopy(), client.MergeFromWithOptimisticLock{})
	pod.Spec.SchedulingGates = slices.DeleteFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool {
		return g.Name == api.SchedulingGateStorage
	})
	if err := r.Patch(ctx, &pod, patch); err != nil {
		return reconcile.Result{}, fmt.Errorf("removing scheduling gate from Pod %s: %w", pod.Name, err)
	}
	r.Recorder.Eventf(&pod, nil, corev1.EventTypeNormal, "StorageReady", "Gate", "every PVC is prepared; scheduling gate %s removed", api.SchedulingGateStorage)
	return reconcile.Result{}, nil
}
