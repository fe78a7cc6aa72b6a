package activator

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"

	"github.com/runplane/runplane/queue/activator/internal/state"
	"github.com/runplane/runplane/queue/pool"
)

// Reasons of the Events the activator records on a pool's Deployment when
// it scales it, and of its PoolConditionType condition.
const (
	ReasonScaledFromZero = "ScaledFromZero"
	ReasonScaledUp       = "ScaledUp"
	ReasonScaledDown     = "ScaledDown"
)

// PoolConditionType is the condition the activator keeps in a pool
// Deployment's status: `kubectl describe deploy` lists it with the
// Deployment's own (Available, Progressing), its message summarises the
// pool's last scaling decision. Status True while the pool has workers.
const PoolConditionType appsv1.DeploymentConditionType = "RunplanePool"

// scaleReport is what one applied scaling decision says about a pool.
type scaleReport struct {
	from, to          int
	reason            string
	backlog, inflight int
}

func (r scaleReport) eventReason() string {
	switch {
	case r.from == 0:
		return ReasonScaledFromZero
	case r.to > r.from:
		return ReasonScaledUp
	default:
		return ReasonScaledDown
	}
}

func (r scaleReport) message(pl pool.Pool) string {
	return fmt.Sprintf("pool %s scaled from %d to %d replicas: %s (backlog %d, in flight %d)",
		pl.Name, r.from, r.to, r.reason, r.backlog, r.inflight)
}

// reportScale records an applied scaling decision on the pool's
// Deployment: an Event, and the pool condition in its status (a strategic
// merge patch of status.conditions by type, which the Deployment
// controller carries over when it writes its own conditions). The
// activator may patch deployments/status, never the Deployment itself.
func (a *Activator) reportScale(ctx context.Context, rec events.EventRecorder, pl pool.Pool, r scaleReport) {
	if rec == nil || a.cfg.Kube == nil || pl.Deployment == "" {
		return
	}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: pl.Namespace, Name: pl.Deployment, UID: pl.DeploymentUID}}
	rec.Eventf(dep, nil, corev1.EventTypeNormal, r.eventReason(), "Scale", "%s", r.message(pl))
	status := corev1.ConditionTrue
	if r.to == 0 {
		status = corev1.ConditionFalse
	}
	now := metav1.NewTime(a.cfg.Clock.Now().Truncate(time.Second))
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []appsv1.DeploymentCondition{{
		Type: PoolConditionType, Status: status, Reason: r.eventReason(), Message: r.message(pl),
		LastUpdateTime: now, LastTransitionTime: now,
	}}}})
	if err != nil {
		a.cfg.Logger.Warn("pool condition", "pool", pl.Name, "err", err)
		return
	}
	if _, err := a.cfg.Kube.AppsV1().Deployments(pl.Namespace).Patch(ctx, pl.Deployment, types.StrategicMergePatchType, patch,
		metav1.PatchOptions{}, "status"); err != nil {
		a.cfg.Logger.Warn("writing the pool condition failed", "pool", pl.Name, "deployment", pl.Deployment, "err", err)
	}
}

// scaleReportOf is the report of decision d taken at current replicas.
func scaleReportOf(current int, d state.Decision, backlog, inflight int) scaleReport {
	return scaleReport{from: current, to: d.To, reason: d.Reason, backlog: backlog, inflight: inflight}
}
