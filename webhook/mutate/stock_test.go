package mutate

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
)

// TestStockNamespaces: placeholders of any spec in the platform's stock
// namespace; in a tenant's DRA stock namespace (chart
// stock.pools[].namespaces) placeholders of DRA specs only — there an
// extended-resource placeholder would be shared stock on the tenant's say;
// nowhere else.
func TestStockNamespaces(t *testing.T) {
	cat, err := catalog.Parse(map[string]string{
		"g1.1":   "gpu: 1\ncpu: \"8\"\nmemory: 32Gi\n",
		"h100.1": "cpu: \"8\"\nmemory: 32Gi\ndra: {}\n",
	})
	require.NoError(t, err)
	cfg := DefaultConfig()
	cfg.Image, cfg.NATSURL = "runplane:v1", "nats://n:4222"
	cfg.StockNamespaces, cfg.DRAStockNamespaces = []string{"platform-stock"}, []string{"team-a"}
	m := &Mutator{Config: cfg, Catalog: func() catalog.Catalog { return cat }, PVCs: noPVCs{}, PriorityClasses: staticPCs{}}
	tests := []struct {
		spec, namespace, want string // want: "" admitted, else part of the refusal
	}{
		{"g1.1", "platform-stock", ""},
		{"h100.1", "platform-stock", ""},
		{"h100.1", "team-a", ""},
		{"g1.1", "team-a", `label runplane.io/stock: namespace "team-a" holds stock of DRA specs only, and "g1.1" is not one: its placeholders may only be created in namespace(s) platform-stock`},
		{"h100.1", "team-b", `label runplane.io/stock: stock placeholders may only be created in namespace(s) platform-stock (the platform's), not in "team-b"`},
		{"g1.1", "team-b", `not in "team-b"`},
	}
	for _, tt := range tests {
		t.Run(tt.spec+" in "+tt.namespace, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ph", Labels: map[string]string{api.LabelStock: tt.spec}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{compliant("main")}}}
			res, err := m.Mutate(context.Background(), pod, tt.namespace)
			if tt.want != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.want)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, api.PriorityClassStock, res.Pod.Spec.PriorityClassName)
		})
	}
}
