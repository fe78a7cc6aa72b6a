package extender

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/runplane/runplane/api"
)

// The leader writes each stock Deployment's RunplaneStock condition from
// the ledger, and writes again only when it changes.
func TestStockStatus(t *testing.T) {
	e := testExtender(t, true)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "stock", Name: "stock-g1", UID: "d1", Labels: map[string]string{api.LabelStock: "g1"}}}
	other := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "stock", Name: "web", UID: "d2"}}
	cs := fake.NewClientset(dep, other)
	e.client = cs
	e.cfg.Stock.Namespace = "stock"
	e.cfg.Clock = clocktesting.NewFakeClock(time.Date(2026, 11, 23, 20, 0, 0, 0, time.UTC))
	e.ledger.UpsertNode(node("n1", 2))
	e.ledger.UpsertNode(node("n2", 2))
	e.ledger.UpsertPod(pod("ph1", api.LabelStock, "g1", "n1"))
	e.ledger.UpsertPod(pod("ph2", api.LabelStock, "g1", "n2"))

	condition := func() appsv1.DeploymentCondition {
		got, err := cs.AppsV1().Deployments("stock").Get(context.Background(), "stock-g1", metav1.GetOptions{})
		require.NoError(t, err)
		require.Len(t, got.Status.Conditions, 1)
		return got.Status.Conditions[0]
	}
	written := map[types.UID]string{}
	require.NoError(t, e.writeStockStatus(context.Background(), written))
	c := condition()
	assert.Equal(t, StockConditionType, c.Type)
	assert.Equal(t, corev1.ConditionTrue, c.Status)
	assert.Equal(t, ReasonStockAvailable, c.Reason)
	assert.Equal(t, "runplane.io/stock=g1: 2 placeholders available to take, 2 bound on 2 nodes (available per node: n1: 1, n2: 1)", c.Message)

	patches := func() (n int) {
		for _, a := range cs.Actions() {
			if a.Matches("patch", "deployments") {
				n++
			}
		}
		return n
	}
	require.Equal(t, 1, patches(), "the unlabelled Deployment is left alone")
	require.NoError(t, e.writeStockStatus(context.Background(), written))
	require.Equal(t, 1, patches(), "nothing changed, nothing written")

	e.ledger.DeletePod("ph1")
	e.ledger.DeletePod("ph2")
	require.NoError(t, e.writeStockStatus(context.Background(), written))
	c = condition()
	assert.Equal(t, corev1.ConditionFalse, c.Status)
	assert.Equal(t, ReasonStockExhausted, c.Reason)
	assert.Equal(t, "runplane.io/stock=g1: 0 placeholders available to take, 0 bound on 0 nodes", c.Message)
}
