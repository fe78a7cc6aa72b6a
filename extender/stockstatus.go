package extender

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/extender/ledger"
)

// StockConditionType is the condition the extender keeps in the status of
// every stock Deployment (label runplane.io/stock: <spec>) of
// Config.Stock.Namespace: `kubectl get deploy -l runplane.io/stock` lists
// them, `kubectl describe` shows the condition; its message counts the
// spec's placeholders as the ledger sees them. Status True while at least
// one is available to take.
const StockConditionType appsv1.DeploymentConditionType = "RunplaneStock"

// Reasons of StockConditionType.
const (
	ReasonStockAvailable = "StockAvailable"
	ReasonStockExhausted = "StockExhausted"
)

// stockSummary is the condition's reason, status and message for spec.
func stockSummary(spec string, counts []ledger.StockCount) (corev1.ConditionStatus, string, string) {
	avail, total := 0, 0
	var nodes []string
	for _, c := range counts {
		if c.Spec != spec || c.Total == 0 {
			continue
		}
		avail += c.Available
		total += c.Total
		nodes = append(nodes, fmt.Sprintf("%s: %d", c.Node, c.Available))
	}
	slices.Sort(nodes)
	msg := fmt.Sprintf("%s=%s: %d placeholders available to take, %d bound on %d nodes", api.LabelStock, spec, avail, total, len(nodes))
	if len(nodes) > 0 {
		const shown = 10 // a condition message is read by people; the metric has every node
		more := ""
		if len(nodes) > shown {
			more = fmt.Sprintf(", … %d more", len(nodes)-shown)
			nodes = nodes[:shown]
		}
		msg += " (available per node: " + strings.Join(nodes, ", ") + more + ")"
	}
	if avail > 0 {
		return corev1.ConditionTrue, ReasonStockAvailable, msg
	}
	return corev1.ConditionFalse, ReasonStockExhausted, msg
}

// stockStatus keeps StockConditionType current while this replica leads,
// checking every period and writing only what changed: one list of the
// namespace's stock Deployments and a status patch per changed one. It
// runs off the bind path.
func (e *Extender) stockStatus(ctx context.Context, period time.Duration) error {
	written := map[types.UID]string{}
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if !e.isLeader() {
			clear(written) // a new leader rewrites; so does this one when it leads again
			return
		}
		if err := e.writeStockStatus(ctx, written); err != nil {
			e.log.Warn("stock status", "namespace", e.cfg.Stock.Namespace, "err", err)
		}
	}, period)
	return nil
}

func (e *Extender) writeStockStatus(ctx context.Context, written map[types.UID]string) error {
	deps, err := e.client.AppsV1().Deployments(e.cfg.Stock.Namespace).List(ctx, metav1.ListOptions{LabelSelector: api.LabelStock})
	if err != nil {
		return fmt.Errorf("listing stock Deployments: %w", err)
	}
	counts := e.ledger.Stock()
	for i := range deps.Items {
		d := &deps.Items[i]
		status, reason, msg := stockSummary(d.Labels[api.LabelStock], counts)
		key := string(status) + reason + msg
		if written[d.UID] == key {
			continue
		}
		now := metav1.NewTime(e.cfg.Clock.Now().Truncate(time.Second))
		patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []appsv1.DeploymentCondition{{
			Type: StockConditionType, Status: status, Reason: reason, Message: msg, LastUpdateTime: now, LastTransitionTime: now}}}})
		if err != nil {
			return fmt.Errorf("stock condition of %s: %w", d.Name, err)
		}
		if _, err := e.client.AppsV1().Deployments(d.Namespace).Patch(ctx, d.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			return fmt.Errorf("writing the stock condition of Deployment %s/%s: %w", d.Namespace, d.Name, err)
		}
		written[d.UID] = key
	}
	return nil
}
