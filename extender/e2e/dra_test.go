package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/test/cluster"
)

// draSpec stands for a catalog spec backed by DRA (one GPU of class
// gpu.nvidia.com, 4 CPUs, 16Gi): its Pods carry a claim from the
// template draTemplate and request no extended resource.
const (
	draSpec     = "d1"
	draTemplate = "runplane-" + draSpec
)

// addDRANodes creates count kwok nodes whose gpus GPUs are published only
// through a ResourceSlice, cpu CPUs each, labelled with group.
func addDRANodes(t testing.TB, group string, count, gpus int, cpu string) []string {
	t.Helper()
	var nodes []cluster.Node
	var names []string
	for i := range count {
		n := fmt.Sprintf("%s-%d", group, i)
		names = append(names, n)
		nodes = append(nodes, cluster.Node{Name: n, CPU: cpu, DRAGPUs: gpus, Labels: map[string]string{groupLabel: group}})
	}
	require.NoError(t, env.AddNodes(t.Context(), nodes...))
	return names
}

// draNamespace is a namespace with the spec's ResourceClaimTemplate (what
// runplane's reconciler keeps in every namespace).
func draNamespace(t testing.TB, name string) string {
	t.Helper()
	ns := namespace(t, name)
	_, err := env.Client().ResourceV1().ResourceClaimTemplates(ns).Create(t.Context(), cluster.GPUClaimTemplate(ns, draTemplate, 1), metav1.CreateOptions{})
	require.NoError(t, err)
	return ns
}

// draPod is an already-mutated Pod of the DRA spec: a GPU Pod, or with
// stock a placeholder.
func draPod(name, group string, stock bool) *corev1.Pod {
	label, tier, grace := api.LabelGPUSpec, api.PriorityClassWorkload, int64(30)
	if stock {
		label, tier, grace = api.LabelStock, api.PriorityClassStock, 0
	}
	spec := podSpec(group, tier, grace)
	list := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi")}
	spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: list, Limits: list.DeepCopy()}
	cluster.UseClaimTemplate(&spec, draTemplate)
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{label: draSpec}}, Spec: spec}
}

// claimDevices returns the devices allocated to a Pod's claim
// (pool/device), empty while none is.
func claimDevices(ctx context.Context, t testing.TB, p *corev1.Pod) []string {
	t.Helper()
	if len(p.Status.ResourceClaimStatuses) == 0 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		return nil
	}
	c, err := env.Client().ResourceV1().ResourceClaims(p.Namespace).Get(ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	require.NoError(t, err)
	if c.Status.Allocation == nil {
		return nil
	}
	var out []string
	for _, r := range c.Status.Allocation.Devices.Results {
		out = append(out, r.Pool+"/"+r.Device)
	}
	return out
}

// TestDRASpecBinds: GPU Pods of a DRA spec on nodes whose GPUs only DRA
// publishes (no nvidia.com/gpu anywhere): the runplane-scheduler's
// DynamicResources plugin allocates each claim a device of the Pod's node,
// and the extender — the only resource-fit check of the profile — is asked
// about them and binds them: on nodes of 8 CPUs and 4 GPUs, two 4-CPU Pods
// fit each node, not four. (With the profile's managedResources, which a
// DRA Pod requests none of, the scheduler never asked the extender and
// bound four Pods per node, 16 of 8 CPUs.)
func TestDRASpecBinds(t *testing.T) {
	setup(t)
	group := "dra-binds"
	nodes := addDRANodes(t, group, 2, 4, "8")
	ns := draNamespace(t, group)
	c := env.Client()
	for i := range 6 {
		createPod(t, c, ns, draPod(fmt.Sprintf("p%d", i), group, false))
	}
	// Barrier: four Pods bound; then a fifth's FailedScheduling says the
	// ledger found no CPU (the scheduler's own DRA filter passed it).
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		pods, err := listPods(context.Background(), c, ns, api.LabelGPUSpec)
		require.NoError(t, err)
		n := 0
		for _, p := range pods {
			if p.Spec.NodeName != "" {
				n++
			}
		}
		require.Equal(t, 4, n)
	}, time.Minute, poll, "four DRA Pods bound")
	pods, err := listPods(t.Context(), c, ns, api.LabelGPUSpec)
	require.NoError(t, err)
	perNode := map[string]int{}
	devices := map[string]string{}
	for _, p := range pods {
		if p.Spec.NodeName == "" {
			waitUnschedulable(t, ns, p.Name, "insufficient cpu")
			continue
		}
		perNode[p.Spec.NodeName]++
		got := claimDevices(t.Context(), t, &p)
		require.Len(t, got, 1, "pod %s: one device allocated", p.Name)
		assert.Contains(t, got[0], p.Spec.NodeName+"/", "pod %s: its device is its node's", p.Name)
		assert.Empty(t, devices[got[0]], "device %s given to %s and %s", got[0], devices[got[0]], p.Name)
		devices[got[0]] = p.Name
	}
	assert.Equal(t, map[string]int{nodes[0]: 2, nodes[1]: 2}, perNode, "two 4-CPU Pods per 8-CPU node")
}
