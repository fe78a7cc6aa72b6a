package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/extender"
)

// stockStatusNamespace is the extender's stock.namespace in these tests.
const stockStatusNamespace = "stock-status"

// The leader keeps the RunplaneStock condition of a stock Deployment (the
// chart labels it runplane.io/stock: <spec>) current: `kubectl describe
// deploy` shows how many placeholders are there to take.
func TestStockStatusCondition(t *testing.T) {
	h := setup(t)
	ctx, c := t.Context(), h.client
	ns := env.Namespace(t, stockStatusNamespace)
	addNodes(t, "stock-status", 2, 1)
	replicas := int32(2)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "stock-gstatus", Labels: map[string]string{api.LabelStock: "gstatus"}},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "stock-gstatus"}},
			Template: placeholderTemplate("gstatus", "stock-status", "stock-gstatus")},
	}
	_, err := c.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
	require.NoError(t, err)
	waitRunning(t, c, ns, "app=stock-gstatus", 2)
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		got, err := c.AppsV1().Deployments(ns).Get(ctx, "stock-gstatus", metav1.GetOptions{})
		require.NoError(t, err)
		var cond *appsv1.DeploymentCondition
		for i := range got.Status.Conditions {
			if got.Status.Conditions[i].Type == extender.StockConditionType {
				cond = &got.Status.Conditions[i]
			}
		}
		require.NotNil(t, cond, "no %s condition", extender.StockConditionType)
		assert.Equal(t, corev1.ConditionTrue, cond.Status)
		assert.Equal(t, extender.ReasonStockAvailable, cond.Reason)
		assert.Contains(t, cond.Message, "runplane.io/stock=gstatus: 2 placeholders available to take, 2 bound on 2 nodes")
	}, 30*time.Second, poll, "the RunplaneStock condition")
}
