package e2e

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/extender"
	"github.com/runplane/runplane/test/cluster"
)

// migPod is an already-mutated Pod of spec mig1 (one MIG slice, no whole
// GPU): a GPU Pod, or with stock a placeholder.
func migPod(name, group string, stock bool) *corev1.Pod {
	list := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi"),
		migResource: resource.MustParse("1"),
	}
	label, tier, grace := api.LabelGPUSpec, api.PriorityClassWorkload, int64(30)
	if stock {
		label, tier, grace = api.LabelStock, api.PriorityClassStock, 0
	}
	spec := podSpec(group, tier, grace)
	spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: list, Limits: list.DeepCopy()}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{label: "mig1"}}, Spec: spec}
}

// waitBound waits until the Pod is bound and returns its node.
func waitBound(t *testing.T, ns, name string) string {
	t.Helper()
	var node string
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		p, err := env.Client().CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		require.NoError(t, err)
		require.NotEmpty(t, p.Spec.NodeName)
		node = p.Spec.NodeName
	}, time.Minute, poll, "Pod %s to be bound", name)
	return node
}

// waitUnschedulable waits for the Pod's FailedScheduling event to contain
// why, then checks it is still unbound.
func waitUnschedulable(t *testing.T, ns, name, why string) {
	t.Helper()
	c := env.Client()
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		msg, err := schedulingEvent(context.Background(), c, ns, name)
		require.NoError(t, err)
		require.Contains(t, msg, why)
	}, time.Minute, poll, "Pod %s's FailedScheduling event", name)
	p, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Empty(t, p.Spec.NodeName)
}

// A spec of MIG slices only (gpu: 0) reaches the extender (the slice is a
// managed resource): on a kwok node of two slices holding one mig1
// placeholder, the first Pod binds to the free slice, the second takes the
// placeholder, the third waits, short of slices — each bind with its claim annotation.
func TestMIGSpec(t *testing.T) {
	h := setup(t)
	c := h.client
	ns := env.Namespace(t, "mig")
	node := "mig-0"
	require.NoError(t, env.AddNodes(t.Context(), cluster.Node{Name: node, Extended: map[corev1.ResourceName]int64{migResource: 2},
		Labels: map[string]string{groupLabel: "mig"}}))
	ph := createPod(t, c, ns, migPod("stock-mig1", "mig", true))
	require.Equal(t, node, waitBound(t, ns, ph.Name))

	createPod(t, c, ns, migPod("mig-a", "mig", false))
	require.Equal(t, node, waitBound(t, ns, "mig-a"))
	requireClaim(t, c, ns, "mig-a", nil, node)

	createPod(t, c, ns, migPod("mig-b", "mig", false))
	require.Equal(t, node, waitBound(t, ns, "mig-b"))
	requireClaim(t, c, ns, "mig-b", ph, node)

	createPod(t, c, ns, migPod("mig-c", "mig", false))
	waitUnschedulable(t, ns, "mig-c", "insufficient "+migResource)
}

// A spec with nvlink: true goes only to a node whose largest NVLink domain
// (label runplane.io/nvlink-domain-gpus) holds all its GPUs — the webhook's
// node affinity, kept by the scheduler — even when another node has more
// free GPUs.
func TestNVLinkSpec(t *testing.T) {
	h := setup(t)
	c := h.client
	ns := env.Namespace(t, "nvlink")
	require.NoError(t, env.AddNodes(t.Context(),
		cluster.Node{Name: "nvlink-split", GPUs: 8, Labels: map[string]string{groupLabel: "nvlink", api.LabelNVLinkDomainGPUs: "2"}},
		cluster.Node{Name: "nvlink-whole", GPUs: 8, Labels: map[string]string{groupLabel: "nvlink", api.LabelNVLinkDomainGPUs: "8"}}))
	nvPod := func(name string) *corev1.Pod {
		p := tierPod(name, "nvlink", api.PriorityClassWorkload, "nv4", 4)
		p.Labels[api.LabelGPUSpec] = "nv4"
		// What the webhook adds for nvlink: true (webhook/mutate).
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: api.LabelNVLinkDomainGPUs, Operator: corev1.NodeSelectorOpGt, Values: []string{"3"}}}}}}}}
		return p
	}
	for _, name := range []string{"nv-a", "nv-b"} {
		createPod(t, c, ns, nvPod(name))
		require.Equal(t, "nvlink-whole", waitBound(t, ns, name))
	}
	createPod(t, c, ns, nvPod("nv-c"))
	waitUnschedulable(t, ns, "nv-c", "didn't match Pod's node affinity")
}

// The extender refuses to start on a catalog naming a resource it does not
// manage, naming the spec, the resource and the chart value.
func TestStartRefusesUnmanagedResource(t *testing.T) {
	setup(t)
	ns := env.Namespace(t, "unmanaged-catalog")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: api.CatalogConfigMap, Namespace: ns},
		Data: map[string]string{"mig2": "gpu: 0\ncpu: \"2\"\nmemory: 8Gi\nresources: {nvidia.com/mig-2g.20gb: 1}\n"}}
	_, err := env.Client().CoreV1().ConfigMaps(ns).Create(t.Context(), cm, metav1.CreateOptions{})
	require.NoError(t, err)
	cfg := extender.Config{RESTConfig: env.RESTConfig(), Logger: slog.New(slog.DiscardHandler)}
	cfg.Namespace, cfg.Addr, cfg.ManagedResources = ns, "127.0.0.1:0", managed
	_, err = extender.Start(t.Context(), cfg)
	require.ErrorContains(t, err, `catalog spec "mig2": resource nvidia.com/mig-2g.20gb is not managed by the runplane extender`)
	require.ErrorContains(t, err, "scheduler.extender.managedResources")
}
