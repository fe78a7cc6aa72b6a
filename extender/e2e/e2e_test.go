package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/extender/ledger"
)

func createPod(t testing.TB, c kubernetes.Interface, ns string, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	out, err := c.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
	require.NoError(t, err, "creating Pod %s", p.Name)
	return out
}

func stockDeployment(t testing.TB, c kubernetes.Interface, ns, name, spec, group string, replicas int32) {
	t.Helper()
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: placeholderTemplate(spec, group, name),
		},
	}
	_, err := c.AppsV1().Deployments(ns).Create(t.Context(), d, metav1.CreateOptions{})
	require.NoError(t, err, "creating Deployment %s", name)
}

func listPods(ctx context.Context, c kubernetes.Interface, ns, selector string) ([]corev1.Pod, error) {
	l, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

func running(p *corev1.Pod) bool {
	return p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil
}

// schedulingEvent returns the message of a FailedScheduling event of the Pod.
func schedulingEvent(ctx context.Context, c kubernetes.Interface, ns, pod string) (string, error) {
	l, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod + ",reason=FailedScheduling"})
	if err != nil {
		return "", err
	}
	if len(l.Items) == 0 {
		return "", nil
	}
	return l.Items[len(l.Items)-1].Message, nil
}

// (a) A GPU Pod lands on the node holding a same-spec placeholder, which
// is deleted; its Deployment recreates it and it waits for capacity.
func TestTakeoverSameSpec(t *testing.T) {
	h := setup(t)
	ctx, c := t.Context(), h.client
	ns := env.Namespace(t, "takeover")
	nodes := addNodes(t, "takeover", 1, 1)
	stockDeployment(t, c, ns, "stock-g1", "g1", "takeover", 1)
	ph := waitRunning(t, c, ns, "app=stock-g1", 1)[0]
	require.Equal(t, nodes[0], ph.Spec.NodeName)
	created := createPod(t, c, ns, gpuPod("work", "g1", "takeover"))
	var bound *corev1.Pod
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, created.Name, metav1.GetOptions{})
		require.NoError(t, err)
		require.NotEmpty(t, p.Spec.NodeName)
		bound = p
	}, 30*time.Second, poll, "the GPU Pod to be bound")
	require.Equal(t, nodes[0], bound.Spec.NodeName)
	claim, err := ledger.ParseClaim(bound.Annotations[api.AnnotationClaimedStock])
	require.NoError(t, err)
	require.Equal(t, ph.UID, claim.UID)
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		pods, err := listPods(ctx, c, ns, "app=stock-g1")
		require.NoError(t, err)
		require.Len(t, pods, 1)
		require.NotEqual(t, ph.UID, pods[0].UID, "the old placeholder still exists")
		require.Empty(t, pods[0].Spec.NodeName, "the replacement is bound on a full node")
		msg, err := schedulingEvent(ctx, c, ns, pods[0].Name)
		require.NoError(t, err)
		require.Contains(t, msg, "insufficient nvidia.com/gpu")
	}, 30*time.Second, poll, "the placeholder's replacement to wait for capacity")
	// kubectl describe: the GPU Pod says what it took.
	requireClaim(t, c, ns, created.Name, &ph, nodes[0])
	metrics, err := h.get("/metrics")
	require.NoError(t, err)
	require.Contains(t, metrics, `runplane_extender_stock_claims_total{spec="g1"}`)
}

// requireEvent waits for an Event about object name with reason and a note
// containing note.
func requireEvent(t *testing.T, c kubernetes.Interface, ns, name, reason, note string) {
	t.Helper()
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		l, err := c.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "regarding.name=" + name})
		require.NoError(t, err)
		var got []string
		for _, e := range l.Items {
			if e.Reason == reason && strings.Contains(e.Note, note) {
				return
			}
			got = append(got, e.Reason+": "+e.Note)
		}
		t.Errorf("no %s Event %q on %s; have %v", reason, note, name, got)
	}, 30*time.Second, poll, "Event %s on %s", reason, name)
}

// requireClaim checks that GPU Pod name, bound to node, names placeholder
// ph in its claim annotation (what `kubectl describe pod` shows of a
// takeover; the extender records no Event for a bind), or no claim when ph
// is nil.
func requireClaim(t *testing.T, c kubernetes.Interface, ns, name string, ph *corev1.Pod, node string) {
	t.Helper()
	p, err := c.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, node, p.Spec.NodeName)
	if ph == nil {
		require.Empty(t, p.Annotations[api.AnnotationClaimedStock], "a bind to free capacity claims nothing")
		return
	}
	require.Equal(t, fmt.Sprintf("%s/%s/%s/%s", node, ph.Namespace, ph.Name, ph.UID), p.Annotations[api.AnnotationClaimedStock])
}

// (b) A GPU Pod never evicts a placeholder of another spec.
func TestOtherSpecNeverEvicted(t *testing.T) {
	h := setup(t)
	ctx, c := t.Context(), h.client
	ns := env.Namespace(t, "otherspec")
	addNodes(t, "otherspec", 1, 1)
	stockDeployment(t, c, ns, "stock-g2", "g2", "otherspec", 1)
	ph := waitRunning(t, c, ns, "app=stock-g2", 1)[0]
	createPod(t, c, ns, gpuPod("work", "g1", "otherspec"))
	// The barrier: the scheduler asked the extender, which failed the only
	// node. A bind (the only step that takes a placeholder) follows a
	// passing filter in the same cycle, so once the event is out the cycle
	// is over and took nothing, and the extender's ledger still counts the
	// g2 placeholder as available.
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		msg, err := schedulingEvent(ctx, c, ns, "work")
		require.NoError(t, err)
		require.Contains(t, msg, "insufficient nvidia.com/gpu and no unclaimed runplane.io/stock=g1 placeholder")
	}, 30*time.Second, poll, "a FailedScheduling event for the g1 Pod")
	metrics, err := h.get("/metrics")
	require.NoError(t, err)
	require.True(t, containsLine(metrics, fmt.Sprintf(`runplane_extender_stock_available{node=%q,spec="g2"} 1`, ph.Spec.NodeName)), metrics)
	require.NotContains(t, metrics, `runplane_extender_stock_claims_total{spec="g2"}`)
	p, err := c.CoreV1().Pods(ns).Get(ctx, ph.Name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, ph.UID, p.UID)
	require.True(t, running(p), "g2 placeholder disturbed: %+v", p.Status)
	w, err := c.CoreV1().Pods(ns).Get(ctx, "work", metav1.GetOptions{})
	require.NoError(t, err)
	require.Empty(t, w.Spec.NodeName, "the g1 Pod is bound")
}

// (c) With stock: Required and no stock the Pod stays Pending with an event
// that says why; once a placeholder of its spec runs, the Pod takes it.
func TestRequiredWithoutStock(t *testing.T) {
	h := setup(t)
	ctx, c := t.Context(), h.client
	ns := env.Namespace(t, "required")
	nodes := addNodes(t, "required", 1, 4)
	createPod(t, c, ns, gpuPod("work", "greq", "required"))
	want := `GPU spec "greq" has stock: Required and the node has no unclaimed runplane.io/stock=greq placeholder`
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		msg, err := schedulingEvent(ctx, c, ns, "work")
		require.NoError(t, err)
		require.Contains(t, msg, want)
	}, 30*time.Second, poll, "a FailedScheduling event naming the Required policy")
	w, err := c.CoreV1().Pods(ns).Get(ctx, "work", metav1.GetOptions{})
	require.NoError(t, err)
	require.Empty(t, w.Spec.NodeName, "Required Pod bound without stock (free capacity)")
	stockDeployment(t, c, ns, "stock-greq", "greq", "required", 1)
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		w, err := c.CoreV1().Pods(ns).Get(ctx, "work", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, nodes[0], w.Spec.NodeName)
		require.NotEmpty(t, w.Annotations[api.AnnotationClaimedStock])
	}, 60*time.Second, poll, "the Required Pod to take the new placeholder")
}

// usage sums the requests of bound, non-terminal Pods per node.
func usage(pods []corev1.Pod) map[string]ledger.Resources {
	out := map[string]ledger.Resources{}
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		r := ledger.PodRequests(p)
		u := out[p.Spec.NodeName]
		u.MilliCPU += r.MilliCPU
		u.Memory += r.Memory
		u.Pods += r.Pods
		if u.Scalar == nil {
			u.Scalar = map[corev1.ResourceName]int64{}
		}
		u.Scalar[api.DefaultGPUResource] += r.Scalar[api.DefaultGPUResource]
		out[p.Spec.NodeName] = u
	}
	return out
}

const (
	burstNodes        = 25
	burstGPUsPerNode  = 6
	burstPlaceholders = 100
	burstPods         = 200
)

// (d) 200 GPU Pods at once against 100 placeholders plus free capacity
// (150 GPUs in all): no node's requests ever exceed its allocatable, no
// placeholder is claimed twice, and every Pod that fits (150) is bound.
func TestBurst(t *testing.T) { runBurst(t, "burst", false) }

// (e) The same burst with the extender killed (SIGKILL: no Lease release,
// binds cut off mid-claim) once the first Pods are bound.
func TestBurstWithRestart(t *testing.T) { runBurst(t, "burst-restart", true) }

func runBurst(t *testing.T, group string, restart bool) {
	h := setup(t)
	ctx, c := t.Context(), h.client
	group = freeGroup(t, c, group) // -count=N runs each in its own namespace and nodes
	ns := env.Namespace(t, group)
	nodes := addNodes(t, group, burstNodes, burstGPUsPerNode)
	isBurstNode := map[string]bool{}
	for _, n := range nodes {
		isBurstNode[n] = true
	}
	stockDeployment(t, c, ns, "stock-burst", "g1", group, burstPlaceholders)
	original := map[types.UID]bool{}
	for _, p := range waitRunning(t, c, ns, "app=stock-burst", burstPlaceholders) {
		original[p.UID] = true
	}

	// Watch for over-commit during the whole burst, not only at the end.
	var overcommit atomic.Value
	stopCheck := make(chan struct{})
	checkDone := make(chan struct{})
	check := func() {
		pods, err := listPods(ctx, c, ns, "")
		if err != nil {
			return
		}
		for node, u := range usage(pods) {
			if !isBurstNode[node] {
				continue
			}
			if u.Scalar[api.DefaultGPUResource] > burstGPUsPerNode || u.MilliCPU > 32000 || u.Memory > 256<<30 {
				overcommit.Store(fmt.Sprintf("node %s over-committed: %+v", node, u))
			}
		}
	}
	go func() {
		defer close(checkDone)
		for {
			select {
			case <-stopCheck:
				return
			case <-time.After(200 * time.Millisecond):
				check()
			}
		}
	}()

	boundGPU := func() (int, []corev1.Pod, error) {
		pods, err := listPods(ctx, c, ns, api.LabelGPUSpec)
		n := 0
		for i := range pods {
			if pods[i].Spec.NodeName != "" {
				n++
			}
		}
		return n, pods, err
	}
	bw := watchBound(t, ctx, c, ns, api.LabelGPUSpec)
	began := time.Now()
	killed := make(chan struct{})
	if restart {
		// Kill the extender as soon as the first Pods are bound, while the
		// rest are still being created and scheduled.
		go func() {
			defer close(killed)
			err := wait.PollUntilContextTimeout(ctx, 2*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
				return bw.count() >= 10, nil
			})
			if err != nil {
				t.Errorf("waiting for 10 GPU Pods bound: %v", err)
				return
			}
			h.killExtender()
			t.Logf("killed the extender with %d GPU Pods bound, %s into the burst", bw.count(), time.Since(began).Round(time.Millisecond))
			if err := h.expireLease(context.Background()); err != nil {
				t.Error(err)
				return
			}
			if err := h.startExtender(context.Background()); err != nil {
				t.Error(err)
				return
			}
			t.Logf("extender back and leading after %s with %d GPU Pods bound", time.Since(began).Round(time.Millisecond), bw.count())
		}()
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range burstPods {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if _, err := c.CoreV1().Pods(ns).Create(ctx, gpuPod(fmt.Sprintf("gpu-%03d", i), "g1", group), metav1.CreateOptions{}); err != nil {
				t.Errorf("creating GPU Pod %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	t.Logf("created %d GPU Pods in %s", burstPods, time.Since(began).Round(time.Millisecond))

	if restart {
		<-killed
	}

	capacity := burstNodes * burstGPUsPerNode
	var final []corev1.Pod
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		n, pods, err := boundGPU()
		require.NoError(t, err)
		assert.LessOrEqual(t, n, capacity, "GPU Pods bound to %d GPUs", capacity)
		require.Equal(t, capacity, n)
		final = pods
	}, 120*time.Second, poll, "%d GPU Pods bound", capacity)
	t.Logf("all %d fitting GPU Pods bound %s after the burst began", capacity, time.Since(began).Round(time.Millisecond))
	close(stopCheck)
	<-checkDone
	check()
	require.Nil(t, overcommit.Load())

	claimedBy := map[types.UID]string{}
	for i := range final {
		p := &final[i]
		v := p.Annotations[api.AnnotationClaimedStock]
		if v == "" || p.Spec.NodeName == "" {
			continue // bound on free capacity
		}
		claim, err := ledger.ParseClaim(v)
		require.NoError(t, err)
		if prev, twice := claimedBy[claim.UID]; twice {
			assert.Fail(t, "placeholder claimed twice", "placeholder %s/%s (%s) named by bound GPU Pods %s and %s",
				claim.Namespace, claim.Name, claim.UID, prev, p.Name)
			continue
		}
		claimedBy[claim.UID] = p.Name
		assert.Equal(t, p.Spec.NodeName, claim.Node, "Pod %s bound to one node, its claim on another", p.Name)
	}
	ph, err := listPods(ctx, c, ns, "app=stock-burst")
	require.NoError(t, err)
	for i := range ph {
		assert.NotContains(t, claimedBy, ph[i].UID, "placeholder %s was claimed but still exists", ph[i].Name)
		assert.False(t, original[ph[i].UID], "original placeholder %s still exists although GPU Pods hold every GPU", ph[i].Name)
	}
	t.Logf("%d placeholders claimed (%d of the original %d); %d placeholders now wait for capacity",
		len(claimedBy), countIn(claimedBy, original), burstPlaceholders, len(ph))
	// GPU Pods hold every GPU, so each original placeholder was taken over
	// by exactly one of them, which says so. (After a kill, a claim the dead
	// extender made for a Pod that then lost its recovery to another Pod
	// naming the same placeholder may go unrecorded: no double claim, so
	// that run only checks uniqueness.)
	if !restart {
		assert.Equal(t, burstPlaceholders, countIn(claimedBy, original), "original placeholders recorded as claimed by a bound GPU Pod")
	}
}

// freeGroup is group, or group-<i> for the first i whose namespace does not
// exist yet.
func freeGroup(t testing.TB, c kubernetes.Interface, group string) string {
	t.Helper()
	for i := 0; ; i++ {
		name := group
		if i > 0 {
			name = fmt.Sprintf("%s-%d", group, i)
		}
		_, err := c.CoreV1().Namespaces().Get(t.Context(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return name
		}
		require.NoError(t, err, "looking up namespace %s", name)
	}
}

func countIn(m map[types.UID]string, set map[types.UID]bool) int {
	n := 0
	for uid := range m {
		if set[uid] {
			n++
		}
	}
	return n
}
