package activator

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/runplane/runplane/api"
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

// Decision is what the scaling policy asks for one pool.
type Decision struct {
	// To is the replica count wanted (== current: nothing to do).
	To int
	// Remove names the idle workers to take out when To < current.
	Remove []string
	Reason string
}

// WorkerView is one worker as the scaling policy sees it.
type WorkerView struct {
	Name      string
	Ready     bool // registered and ready: can serve
	Starting  bool // Pod exists, not ready yet, within startup-timeout
	InFlight  int
	IdleSince time.Time // zero while busy
}

// Decide applies a pool's policy. current is the workload's replicas,
// backlog the queued invocations, inflight the running ones.
func Decide(pol pool.Policy, current, backlog, inflight int, workers []WorkerView, now time.Time) Decision {
	conc := max(pol.Concurrency, 1)
	need := (backlog + inflight + conc - 1) / conc
	want := current
	reason := ""
	if need > current {
		if current <= pol.MinAvailable && backlog < pol.MinRequestCount {
			reason = fmt.Sprintf("backlog %d below min-request-count %d", backlog, pol.MinRequestCount)
		} else {
			want, reason = need, fmt.Sprintf("backlog %d + in flight %d need %d workers", backlog, inflight, need)
		}
	}
	if pol.MaxReplicas > 0 && want > pol.MaxReplicas {
		want, reason = pol.MaxReplicas, reason+"; capped by max-replicas"
	}
	if want < pol.MinAvailable {
		want, reason = pol.MinAvailable, "min-available floor"
	}
	if want != current {
		return Decision{To: want, Reason: reason}
	}
	floor := max(need, pol.MinAvailable)
	if current <= floor {
		return Decision{To: current}
	}
	var idle []WorkerView
	for _, w := range workers {
		if w.Starting {
			// Removing replicas now could take the starting Pod (the
			// ReplicaSet deletes unready Pods first): wait.
			return Decision{To: current, Reason: "a worker is starting"}
		}
		if w.Ready && w.InFlight == 0 && !w.IdleSince.IsZero() && now.Sub(w.IdleSince) >= pol.IdleTimeout {
			idle = append(idle, w)
		}
	}
	sort.Slice(idle, func(i, j int) bool {
		if !idle[i].IdleSince.Equal(idle[j].IdleSince) {
			return idle[i].IdleSince.Before(idle[j].IdleSince)
		}
		return idle[i].Name < idle[j].Name
	})
	n := min(len(idle), current-floor)
	if n <= 0 {
		return Decision{To: current}
	}
	d := Decision{To: current - n, Reason: fmt.Sprintf("%d workers idle for %s", n, pol.IdleTimeout)}
	for _, w := range idle[:n] {
		d.Remove = append(d.Remove, w.Name)
	}
	return d
}

// scaleAll decides for every pool and applies decisions in goroutines.
func (a *Activator) scaleAll(ctx context.Context, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, pl := range a.cfg.Pools.List() {
		if pl.Deployment == "" && a.cfg.Scaler == nil {
			continue
		}
		p := a.poolLocked(pl.Name)
		if p.scaling {
			continue
		}
		p.policyErr = pl.PolicyError
		current := pl.Replicas
		if !p.setAt.IsZero() && now.Sub(p.setAt) < 5*time.Second && current != p.setTo {
			current = p.setTo // our last decision, not yet seen by the informer
		}
		inflight := 0
		var views []WorkerView
		for _, w := range p.workers {
			inflight += len(w.inflight)
			ready := w.registered && w.ready
			starting := false
			if !ready && w.pod != nil && !w.pod.terminating && now.Sub(w.pod.created) < pl.Policy.StartupTimeout {
				starting = true
			}
			if w.pod != nil && w.pod.terminating {
				continue
			}
			views = append(views, WorkerView{Name: w.name, Ready: ready && !w.draining, Starting: starting, InFlight: len(w.inflight), IdleSince: w.idleSince})
		}
		d := Decide(pl.Policy, current, len(p.queue), inflight, views, now)
		if d.To == current {
			continue
		}
		var waited time.Duration
		if current == 0 {
			for _, it := range p.queue {
				if age := now.Sub(it.inv.AcceptedAt); age > waited {
					waited = age
				}
			}
		}
		for _, n := range d.Remove {
			if w := p.workers[n]; w != nil {
				w.drainUntil = now.Add(a.cfg.DrainHold) // no new work for it
			}
		}
		p.scaling = true
		a.wg.Add(1)
		go func(pl pool.Pool, from int, d Decision, waited time.Duration) {
			defer a.wg.Done()
			err := a.applyScale(ctx, pl, from, d)
			a.mu.Lock()
			p.scaling = false
			if err == nil {
				p.setTo, p.setAt = d.To, time.Now()
			}
			a.mu.Unlock()
			if err != nil {
				a.cfg.Logger.Warn("scale failed", "pool", pl.Name, "from", from, "to", d.To, "err", err)
				return
			}
			a.metrics.scaled.WithLabelValues(pl.Name, dir(from, d.To)).Inc()
			if from == 0 && waited > 0 {
				a.metrics.scaleFromZero.Observe(time.Since(time.Now().Add(-waited)).Seconds())
			}
			a.cfg.Logger.Info("scaled pool", "pool", pl.Name, "from", from, "to", d.To, "reason", d.Reason, "removed", d.Remove)
		}(pl, current, d, waited)
	}
}

func dir(from, to int) string {
	if to > from {
		return "up"
	}
	return "down"
}

func (a *Activator) applyScale(ctx context.Context, pl pool.Pool, from int, d Decision) error {
	if len(d.Remove) > 0 {
		if err := a.scaler.MarkIdle(ctx, pl.Namespace, d.Remove); err != nil {
			return err
		}
	}
	return a.scaler.Scale(ctx, pl, from, d.To)
}

// podWatcher feeds the Pods of every pool into the activator.
type podWatcher struct {
	a   *Activator
	inf cache.SharedIndexInformer
}

func newPodWatcher(a *Activator, client kubernetes.Interface, namespace string) *podWatcher {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = api.LabelPool }))
	return &podWatcher{a: a, inf: f.Core().V1().Pods().Informer()}
}

func (pw *podWatcher) run(ctx context.Context) {
	_, _ = pw.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { pw.a.onPod(o, false) },
		UpdateFunc: func(_, o any) { pw.a.onPod(o, false) },
		DeleteFunc: func(o any) { pw.a.onPod(o, true) },
	})
	pw.inf.Run(ctx.Done())
}

func (a *Activator) onPod(o any, deleted bool) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	pod, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	poolName := pod.Labels[api.LabelPool]
	if poolName == "" {
		return
	}
	gone := deleted || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.poolLocked(poolName)
	w := p.workers[pod.Name]
	if gone {
		if w != nil {
			a.loseLocked(p, w, "pod gone", false)
		}
		a.poke()
		return
	}
	if w == nil {
		w = &worker{name: pod.Name, pool: poolName, namespace: pod.Namespace, concurrency: 1, inflight: map[string]*item{}, lastSeen: time.Now()}
		if v, err := strconv.Atoi(pod.Annotations[api.AnnotationConcurrency]); err == nil && v > 0 {
			w.concurrency = v
		}
		p.workers[pod.Name] = w
	}
	ready := false
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	w.namespace = pod.Namespace
	w.pod = &podInfo{created: pod.CreationTimestamp.Time, ready: ready, terminating: pod.DeletionTimestamp != nil}
	if w.pod.terminating {
		a.poke()
	}
}
