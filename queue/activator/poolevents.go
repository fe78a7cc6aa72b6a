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
	// ReasonScaleFailed (Warning Event; condition False): the activator
	// could not apply its scaling decision (the message says why).
	ReasonScaleFailed = "ScaleFailed"
)

// PoolConditionType is the condition the activator keeps in a pool
// Deployment's status, listed by `kubectl describe deploy` with the
// Deployment's own (Available, Progressing).
//
// Status True: the activator applied its last scaling decision for the
// pool (reason ScaledFromZero, ScaledUp or ScaledDown, the message the
// decision). False: it could not (reason ScaleFailed, the message the
// error); the next decision applied makes it True again. The status does
// not follow the replica count: a pool scaled to zero is a healthy pool
// that scales up on its next invocation (Available says whether workers
// run). lastTransitionTime moves only when the status changes,
// lastUpdateTime on every write (as the Deployment's own conditions).
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
// Deployment: an Event, and the pool condition True.
func (a *Activator) reportScale(ctx context.Context, rec events.EventRecorder, pl pool.Pool, r scaleReport) {
	if rec == nil || a.cfg.Kube == nil || pl.Deployment == "" {
		return
	}
	rec.Eventf(poolDeployment(pl), nil, corev1.EventTypeNormal, r.eventReason(), "Scale", "%s", r.message(pl))
	a.writePoolCondition(ctx, pl, corev1.ConditionTrue, r.eventReason(), r.message(pl))
}

// reportScaleFailed records a scaling decision that could not be applied:
// a Warning Event, and the pool condition False.
func (a *Activator) reportScaleFailed(ctx context.Context, rec events.EventRecorder, pl pool.Pool, r scaleReport, err error) {
	if rec == nil || a.cfg.Kube == nil || pl.Deployment == "" {
		return
	}
	msg := fmt.Sprintf("pool %s could not scale from %d to %d replicas (%s): %v", pl.Name, r.from, r.to, r.reason, err)
	rec.Eventf(poolDeployment(pl), nil, corev1.EventTypeWarning, ReasonScaleFailed, "Scale", "%s", msg)
	a.writePoolCondition(ctx, pl, corev1.ConditionFalse, ReasonScaleFailed, msg)
}

func poolDeployment(pl pool.Pool) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: pl.Namespace, Name: pl.Deployment, UID: pl.DeploymentUID}}
}

// writePoolCondition sets the pool condition in the Deployment's status: a
// strategic merge patch of status.conditions by type, which the Deployment
// controller carries over when it writes its own conditions. The activator
// may patch deployments/status, never the Deployment itself. The current
// condition is read first (a GET per applied decision: scaling is rare) so
// that lastTransitionTime stays while the status does.
func (a *Activator) writePoolCondition(ctx context.Context, pl pool.Pool, status corev1.ConditionStatus, reason, msg string) {
	deps := a.cfg.Kube.AppsV1().Deployments(pl.Namespace)
	now := metav1.NewTime(a.cfg.Clock.Now().Truncate(time.Second))
	transition := now
	dep, err := deps.Get(ctx, pl.Deployment, metav1.GetOptions{})
	if err != nil {
		a.cfg.Logger.Warn("reading the pool condition failed", "pool", pl.Name, "deployment", pl.Deployment, "err", err)
		return
	}
	for _, c := range dep.Status.Conditions {
		if c.Type == PoolConditionType && c.Status == status && !c.LastTransitionTime.IsZero() {
			transition = c.LastTransitionTime
		}
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []appsv1.DeploymentCondition{{
		Type: PoolConditionType, Status: status, Reason: reason, Message: msg,
		LastUpdateTime: now, LastTransitionTime: transition,
	}}}})
	if err != nil {
		a.cfg.Logger.Warn("pool condition", "pool", pl.Name, "err", err)
		return
	}
	if _, err := deps.Patch(ctx, pl.Deployment, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		a.cfg.Logger.Warn("writing the pool condition failed", "pool", pl.Name, "deployment", pl.Deployment, "err", err)
	}
}

// scaleReportOf is the report of decision d taken at current replicas.
func scaleReportOf(current int, d state.Decision, backlog, inflight int) scaleReport {
	return scaleReport{from: current, to: d.To, reason: d.Reason, backlog: backlog, inflight: inflight}
}
