package activator

import (
	"context"
	"fmt"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/queue/activator/internal/state"
	"github.com/runplane/runplane/queue/pool"
)

// PodDeletionCost is the annotation the ReplicaSet controller reads to pick
// which Pods to remove first on scale-down (lower goes first).
const PodDeletionCost = "controller.kubernetes.io/pod-deletion-cost"

// IdleDeletionCost is set on idle Pods chosen for scale-down.
const IdleDeletionCost = -1000

// Scaler changes a pool's size.
type Scaler interface {
	// Scale sets the replicas of the pool's workload; from is the replica
	// count the decision was based on (a precondition for scale-down).
	Scale(ctx context.Context, p pool.Pool, from, to int) error
	// MarkIdle makes the named Pods the first to go on the next scale-down.
	MarkIdle(ctx context.Context, namespace string, pods []string) error
}

// KubeScaler scales Deployments through their scale subresource.
type KubeScaler struct{ Client kubernetes.Interface }

// Scale implements Scaler.
func (k KubeScaler) Scale(ctx context.Context, p pool.Pool, from, to int) error {
	d := k.Client.AppsV1().Deployments(p.Namespace)
	sc, err := d.GetScale(ctx, p.Deployment, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get scale of deployment %s/%s: %w", p.Namespace, p.Deployment, err)
	}
	if to < from && int(sc.Spec.Replicas) != from {
		return fmt.Errorf("deployment %s/%s has %d replicas, expected %d: scale-down skipped", p.Namespace, p.Deployment, sc.Spec.Replicas, from)
	}
	if int(sc.Spec.Replicas) == to {
		return nil
	}
	sc.Spec.Replicas = int32(to)
	if _, err := d.UpdateScale(ctx, p.Deployment, sc, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("scale deployment %s/%s to %d: %w", p.Namespace, p.Deployment, to, err)
	}
	return nil
}

// MarkIdle implements Scaler.
func (k KubeScaler) MarkIdle(ctx context.Context, namespace string, pods []string) error {
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, PodDeletionCost, strconv.Itoa(IdleDeletionCost))
	for _, n := range pods {
		if _, err := k.Client.CoreV1().Pods(namespace).Patch(ctx, n, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("set %s on pod %s/%s: %w", PodDeletionCost, namespace, n, err)
		}
	}
	return nil
}

// scaleAll decides for every pool (state.Decide) and applies the
// decisions in goroutines, one at a time per pool.
func (a *Activator) scaleAll(ctx context.Context) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.st.Now()
	for _, pl := range a.cfg.Pools.List() {
		if (pl.Deployment == "" && a.cfg.Scaler == nil) || len(pl.Conflict) > 0 {
			continue
		}
		key := state.Key(pl.Namespace, pl.Name)
		p := a.st.Pool(key)
		if p.Scaling {
			continue
		}
		current := pl.Replicas
		if !p.SetAt.IsZero() && now.Sub(p.SetAt) < 5*time.Second && current != p.SetTo {
			current = p.SetTo // our last decision, not yet seen by the informer
		}
		backlog, inflight, views, waited := a.st.ScaleInput(key, pl.Policy.StartupTimeout)
		pol := pl.Policy
		pol.MaxInFlight = a.cfg.Limits.InFlight(pol)
		d := state.Decide(pol, current, backlog, inflight, views, now)
		if d.To == current {
			continue
		}
		a.st.Hold(key, d.Remove) // no new work for them
		p.Scaling = true
		rec, report := a.events, scaleReportOf(current, d, backlog, inflight)
		a.wg.Go(func() {
			err := a.applyScale(ctx, pl, current, d)
			a.locked(func(s *state.State) {
				p.Scaling = false
				if err == nil {
					p.SetTo, p.SetAt = d.To, s.Now()
				}
			})
			if err != nil {
				a.cfg.Logger.Warn("scale failed", "pool", pl.Name, "from", current, "to", d.To, "err", err)
				if ctx.Err() == nil {
					a.reportScaleFailed(ctx, rec, pl, report, err)
				}
				return
			}
			a.metrics.scaled.WithLabelValues(pl.Namespace, pl.Name, dir(current, d.To)).Inc()
			if current == 0 && waited > 0 {
				a.metrics.scaleFromZero.Observe((waited + a.cfg.Clock.Since(now)).Seconds())
			}
			a.cfg.Logger.Info("scaled pool", "pool", pl.Name, "from", current, "to", d.To, "reason", d.Reason, "removed", d.Remove)
			a.reportScale(ctx, rec, pl, report)
		})
	}
}

func dir(from, to int) string {
	if to > from {
		return "up"
	}
	return "down"
}

func (a *Activator) applyScale(ctx context.Context, pl pool.Pool, from int, d state.Decision) error {
	if len(d.Remove) > 0 {
		if err := a.scaler.MarkIdle(ctx, pl.Namespace, d.Remove); err != nil {
			return err
		}
	}
	return a.scaler.Scale(ctx, pl, from, d.To)
}

// Cache is where the activator reads the Pods and ReplicaSets of pools:
// the manager's (ctrlcache.Cache), which outlives an activator (a shard
// may stop and start again in one process).
type Cache interface {
	GetInformer(ctx context.Context, obj client.Object, opts ...ctrlcache.InformerGetOption) (ctrlcache.Informer, error)
	client.Reader
}

// watchPods feeds the Pods of every pool into the state until ctx ends. A
// Pod is a worker of pool ns/p only when it is in namespace ns and owned,
// through its ReplicaSet, by p's Deployment (controller references and
// UIDs): the ReplicaSets are watched too, and the Pods are looked at again
// when a ReplicaSet or a Deployment changes. The informers of the three
// kinds sync in any order: a Pod listed before its ReplicaSet is refused
// until the ReplicaSet arrives (issue 33). Its handlers on the cache's
// informers are removed when ctx ends.
func (a *Activator) watchPods(ctx context.Context) {
	// A barrier, once the handlers are removed: see podMu.
	defer func() { a.podMu.Lock(); a.podMu.Unlock() }() //nolint:staticcheck // SA2001: the wait is the point
	var stops []func() error
	defer func() {
		for _, stop := range stops {
			if err := stop(); err != nil {
				a.cfg.Logger.Warn("remove an informer handler", "err", err)
			}
		}
	}()
	pods, err := a.cfg.Cache.GetInformer(ctx, &corev1.Pod{}, ctrlcache.BlockUntilSynced(false))
	if err != nil {
		a.cfg.Logger.Error("pod informer", "err", err)
		return
	}
	rss, err := a.cfg.Cache.GetInformer(ctx, &appsv1.ReplicaSet{}, ctrlcache.BlockUntilSynced(false))
	if err != nil {
		a.cfg.Logger.Error("replicaset informer", "err", err)
		return
	}
	// A ReplicaSet decides only for the Pods it controls, and only through
	// its own controller: status updates (every readiness change while a
	// pool scales) recheck nothing.
	recheck := func(o any) {
		if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
			o = t.Obj
		}
		if rs, ok := o.(*appsv1.ReplicaSet); ok {
			a.recheckPods(ctx, func(p *corev1.Pod) bool {
				ref := metav1.GetControllerOf(p)
				return ref != nil && ref.UID == rs.UID
			})
		}
	}
	handlers := []struct {
		inf ctrlcache.Informer
		h   cache.ResourceEventHandler
	}{
		{pods, cache.ResourceEventHandlerFuncs{
			AddFunc: func(o any) { a.onPod(ctx, o, false) },
			UpdateFunc: func(old, o any) {
				a.revokeRelabelled(old, o)
				a.onPod(ctx, o, false)
			},
			DeleteFunc: func(o any) { a.onPod(ctx, o, true) },
		}},
		{rss, cache.ResourceEventHandlerFuncs{
			AddFunc: recheck,
			UpdateFunc: func(old, cur any) {
				o, ok1 := old.(*appsv1.ReplicaSet)
				c, ok2 := cur.(*appsv1.ReplicaSet)
				if !ok1 || !ok2 || !equality.Semantic.DeepEqual(metav1.GetControllerOf(o), metav1.GetControllerOf(c)) {
					recheck(cur)
				}
			},
			DeleteFunc: recheck,
		}},
	}
	for _, h := range handlers {
		reg, err := h.inf.AddEventHandler(h.h)
		if err != nil {
			a.cfg.Logger.Error("pod informer", "err", err)
			return
		}
		stops = append(stops, func() error { return h.inf.RemoveEventHandler(reg) })
	}
	if n, ok := a.cfg.Pools.(changeSource); ok {
		stop, err := n.OnChange(func() { a.recheckPods(ctx, func(*corev1.Pod) bool { return true }) })
		if err != nil {
			a.cfg.Logger.Error("pool informer", "err", err)
			return
		}
		stops = append(stops, stop)
	}
	<-ctx.Done()
}

// recheckPods decides again on the cached Pods that match, each as the
// cache has it when its turn comes: of the List only their keys are used
// (each is read again under podMu), and a Pod deleted since is left to its
// own delete event.
func (a *Activator) recheckPods(ctx context.Context, match func(*corev1.Pod) bool) {
	var l corev1.PodList
	if err := a.cfg.Cache.List(ctx, &l, client.UnsafeDisableDeepCopy); err != nil {
		if ctx.Err() == nil {
			a.cfg.Logger.Warn("recheck pods: list the cache's", "err", err)
		}
		return
	}
	for k := range l.Items {
		key := client.ObjectKeyFromObject(&l.Items[k])
		var p corev1.Pod
		a.podMu.Lock()
		switch err := a.cfg.Cache.Get(ctx, key, &p, client.UnsafeDisableDeepCopy); {
		case apierrors.IsNotFound(err):
		case err != nil:
			a.cfg.Logger.Warn("recheck pod: read the cache", "pod", key, "err", err)
		case match(&p):
			a.applyPod(ctx, &p, false)
		}
		a.podMu.Unlock()
	}
}

// owner is the pool Deployment that owns pod through its ReplicaSet, by
// controller references and UIDs; why says what is missing when none does.
func (a *Activator) owner(ctx context.Context, pod *corev1.Pod) (pool.Pool, string) {
	name := pod.Labels[api.LabelPool]
	pl, ok := a.cfg.Pools.Lookup(pod.Namespace, name)
	switch {
	case !ok:
		return pl, fmt.Sprintf("no Deployment of namespace %s is labelled %s=%s", pod.Namespace, api.LabelPool, name)
	case len(pl.Conflict) > 0:
		return pl, fmt.Sprintf("pool %s/%s is claimed by several Deployments %v", pod.Namespace, name, pl.Conflict)
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != "ReplicaSet" {
		return pl, "the Pod is not controlled by a ReplicaSet"
	}
	var rs appsv1.ReplicaSet
	err := a.cfg.Cache.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: ref.Name}, &rs, client.UnsafeDisableDeepCopy)
	if err != nil || rs.UID != ref.UID {
		return pl, fmt.Sprintf("its ReplicaSet %s is not known (yet)", ref.Name)
	}
	dref := metav1.GetControllerOf(&rs)
	if dref == nil || dref.Kind != "Deployment" || dref.Name != pl.Deployment || dref.UID != pl.DeploymentUID {
		return pl, fmt.Sprintf("its ReplicaSet %s is not controlled by the pool's Deployment %s", rs.Name, pl.Deployment)
	}
	return pl, ""
}

// onPod applies a Pod event of the informer.
func (a *Activator) onPod(ctx context.Context, o any, deleted bool) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	if pod, ok := o.(*corev1.Pod); ok {
		a.podMu.Lock()
		defer a.podMu.Unlock()
		a.applyPod(ctx, pod, deleted)
	}
}

// applyPod decides whether pod is a worker of the pool it is labelled with
// and applies that to the state; the caller holds podMu, so that no other
// informer's decision lands between the two.
func (a *Activator) applyPod(ctx context.Context, pod *corev1.Pod, deleted bool) {
	// ctx ended: the activator stopped, its state is no one's (see podMu).
	if ctx.Err() != nil || pod.Labels[api.LabelPool] == "" || !a.cfg.Shard.Owns(pod.Namespace) {
		return
	}
	gone := deleted || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	// Its NATS access ends with the Pod, not with a failed ownership check:
	// that fails for a while whenever the ReplicaSets are not synced yet
	// (and the callout checks ownership at every connect).
	if gone && a.cfg.Revoke != nil {
		a.cfg.Revoke(pod.Namespace, pod.Labels[api.LabelPool], pod.Name)
	}
	if deleted {
		a.refusedMu.Lock()
		delete(a.refused, pod.Namespace+"/"+pod.Name)
		a.refusedMu.Unlock()
	} else if !gone {
		if _, why := a.owner(ctx, pod); why != "" {
			// Not (or no longer) a worker of the pool it names.
			gone = true
			a.notePod(pod, why)
		}
	}
	conc, _ := strconv.Atoi(pod.Annotations[api.AnnotationConcurrency])
	info := state.Pod{Created: pod.CreationTimestamp.Time, Terminating: pod.DeletionTimestamp != nil}
	var lost *state.Loss
	var poke bool
	a.locked(func(s *state.State) {
		lost, poke = s.PodSeen(pod.Labels[api.LabelPool], pod.Name, pod.Namespace, conc, info, gone)
	})
	a.lost(ctx, lost)
	if poke {
		a.poke()
	}
}

// revokeRelabelled ends the NATS access a Pod had as a worker of the pool
// it was labelled with before an update (a Pod's labels can change; the
// callout placed it in that pool's account).
func (a *Activator) revokeRelabelled(old, cur any) {
	o, ok1 := old.(*corev1.Pod)
	c, ok2 := cur.(*corev1.Pod)
	if a.cfg.Revoke == nil || !ok1 || !ok2 || !a.cfg.Shard.Owns(o.Namespace) {
		return
	}
	if was := o.Labels[api.LabelPool]; was != "" && was != c.Labels[api.LabelPool] {
		a.cfg.Revoke(o.Namespace, was, o.Name)
	}
}

// notePod logs and counts a Pod refused as a worker, once per Pod and
// reason.
func (a *Activator) notePod(pod *corev1.Pod, why string) {
	k := pod.Namespace + "/" + pod.Name
	a.refusedMu.Lock()
	seen := a.refused[k] == why
	a.refused[k] = why
	a.refusedMu.Unlock()
	if seen {
		return
	}
	a.metrics.foreign.WithLabelValues("pod").Inc()
	a.cfg.Logger.Info("pod is not a worker of the pool it is labelled with", "namespace", pod.Namespace, "pod", pod.Name,
		"pool", pod.Labels[api.LabelPool], "reason", why)
}
