package activator

import (
	"context"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/kubeevents"
)

// ReasonPoolConflict is the reason of the Warning Event put on every
// Deployment of a namespace that claims a pool another Deployment of the
// namespace claims too. Such a pool is served by neither (the ingress
// answers 409 naming them) until all but one lose the label.
const ReasonPoolConflict = "PoolConflict"

// reportConflicts puts a Warning Event on each Deployment of a conflicted
// pool, once per set of claimants (until it changes), and logs it.
func (a *Activator) reportConflicts(ctx context.Context, rec events.EventRecorder) {
	seen := map[string]bool{}
	for _, pl := range a.cfg.Pools.List() {
		if len(pl.Conflict) == 0 {
			continue
		}
		k := pl.Namespace + "/" + pl.Name
		names := strings.Join(pl.Conflict, ",")
		seen[k] = true
		if a.conflicts[k] == names {
			continue
		}
		a.conflicts[k] = names
		a.cfg.Logger.Warn("several Deployments claim one pool; it serves nothing until one is left",
			"namespace", pl.Namespace, "pool", pl.Name, "deployments", pl.Conflict)
		for _, d := range pl.Conflict {
			obj := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: pl.Namespace, Name: d}}
			if got, err := a.cfg.Kube.AppsV1().Deployments(pl.Namespace).Get(ctx, d, metav1.GetOptions{}); err == nil {
				obj = got
			}
			rec.Eventf(obj, nil, corev1.EventTypeWarning, ReasonPoolConflict, "Serve",
				"Deployments %s of namespace %s all claim pool %s (label %s): the pool serves no invocations until the label is removed from all but one",
				strings.Join(pl.Conflict, ", "), pl.Namespace, pl.Name, api.LabelPool)
		}
	}
	for k := range a.conflicts {
		if !seen[k] {
			delete(a.conflicts, k)
		}
	}
}

// conflictRecorder starts the Event broadcaster of the conflict reports.
func (a *Activator) conflictRecorder(ctx context.Context) events.EventRecorder {
	return kubeevents.Start(ctx, a.cfg.Kube, "runplane-activator")
}
