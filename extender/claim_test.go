package extender

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	k8stesting "k8s.io/client-go/testing"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/runplane/runplane/api"
)

// applyBindings makes the fake clientset treat a Binding like the API
// server does: the Pod gets the node and the Binding's annotations.
func applyBindings(t testing.TB, cs *fake.Clientset) {
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := a.(k8stesting.CreateAction).GetObject().(*corev1.Binding)
		obj, err := cs.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), b.Namespace, b.Name)
		if err != nil {
			return true, nil, err
		}
		p := obj.(*corev1.Pod).DeepCopy()
		if p.Spec.NodeName != "" {
			return true, nil, apierrors.NewConflict(corev1.Resource("pods/binding"), p.Name, nil)
		}
		p.Spec.NodeName = b.Target.Name
		for k, v := range b.Annotations {
			if p.Annotations == nil {
				p.Annotations = map[string]string{}
			}
			p.Annotations[k] = v
		}
		return true, b, cs.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), p, p.Namespace)
	})
}

// bindVia posts the scheduler's bind of name to node and returns the
// extender's error ("" when bound).
func bindVia(t testing.TB, e *Extender, name, node string) string {
	t.Helper()
	body, err := json.Marshal(extenderv1.ExtenderBindingArgs{PodName: name, PodNamespace: "ns", PodUID: types.UID(name), Node: node})
	require.NoError(t, err)
	rec := call(t, e.handleBind, http.MethodPost, string(body))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var out extenderv1.ExtenderBindingResult
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
	return out.Error
}

// filterVia posts the scheduler's filter of p on nodes and returns the
// feasible nodes.
func filterVia(t testing.TB, e *Extender, p *corev1.Pod, nodes ...string) []string {
	t.Helper()
	rec := call(t, e.handleFilter, http.MethodPost, filterBody(t, p, nodes...))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var out extenderv1.ExtenderFilterResult
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
	require.NotNil(t, out.NodeNames)
	return *out.NodeNames
}

// syncGone feeds the ledger the deletion of every Pod of names the fake
// API server no longer has (the informer's delete events).
func syncGone(t testing.TB, e *Extender, names ...string) {
	t.Helper()
	for _, n := range names {
		_, err := e.client.CoreV1().Pods("ns").Get(t.Context(), n, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			e.ledger.DeletePod(types.UID(n))
			continue
		}
		require.NoError(t, err)
	}
}

// claimsOf maps each placeholder named by a bound Pod's claim annotation
// to the bound Pods naming it.
func claimsOf(t testing.TB, e *Extender) map[string][]string {
	t.Helper()
	pods, err := e.client.CoreV1().Pods("ns").List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	out := map[string][]string{}
	for _, p := range pods.Items {
		if v := p.Annotations[api.AnnotationClaimedStock]; v != "" && p.Spec.NodeName != "" {
			out[v] = append(out[v], p.Name)
		}
	}
	return out
}

// slowPatch holds the patches of one Pod until release is closed and
// closes patched once the first has landed.
type slowPatch struct {
	kubernetes.Interface
	pod              string
	release, patched chan struct{}
}

func (s slowPatch) CoreV1() corev1client.CoreV1Interface {
	return slowCore{CoreV1Interface: s.Interface.CoreV1(), s: s}
}

type slowCore struct {
	corev1client.CoreV1Interface
	s slowPatch
}

func (c slowCore) Pods(ns string) corev1client.PodInterface {
	return slowPods{PodInterface: c.CoreV1Interface.Pods(ns), s: c.s}
}

type slowPods struct {
	corev1client.PodInterface
	s slowPatch
}

func (p slowPods) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*corev1.Pod, error) {
	if name != p.s.pod {
		return p.PodInterface.Patch(ctx, name, pt, data, opts, sub...)
	}
	<-p.s.release
	defer close(p.s.patched)
	return p.PodInterface.Patch(ctx, name, pt, data, opts, sub...)
}

// TestRestartHeirListedBeforeItsPlaceholder: a killed extender annotated x
// with its claim of ph and died before deleting ph. Its successor lists x
// before ph (a Pod list is in namespace/name order: "gpu-…" before
// "stock-…"). ph must not become claimable by another Pod y while x
// inherits it: otherwise y takes ph, and x, bound on the capacity y left
// free while y's own bound event is still on its way, keeps the inherited
// annotation — two bound Pods name ph.
func TestRestartHeirListedBeforeItsPlaceholder(t *testing.T) {
	x, y := pod("x", api.LabelGPUSpec, "g1", ""), pod("y", api.LabelGPUSpec, "g1", "")
	ph := pod("ph", api.LabelStock, "g1", "warm")
	x.Annotations = map[string]string{api.AnnotationClaimedStock: "warm/ns/ph/ph"}
	e := testExtender(t, true, x, y, ph)
	applyBindings(t, e.client.(*fake.Clientset))
	e.ledger.UpsertNode(node("warm", 2))
	for _, p := range []*corev1.Pod{x, y, ph} { // the successor's list, in order
		e.ledger.UpsertPod(p)
	}

	require.Equal(t, []string{"warm"}, filterVia(t, e, y, "warm"))
	require.Empty(t, bindVia(t, e, "y", "warm"))
	syncGone(t, e, "ph") // ph's delete event, if any; y's bound event lags
	require.Empty(t, bindVia(t, e, "x", "warm"))

	for claim, pods := range claimsOf(t, e) {
		require.Len(t, pods, 1, "placeholder %s claimed by %v", claim, pods)
	}
	require.Equal(t, map[string][]string{"warm/ns/ph/ph": {"x"}}, claimsOf(t, e), "x inherited ph and took it")
}

// TestBindWaitsForStaleIntent: x's filter reserves ph and starts the claim
// annotation; x's next scheduling cycle puts it on free capacity elsewhere,
// and y takes ph. x's bind must not let the old annotation land after (or
// survive in) x's Binding: the bound x would name ph, which y took.
func TestBindWaitsForStaleIntent(t *testing.T) {
	x, y := pod("x", api.LabelGPUSpec, "g1", ""), pod("y", api.LabelGPUSpec, "g1", "")
	ph := pod("ph", api.LabelStock, "g1", "a")
	e := testExtender(t, true, x, y, ph)
	cs := e.client.(*fake.Clientset)
	applyBindings(t, cs)
	// x's intent is slow to land. (A fake reactor runs under the fake's
	// lock, so the delay sits in front of the client instead.)
	release, patched := make(chan struct{}), make(chan struct{})
	e.client = slowPatch{Interface: cs, pod: "x", release: release, patched: patched}
	e.ledger.UpsertNode(node("a", 1))
	e.ledger.UpsertNode(node("b", 1))
	for _, p := range []*corev1.Pod{x, y, ph} {
		e.ledger.UpsertPod(p)
	}

	require.Equal(t, []string{"a"}, filterVia(t, e, x, "a")) // reserves ph for x, x's intent in flight
	require.Equal(t, []string{"b"}, filterVia(t, e, x, "b")) // the next cycle: free capacity on b
	require.Equal(t, []string{"a"}, filterVia(t, e, y, "a")) // ph is free again: y's
	require.Empty(t, bindVia(t, e, "y", "a"))
	syncGone(t, e, "ph")
	bound := make(chan string, 1)
	go func() { bound <- bindVia(t, e, "x", "b") }()
	close(release)
	require.Empty(t, <-bound)
	<-patched

	for claim, pods := range claimsOf(t, e) {
		require.Len(t, pods, 1, "placeholder %s claimed by %v", claim, pods)
	}
	require.Equal(t, map[string][]string{"a/ns/ph/ph": {"y"}}, claimsOf(t, e))
}

// TestBindOnVanishedPlaceholderRecordsNone: the ledger still shows ph, but
// a predecessor already deleted it and bound x with its claim (events the
// informer has not delivered yet). y's claim of ph finds it gone: y may
// use the capacity, but the claim is x's, so y's Binding records none.
func TestBindOnVanishedPlaceholderRecordsNone(t *testing.T) {
	// Required: y binds only by taking a placeholder.
	x, y := pod("x", api.LabelGPUSpec, "greq", "warm"), pod("y", api.LabelGPUSpec, "greq", "")
	x.Annotations = map[string]string{api.AnnotationClaimedStock: "warm/ns/ph/ph"}
	ph := pod("ph", api.LabelStock, "greq", "warm")
	e := testExtender(t, true, x, y)
	applyBindings(t, e.client.(*fake.Clientset))
	e.ledger.UpsertNode(node("warm", 2))
	e.ledger.UpsertPod(y)
	e.ledger.UpsertPod(ph) // the informer's stale view: ph there, x not yet bound

	require.Equal(t, []string{"warm"}, filterVia(t, e, y, "warm"))
	e.client.(*fake.Clientset).PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		e.ledger.DeletePod(types.UID(a.(k8stesting.DeleteAction).GetName())) // the informer catches up
		return false, nil, nil
	})
	require.Empty(t, bindVia(t, e, "y", "warm"))
	got, err := e.client.CoreV1().Pods("ns").Get(t.Context(), "y", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "warm", got.Spec.NodeName)
	require.Empty(t, got.Annotations[api.AnnotationClaimedStock], "y records a claim it did not make")
	require.Equal(t, map[string][]string{"warm/ns/ph/ph": {"x"}}, claimsOf(t, e))
}
