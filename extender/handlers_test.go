package extender

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	listersv1 "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	"k8s.io/utils/clock"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
	"github.com/runplane/runplane/extender/ledger"
)

// testExtender is an extender whose informer knows pods (the Pods a
// filter or bind may name).
func testExtender(t testing.TB, leader bool, pods ...*corev1.Pod) *Extender {
	t.Helper()
	c, err := catalog.Parse(map[string]string{
		"g1":   "gpu: 1\ncpu: \"8\"\nmemory: 32Gi\n",
		"greq": "gpu: 1\ncpu: \"8\"\nmemory: 32Gi\nstock: Required\n",
	})
	require.NoError(t, err)
	l := ledger.New(ledger.Options{})
	// The fake client holds pods and absorbs the claim-intent patches filter starts.
	e := &Extender{ledger: l, catalog: catalog.NewStaticStore(c), metrics: newMetrics(), client: fake.NewClientset(objects(pods)...),
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), intents: intents{clock: clock.RealClock{}}}
	e.cfg.ClaimTimeout.Duration = 10 * time.Second
	e.cfg.ManagedResources = []corev1.ResourceName{api.DefaultGPUResource}
	e.leader.Store(leader)
	e.deletePod = func(ctx context.Context, ns, name string, opts *metav1.DeleteOptions) (runtime.Object, error) {
		return nil, e.client.CoreV1().Pods(ns).Delete(ctx, name, *opts)
	}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, p := range pods {
		require.NoError(t, idx.Add(p))
	}
	e.podLister = listersv1.NewPodLister(idx)
	return e
}

func objects(pods []*corev1.Pod) []runtime.Object {
	out := make([]runtime.Object, len(pods))
	for i, p := range pods {
		out[i] = p
	}
	return out
}

func node(name string, gpus int64) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("128"), corev1.ResourceMemory: resource.MustParse("1Ti"),
		corev1.ResourcePods: resource.MustParse("110"), api.DefaultGPUResource: *resource.NewQuantity(gpus, resource.DecimalSI),
	}}}
}

func pod(name, labelKey, spec, nodeName string) *corev1.Pod {
	res := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
		api.DefaultGPUResource: resource.MustParse("1"),
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name), Labels: map[string]string{labelKey: spec}},
		Spec: corev1.PodSpec{SchedulerName: api.SchedulerName, NodeName: nodeName, Containers: []corev1.Container{{Name: "c",
			Resources: corev1.ResourceRequirements{Requests: res, Limits: res}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func call(t testing.TB, h http.HandlerFunc, method, body string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h(rec, httptest.NewRequest(method, "/", strings.NewReader(body)))
	return rec
}

func TestBadInput(t *testing.T) {
	e := testExtender(t, true)
	tests := []struct {
		name    string
		handler http.HandlerFunc
		method  string
		body    string
		code    int
		errPart string
	}{
		{"filter not JSON", e.handleFilter, http.MethodPost, "{", 400, "decoding request body"},
		{"filter without Pod", e.handleFilter, http.MethodPost, `{"NodeNames":["a"]}`, 400, "field Pod: required"},
		{"prioritize without Pod", e.handlePrioritize, http.MethodPost, `{}`, 400, "field Pod: required"},
		{"bind not JSON", e.handleBind, http.MethodPost, `[`, 400, "decoding request body"},
		{"bind without node", e.handleBind, http.MethodPost, `{"PodName":"x","PodNamespace":"ns"}`, 400, "Node are required"},
		{"GET filter", e.handleFilter, http.MethodGet, "", 405, "use POST"},
		{"GET bind", e.handleBind, http.MethodGet, "", 405, "use POST"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := call(t, tt.handler, tt.method, tt.body)
			require.Equal(t, tt.code, rec.Code, rec.Body.String())
			require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			var body struct{ Error string }
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), "a JSON error body")
			require.Contains(t, body.Error, tt.errPart)
		})
	}
}

func filterBody(t testing.TB, p *corev1.Pod, nodes ...string) string {
	b, err := json.Marshal(extenderv1.ExtenderArgs{Pod: p, NodeNames: &nodes})
	require.NoError(t, err)
	return string(b)
}

func TestFilterHandler(t *testing.T) {
	tests := []struct {
		name     string
		leader   bool
		pod      *corev1.Pod
		feasible []string
		failed   map[string]string // node -> substring
	}{
		{"unknown spec names the label and the known specs", true, pod("x", api.LabelGPUSpec, "g9", ""), []string{},
			map[string]string{"warm": `label runplane.io/gpu-spec: unknown GPU spec "g9"; known specs: g1, greq`, "cold": "known specs"}},
		// Both fit; the leader answers with the node it reserved alone.
		{"Preferred fits warm and cold", true, pod("x", api.LabelGPUSpec, "g1", ""), []string{"warm"}, nil},
		{"Preferred fits warm and cold (not the leader: no reservation)", false, pod("x", api.LabelGPUSpec, "g1", ""), []string{"cold", "warm"}, nil},
		// A reserved node: the failed nodes are left out of the answer
		// (the scheduler reads them only when no node is feasible) ...
		{"Required fits only the warm node", true, pod("x", api.LabelGPUSpec, "greq", ""), []string{"warm"}, nil},
		// ... and a replica that reserves nothing says why each failed.
		{"Required fits only the warm node (not the leader)", false, pod("x", api.LabelGPUSpec, "greq", ""), []string{"warm"},
			map[string]string{"cold": "has stock: Required"}},
		{"a placeholder takes free capacity only", false, pod("x", api.LabelStock, "g1", ""), []string{"cold"},
			map[string]string{"warm": "insufficient nvidia.com/gpu"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := testExtender(t, tt.leader, tt.pod)
			e.ledger.UpsertNode(node("warm", 2))
			e.ledger.UpsertNode(node("cold", 1))
			e.ledger.UpsertPod(pod("ph-g1", api.LabelStock, "g1", "warm"))
			e.ledger.UpsertPod(pod("ph-greq", api.LabelStock, "greq", "warm"))
			rec := call(t, e.handleFilter, http.MethodPost, filterBody(t, tt.pod, "cold", "warm"))
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			var out extenderv1.ExtenderFilterResult
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
			require.NotNil(t, out.NodeNames)
			require.Equal(t, tt.feasible, *out.NodeNames)
			require.Len(t, out.FailedAndUnresolvableNodes, len(tt.failed))
			for n, part := range tt.failed {
				require.Contains(t, out.FailedAndUnresolvableNodes[n], part, "node %s", n)
			}
		})
	}
}

// TestFilterNotLeaderWouldPreempt: a replica that is not the leader
// answers a Pod that fits no node and may preempt with an error, so the
// scheduler retries it after its back-off instead of parking it as
// unschedulable until a cluster event (a new leader would never be asked:
// TestReservationSurvivesRestart). A Pod that may not preempt, and the
// leader, answer as before.
func TestFilterNotLeaderWouldPreempt(t *testing.T) {
	never := corev1.PreemptNever
	tests := []struct {
		name    string
		leader  bool
		policy  *corev1.PreemptionPolicy
		errPart string
	}{
		{"not the leader: retry", false, nil, "not the leader, which plans preemption"},
		{"not the leader, preemptionPolicy Never: unschedulable", false, &never, ""},
		{"the leader: unschedulable, it plans (nothing to preempt here)", true, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := pod("x", api.LabelGPUSpec, "g1", "")
			p.Spec.PreemptionPolicy = tt.policy
			e := testExtender(t, tt.leader, p)
			e.preempts = make(chan preemption, 1)
			e.ledger.UpsertNode(node("full", 0))
			rec := call(t, e.handleFilter, http.MethodPost, filterBody(t, p, "full"))
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			var out extenderv1.ExtenderFilterResult
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
			if tt.errPart != "" {
				require.Contains(t, out.Error, tt.errPart)
				return
			}
			require.Empty(t, out.Error)
			require.Contains(t, out.FailedAndUnresolvableNodes["full"], "insufficient nvidia.com/gpu")
		})
	}
}

func TestBindNotLeader(t *testing.T) {
	e := testExtender(t, false, pod("x", api.LabelGPUSpec, "g1", ""))
	rec := call(t, e.handleBind, http.MethodPost, `{"PodName":"x","PodNamespace":"ns","PodUID":"x","Node":"a"}`)
	require.Equal(t, http.StatusOK, rec.Code)
	var out extenderv1.ExtenderBindingResult
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
	require.Contains(t, out.Error, "not the leader")
	m := &dto.Metric{}
	require.NoError(t, e.metrics.bindFailures.WithLabelValues(reasonNotLeader).Write(m))
	require.Equal(t, 1.0, m.GetCounter().GetValue())
}

// TestBindLosesLeadershipMidClaim: a replica that stops leading while it
// records a claim deletes no placeholder and creates no Binding (the new
// leader's ledger already counts that capacity).
func TestBindLosesLeadershipMidClaim(t *testing.T) {
	ph := pod("ph", api.LabelStock, "g1", "warm")
	e := testExtender(t, true, pod("x", api.LabelGPUSpec, "g1", ""), ph)
	e.ledger.UpsertNode(node("warm", 1))
	e.ledger.UpsertPod(ph)
	cs := e.client.(*fake.Clientset)
	cs.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		e.leader.Store(false) // the claim record lands as leadership moves
		return false, nil, nil
	})
	rec := call(t, e.handleBind, http.MethodPost, `{"PodName":"x","PodNamespace":"ns","PodUID":"x","Node":"warm"}`)
	require.Equal(t, http.StatusOK, rec.Code)
	var out extenderv1.ExtenderBindingResult
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
	require.Contains(t, out.Error, "not the leader")
	for _, a := range cs.Actions() {
		require.False(t, a.Matches("delete", "pods"), "a placeholder deleted after leadership moved: %v", a)
		require.False(t, a.Matches("create", "pods") && a.GetSubresource() == "binding", "a Binding created after leadership moved")
	}
	_, err := cs.CoreV1().Pods("ns").Get(t.Context(), "ph", metav1.GetOptions{})
	require.NoError(t, err, "the placeholder is still there")
}

func TestPrioritizeHandler(t *testing.T) {
	e := testExtender(t, true)
	e.ledger.UpsertNode(node("warm", 2))
	e.ledger.UpsertNode(node("cold", 2))
	e.ledger.UpsertPod(pod("ph", api.LabelStock, "g1", "warm"))
	rec := call(t, e.handlePrioritize, http.MethodPost, filterBody(t, pod("x", api.LabelGPUSpec, "g1", ""), "cold", "warm"))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var out extenderv1.HostPriorityList
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
	require.Len(t, out, 2)
	require.Equal(t, extenderv1.HostPriority{Host: "warm", Score: ledger.ReservedScore}, out[1])
	require.Equal(t, "cold", out[0].Host)
	require.Less(t, out[0].Score, int64(ledger.ReservedScore))
}

// Bodies that are not the shape kube-scheduler sends (full Node objects,
// members in another order, escaped names, a Pod whose annotation mimics
// the names) answer like the scheduler's shape.
func TestFilterBodyShapes(t *testing.T) {
	p := pod("x", api.LabelGPUSpec, "g1", "")
	podJSON, err := json.Marshal(p)
	require.NoError(t, err)
	tricky := p.DeepCopy()
	tricky.Annotations = map[string]string{"NodeNames": `["fake"]}`}
	const full = "insufficient nvidia.com/gpu and no unclaimed runplane.io/stock=g1 placeholder"
	names := []string{"warm"}
	nodeList := func(names ...string) *corev1.NodeList {
		l := &corev1.NodeList{}
		for _, n := range names {
			l.Items = append(l.Items, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
		}
		return l
	}
	tests := []struct {
		name, body string
		want       extenderv1.ExtenderFilterResult
		leader     bool
	}{
		{"scheduler shape", filterBody(t, p, "warm", "full"),
			extenderv1.ExtenderFilterResult{NodeNames: &names, FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{"full": full}}, false},
		{"an annotation mimics the names", filterBody(t, tricky, "warm", "full"),
			extenderv1.ExtenderFilterResult{NodeNames: &names, FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{"full": full}}, false},
		{"names first, escaped", `{"NodeNames":["w\u0061rm","full"],"Pod":` + string(podJSON) + `}`,
			extenderv1.ExtenderFilterResult{NodeNames: &names, FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{"full": full}}, false},
		{"full Node objects", `{"Pod":` + string(podJSON) + `,"Nodes":{"items":[{"metadata":{"name":"warm"}},{"metadata":{"name":"full"}}]}}`,
			extenderv1.ExtenderFilterResult{Nodes: nodeList("warm"), FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{"full": full}}, false},
		// Two fit ("spare" first by name); the leader answers the one it
		// reserved, and no failed node.
		{"full Node objects, the leader", `{"Pod":` + string(podJSON) + `,"Nodes":{"items":[{"metadata":{"name":"warm"}},{"metadata":{"name":"full"}},{"metadata":{"name":"spare"}}]}}`,
			extenderv1.ExtenderFilterResult{Nodes: nodeList("spare")}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := testExtender(t, tt.leader, p)
			e.ledger.UpsertNode(node("warm", 1))
			e.ledger.UpsertNode(node("spare", 1))
			e.ledger.UpsertNode(node("full", 1))
			e.ledger.UpsertPod(pod("busy", api.LabelGPUSpec, "g1", "full"))
			rec := call(t, e.handleFilter, http.MethodPost, tt.body)
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			var got extenderv1.ExtenderFilterResult
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
			require.Equal(t, tt.want, got)
		})
	}
}

// TestForeignPodRefused: filter and bind act only on a Pod that exists
// with the body's UID and runplane's schedulerName; anything else is a 4xx
// with a JSON error, and nothing is written to the API server.
func TestForeignPodRefused(t *testing.T) {
	foreign := pod("foreign", api.LabelGPUSpec, "g1", "")
	foreign.Spec.SchedulerName = corev1.DefaultSchedulerName
	ours := pod("ours", api.LabelGPUSpec, "g1", "")
	otherUID := ours.DeepCopy()
	otherUID.UID = "someone-else"
	missing := pod("missing", api.LabelGPUSpec, "g1", "")
	noUID := ours.DeepCopy()
	noUID.UID = ""
	tests := []struct {
		name   string
		pod    *corev1.Pod
		status int
		msg    string
	}{
		{"another scheduler's Pod", foreign, http.StatusForbidden, "default-scheduler"},
		{"another Pod of the name", otherUID, http.StatusConflict, "has UID ours"},
		{"a Pod that does not exist", missing, http.StatusNotFound, "not found"},
		{"no UID", noUID, http.StatusBadRequest, "UID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := testExtender(t, true, foreign, ours)
			e.ledger.UpsertNode(node("warm", 2))
			e.ledger.UpsertPod(pod("ph", api.LabelStock, "g1", "warm"))
			rec := call(t, e.handleFilter, http.MethodPost, filterBody(t, tt.pod, "warm"))
			require.Equal(t, tt.status, rec.Code, rec.Body.String())
			require.Contains(t, rec.Body.String(), tt.msg)
			bind, err := json.Marshal(extenderv1.ExtenderBindingArgs{PodName: tt.pod.Name, PodNamespace: tt.pod.Namespace, PodUID: tt.pod.UID, Node: "warm"})
			require.NoError(t, err)
			rec = call(t, e.handleBind, http.MethodPost, string(bind))
			wantBind := tt.status
			if tt.pod.UID == "" {
				wantBind = http.StatusBadRequest
			}
			require.Equal(t, wantBind, rec.Code, rec.Body.String())
			for _, a := range e.client.(*fake.Clientset).Actions() {
				require.Equal(t, "get", a.GetVerb(), "the extender wrote to the API server: %v", a)
			}
		})
	}
	// The runplane-scheduled Pod itself is served.
	e := testExtender(t, true, foreign, ours)
	e.ledger.UpsertNode(node("warm", 2))
	rec := call(t, e.handleFilter, http.MethodPost, filterBody(t, ours, "warm"))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
}

// A spec whose resources the extender does not manage (the catalog changed
// after Start checked it) fails every node, naming the resource and the
// chart value.
func TestFilterUnmanagedResource(t *testing.T) {
	c, err := catalog.Parse(map[string]string{"mig": "gpu: 1\ncpu: \"8\"\nmemory: 32Gi\nresources: {nvidia.com/mig-1g.10gb: 1}\n"})
	require.NoError(t, err)
	p := pod("x", api.LabelGPUSpec, "mig", "")
	e := testExtender(t, true, p)
	e.catalog = catalog.NewStaticStore(c)
	e.ledger.UpsertNode(node("n", 1))
	res := call(t, e.handleFilter, http.MethodPost, filterBody(t, p, "n"))
	require.Equal(t, http.StatusOK, res.Code)
	var out extenderv1.ExtenderFilterResult
	require.NoError(t, json.Unmarshal(res.Body.Bytes(), &out))
	require.Empty(t, *out.NodeNames)
	require.Contains(t, out.FailedAndUnresolvableNodes["n"], "resource nvidia.com/mig-1g.10gb is not managed by the runplane extender")
	require.Contains(t, out.FailedAndUnresolvableNodes["n"], "scheduler.extender.managedResources")
}

// The verbs on the decoded v1 types, without the handlers' pooled buffers
// and deferred decoding: what the handlers must answer, and the baseline
// of BenchmarkFilterPrioritize.

// filter evaluates the Pod on the nodes; the leader reserves the best one.
func (e *Extender) filter(args *extenderv1.ExtenderArgs) *extenderv1.ExtenderFilterResult {
	out, _ := filterInto(e, args, nodeNames(args), args.Nodes == nil || args.NodeNames != nil, ledger.FilterResult{})
	return out
}

// prioritize scores the nodes; an unknown spec scores 0 everywhere.
func (e *Extender) prioritize(args *extenderv1.ExtenderArgs) extenderv1.HostPriorityList {
	return priorities(e.prioritizeInto(args))
}

// priorities pairs names with their scores (none: 0).
func priorities(names []string, scores []int64) extenderv1.HostPriorityList {
	list := make(extenderv1.HostPriorityList, 0, len(names))
	for i, n := range names {
		list = append(list, extenderv1.HostPriority{Host: n, Score: at(scores, i)})
	}
	return list
}

// syncedCache is a manager cache whose stores have synced.
type syncedCache struct{ ctrlcache.Cache }

func (syncedCache) WaitForCacheSync(context.Context) bool { return true }

// TestLeadsOnlyOnceTheLedgerHasEveryObject: the Lease is won once the
// cache's stores have synced, but the ledger's event handlers may not have
// been handed every listed object yet; the extender binds only once they
// have (without the wait it bound on a ledger missing Pods).
func TestLeadsOnlyOnceTheLedgerHasEveryObject(t *testing.T) {
	e := testExtender(t, false)
	e.cache = syncedCache{}
	var handed atomic.Bool
	var asked atomic.Int32
	e.handlersSynced = []cache.InformerSynced{func() bool {
		asked.Add(1)
		return handed.Load()
	}}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.lead(ctx) }()
	// The barrier: lead has asked twice (it polls) and was told no, or it
	// leads already without asking.
	require.Eventually(t, func() bool { return asked.Load() >= 2 || e.isLeader() }, 10*time.Second, time.Millisecond)
	require.False(t, e.isLeader(), "binding before the ledger has every object")
	handed.Store(true)
	require.Eventually(t, e.isLeader, 10*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	require.False(t, e.isLeader(), "binding after the Lease")
}
