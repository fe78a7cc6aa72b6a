package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/test/cluster"
	"github.com/runplane/runplane/test/kit"
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
	ns := env.Namespace(t, name)
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
func claimDevices(ctx context.Context, t require.TestingT, p *corev1.Pod) []string {
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

// draStockDeployment is a Deployment of placeholders of the DRA spec.
func draStockDeployment(t testing.TB, ns, name, group string, replicas int32) {
	t.Helper()
	draDeployment(t, ns, name, replicas, draPod("", group, true))
}

// draDeployment is a Deployment of replicas Pods like ph, labelled app=name.
func draDeployment(t testing.TB, ns, name string, replicas int32, ph *corev1.Pod) {
	t.Helper()
	ph.Labels["app"] = name
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: ph.Labels}, Spec: ph.Spec},
		},
	}
	_, err := env.Client().AppsV1().Deployments(ns).Create(t.Context(), d, metav1.CreateOptions{})
	require.NoError(t, err, "creating Deployment %s", name)
}

// TestDRATakeoverSameSpec: a placeholder of a DRA spec holds the node's only
// device (its claim allocated); a GPU Pod of the same spec — whose
// DynamicResources filter sees no free device anywhere — takes it over:
// bound on the placeholder's node, its claim allocated that device, the
// placeholder gone and named in its claim annotation, the placeholder's
// replacement Pending. (Before, the GPU Pod stayed Pending: "cannot
// allocate all claims", and the extender was never asked.)
func TestDRATakeoverSameSpec(t *testing.T) {
	setup(t)
	group := "dra-take"
	nodes := addDRANodes(t, group, 1, 1, "32")
	ns := draNamespace(t, group)
	c := env.Client()
	draStockDeployment(t, ns, "stock-d1", group, 1)
	ph := waitRunning(t, c, ns, "app=stock-d1", 1)[0]
	require.Equal(t, nodes[0], ph.Spec.NodeName)
	t.Cleanup(func() {
		if t.Failed() {
			logDRA(t, ns)
		}
	})
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		p, err := c.CoreV1().Pods(ns).Get(context.Background(), ph.Name, metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, []string{nodes[0] + "/gpu-0"}, claimDevices(context.Background(), t, p))
	}, 30*time.Second, poll, "the placeholder's claim holds the device")

	created := createPod(t, c, ns, draPod("work", group, false))
	node := waitBound(t, ns, created.Name)
	require.Equal(t, nodes[0], node)
	requireClaim(t, c, ns, created.Name, &ph, nodes[0])
	bound, err := c.CoreV1().Pods(ns).Get(t.Context(), created.Name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{nodes[0] + "/gpu-0"}, claimDevices(t.Context(), t, bound), "the GPU Pod's claim has the placeholder's device")
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		pods, err := listPods(context.Background(), c, ns, "app=stock-d1")
		require.NoError(t, err)
		require.Len(t, pods, 1)
		require.NotEqual(t, ph.UID, pods[0].UID, "the old placeholder still exists")
		require.Empty(t, pods[0].Spec.NodeName, "the replacement is bound on a full node")
		require.Empty(t, claimDevices(context.Background(), t, &pods[0]), "the replacement got a device")
	}, 30*time.Second, poll, "the placeholder's replacement to wait for a device")
	logDRA(t, ns)
}

// logDRA logs the namespace's Pods and claims (what holds which device).
func logDRA(t *testing.T, ns string) {
	pods, _ := env.Client().CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	for _, p := range pods.Items {
		var claims []string
		for _, s := range p.Status.ResourceClaimStatuses {
			claims = append(claims, s.Name+"="+ptr.Deref(s.ResourceClaimName, ""))
		}
		why := ""
		if p.Spec.NodeName == "" {
			why, _ = schedulingEvent(context.Background(), env.Client(), ns, p.Name)
		}
		t.Logf("pod %s uid %s node %q deleting %v claims %v %s", p.Name, p.UID, p.Spec.NodeName, p.DeletionTimestamp != nil, claims, why)
	}
	claims, _ := env.Client().ResourceV1().ResourceClaims(ns).List(context.Background(), metav1.ListOptions{})
	for _, c := range claims.Items {
		var devs []string
		if c.Status.Allocation != nil {
			for _, r := range c.Status.Allocation.Devices.Results {
				devs = append(devs, r.Pool+"/"+r.Device)
			}
		}
		t.Logf("claim %s owner %v devices %v reservedFor %+v", c.Name, c.OwnerReferences[0].Name, devs, c.Status.ReservedFor)
	}
}

// deviceHolders maps each allocated device (pool/device) of the
// namespace's claims to the claims naming it, and each claim to its
// consumers that are bound, live Pods.
func deviceHolders(ctx context.Context, ns string) (byDevice map[string][]string, boundUsers map[string][]string, err error) {
	claims, err := env.Client().ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	pods, err := env.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	bound := map[types.UID]string{}
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			bound[p.UID] = p.Name
		}
	}
	byDevice, boundUsers = map[string][]string{}, map[string][]string{}
	for _, c := range claims.Items {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			byDevice[r.Pool+"/"+r.Device] = append(byDevice[r.Pool+"/"+r.Device], c.Name)
		}
		for _, ref := range c.Status.ReservedFor {
			if name, ok := bound[ref.UID]; ok {
				boundUsers[c.Name] = append(boundUsers[c.Name], name)
			}
		}
	}
	return byDevice, boundUsers, nil
}

// TestDRATakeoverRace: DRA placeholders hold every device of the nodes;
// more GPU Pods of their spec than devices come at once (and, with
// restart, the extender is killed mid-burst). Checked every 100 ms and at
// the end: never two claims naming one device, never a claim used by two
// bound Pods (a placeholder and its taker) — never two Pods on one device;
// and once settled, every device allocated to a claim a bound GPU Pod uses
// — never a device lost.
func TestDRATakeoverRace(t *testing.T) { runDRARace(t, "dra-race", false) }

// TestDRATakeoverRaceWithRestart is the race with the extender killed
// (SIGKILL) once the first GPU Pods are bound. (A hand-over whose bind the
// kill cut short lost its claim's allocation before the hold: 9 GPU Pods
// bound for 8 devices — TestDRAHandoverSurvivesFailedBind.)
func TestDRATakeoverRaceWithRestart(t *testing.T) {
	runDRARace(t, "dra-race-restart", true)
}

func runDRARace(t *testing.T, group string, restart bool) {
	h := setup(t)
	const nodes, gpus, placeholders, gpuPods = 4, 2, 8, 12
	c := env.Client()
	group = freeGroup(t, c, group)
	addDRANodes(t, group, nodes, gpus, "32")
	ns := draNamespace(t, group)
	draStockDeployment(t, ns, "stock", group, placeholders)
	waitRunning(t, c, ns, "app=stock", placeholders)
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		byDevice, _, err := deviceHolders(context.Background(), ns)
		require.NoError(t, err)
		require.Len(t, byDevice, nodes*gpus)
	}, 30*time.Second, poll, "the placeholders' claims hold every device")
	t.Cleanup(func() {
		if t.Failed() {
			logDRA(t, ns)
			for i := 1; i <= h.restart; i++ {
				if data, err := os.ReadFile(filepath.Join(env.Dir(), fmt.Sprintf("runplane-extender-%d.log", i))); err == nil {
					for _, line := range strings.Split(string(data), "\n") {
						if strings.Contains(line, "DRA") {
							t.Logf("extender %d: %s", i, line)
						}
					}
				}
			}
		}
	})

	var violation atomic.Value
	check := func() {
		byDevice, users, err := deviceHolders(context.Background(), ns)
		if err != nil {
			return
		}
		for dev, claims := range byDevice {
			if len(claims) > 1 {
				violation.Store(fmt.Sprintf("device %s allocated to claims %v", dev, claims))
			}
		}
		for claim, pods := range users {
			if len(pods) > 1 {
				violation.Store(fmt.Sprintf("claim %s used by bound Pods %v", claim, pods))
			}
		}
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				check()
			}
		}
	}()
	bw := watchBound(t, t.Context(), c, ns, api.LabelGPUSpec)
	began := time.Now()
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		if !restart {
			return
		}
		err := wait.PollUntilContextTimeout(t.Context(), 2*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return bw.count() >= 3, nil
		})
		if err != nil {
			t.Errorf("waiting for 3 GPU Pods bound: %v", err)
			return
		}
		h.killExtender()
		t.Logf("killed the extender with %d GPU Pods bound", bw.count())
		if err := h.expireLease(context.Background()); err != nil {
			t.Error(err)
			return
		}
		if err := h.startExtender(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	for i := range gpuPods {
		go createPod(t, c, ns, draPod(fmt.Sprintf("gpu-%02d", i), group, false))
	}
	<-killed
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		require.Equal(t, placeholders, bw.count())
	}, 2*time.Minute, poll, "%d GPU Pods bound (one per device)", placeholders)
	t.Logf("%d GPU Pods bound %s after the burst began", placeholders, time.Since(began).Round(time.Millisecond))
	// Settled: the other GPU Pods and the placeholders' replacements wait.
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		byDevice, users, err := deviceHolders(context.Background(), ns)
		require.NoError(t, err)
		require.Len(t, byDevice, nodes*gpus, "every device allocated")
		for dev, claims := range byDevice {
			require.Len(t, users[claims[0]], 1, "device %s: its claim %s used by a bound Pod", dev, claims[0])
		}
	}, time.Minute, poll, "every device held by a bound GPU Pod")
	close(stop)
	<-done
	check()
	require.Nil(t, violation.Load())
	pods, err := listPods(t.Context(), c, ns, api.LabelGPUSpec)
	require.NoError(t, err)
	took := 0
	for _, p := range pods {
		if p.Spec.NodeName != "" && p.Annotations[api.AnnotationClaimedStock] != "" {
			took++
		}
	}
	t.Logf("%d of %d bound GPU Pods name the placeholder they took", took, placeholders)
	if !restart {
		assert.Equal(t, placeholders, took, "every bound GPU Pod took a placeholder")
	}
}

// BenchmarkDRATakeover measures Pod created → bound, alternating in one
// run: a GPU Pod of a DRA spec taking over a DRA placeholder (the claim
// hand-over, then the takeover's bind) — `dra-stock`; a GPU Pod of an
// extended-resource spec taking over its placeholder — `er-stock`; and a
// Pod of the default scheduler whose template claim it allocates from a
// free device — `dra-default`. One device (or GPU) per node, so every
// sample is a takeover or a fresh allocation.
func BenchmarkDRATakeover(b *testing.B) {
	const samples = 20
	h := setup(b)
	ctx, c := b.Context(), h.client
	ns := draNamespace(b, freeGroup(b, c, "bench-dra"))
	addDRANodes(b, ns+"-stock", samples, 1, "32")
	addDRANodes(b, ns+"-free", samples, 1, "32")
	addNodes(b, ns+"-er", samples, 1)
	for i := range samples {
		ph := draPod(fmt.Sprintf("dph-%02d", i), ns+"-stock", true)
		ph.Labels["bench"] = "dph"
		createPod(b, c, ns, ph)
		er := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("eph-%02d", i), Labels: map[string]string{api.LabelStock: "g1", "bench": "eph"}},
			Spec: placeholderTemplate("g1", ns+"-er", "eph").Spec}
		createPod(b, c, ns, er)
	}
	waitRunning(b, c, ns, "bench=dph", samples)
	waitRunning(b, c, ns, "bench=eph", samples)
	bw := watchBound(b, ctx, c, ns, "")
	measure := func(p *corev1.Pod) time.Duration { return bw.createAndTime(b, ctx, c, ns, p) }
	var draStock, erStock, draDefault []time.Duration
	b.ResetTimer()
	for i := range samples {
		draStock = append(draStock, measure(draPod(fmt.Sprintf("dgpu-%02d", i), ns+"-stock", false)))
		erStock = append(erStock, measure(gpuPod(fmt.Sprintf("egpu-%02d", i), "g1", ns+"-er")))
		p := draPod(fmt.Sprintf("free-%02d", i), ns+"-free", false)
		delete(p.Labels, api.LabelGPUSpec)
		p.Spec.SchedulerName = corev1.DefaultSchedulerName
		draDefault = append(draDefault, measure(p))
	}
	b.StopTimer()
	for name, d := range map[string][]time.Duration{"dra-stock": draStock, "er-stock": erStock, "dra-default": draDefault} {
		kit.ReportPercentiles(b, name, d)
	}
}
