package ledger

import (
	"cmp"
	"fmt"
	"math/rand"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/runplane/runplane/api"
)

const gpu corev1.ResourceName = "nvidia.com/gpu"

func testNode(name string, gpus int64) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods: resource.MustParse("110"), gpu: *resource.NewQuantity(gpus, resource.DecimalSI),
	}}}
}

// testPod is a Pod of n GPUs (8 cpu, 32Gi each); kind is "gpu", "stock" or "".
func testPod(name, kind, spec, nodeName string, gpus int64, phase corev1.PodPhase) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), Labels: map[string]string{}},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{
				corev1.ResourceCPU: *resource.NewQuantity(8*gpus, resource.DecimalSI), corev1.ResourceMemory: *resource.NewQuantity(gpus*32<<30, resource.BinarySI),
				gpu: *resource.NewQuantity(gpus, resource.DecimalSI),
			}}}}},
		Status: corev1.PodStatus{Phase: phase},
	}
	switch kind {
	case "gpu":
		p.Labels[api.LabelGPUSpec] = spec
		p.Spec.SchedulerName = api.SchedulerName
	case "stock":
		p.Labels[api.LabelStock] = spec
		p.Spec.SchedulerName = api.SchedulerName
	}
	return p
}

func TestPodRequests(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	req := func(cpu string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}
	}
	tests := []struct {
		name string
		spec corev1.PodSpec
		want int64 // millicores
	}{
		{"containers add up", corev1.PodSpec{Containers: []corev1.Container{{Resources: req("1")}, {Resources: req("500m")}}}, 1500},
		{"init peak wins", corev1.PodSpec{InitContainers: []corev1.Container{{Resources: req("4")}}, Containers: []corev1.Container{{Resources: req("1")}}}, 4000},
		{"sidecar adds to containers and to later inits", corev1.PodSpec{
			InitContainers: []corev1.Container{{Resources: req("1"), RestartPolicy: &always}, {Resources: req("3")}},
			Containers:     []corev1.Container{{Resources: req("1")}},
		}, 4000},
		{"overhead", corev1.PodSpec{Containers: []corev1.Container{{Resources: req("1")}}, Overhead: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}}, 1250},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PodRequests(&corev1.Pod{Spec: tt.spec})
			require.Equal(t, tt.want, got.MilliCPU)
			require.Equal(t, int64(1), got.Pods)
		})
	}
}

func TestFilter(t *testing.T) {
	type pod struct {
		name, kind, spec, node string
		gpus                   int64
	}
	tests := []struct {
		name     string
		nodes    map[string]int64
		pods     []pod
		incoming pod
		required bool
		// want: node -> "" when feasible, else a substring of the reason.
		want       map[string]string
		wantChosen string
		wantClaim  string // placeholder name
	}{
		{
			name: "free capacity fits, full node does not", nodes: map[string]int64{"a": 1, "b": 1},
			pods:       []pod{{"w", "gpu", "g1", "b", 1}},
			incoming:   pod{"x", "gpu", "g1", "", 1},
			want:       map[string]string{"a": "", "b": "insufficient nvidia.com/gpu and no unclaimed runplane.io/stock=g1 placeholder"},
			wantChosen: "a",
		},
		{
			name: "same-spec placeholder counts as capacity and is preferred", nodes: map[string]int64{"a": 2, "b": 1},
			pods:     []pod{{"ph", "stock", "g1", "b", 1}},
			incoming: pod{"x", "gpu", "g1", "", 1},
			want:     map[string]string{"a": "", "b": ""}, wantChosen: "b", wantClaim: "ph",
		},
		{
			name: "warm node with free room: no claim needed", nodes: map[string]int64{"a": 2},
			pods:     []pod{{"ph", "stock", "g1", "a", 1}},
			incoming: pod{"x", "gpu", "g1", "", 1},
			want:     map[string]string{"a": ""}, wantChosen: "a",
		},
		{
			// Taking pha would spend stock (and pay for its refill) where
			// b's free room is as warm.
			name: "free room on a warm node before a takeover", nodes: map[string]int64{"a": 4, "b": 4, "c": 4},
			pods: []pod{{"pha", "stock", "g1", "a", 1}, {"wa", "gpu", "g1", "a", 3},
				{"phb", "stock", "g1", "b", 1}, {"wb", "gpu", "g1", "b", 1}},
			incoming: pod{"x", "gpu", "g1", "", 1},
			want:     map[string]string{"a": "", "b": "", "c": ""}, wantChosen: "b",
		},
		{
			name: "other-spec placeholder is never capacity", nodes: map[string]int64{"a": 1},
			pods:     []pod{{"ph", "stock", "g2", "a", 1}},
			incoming: pod{"x", "gpu", "g1", "", 1},
			want:     map[string]string{"a": "insufficient nvidia.com/gpu"},
		},
		{
			name: "Required ignores free capacity", nodes: map[string]int64{"a": 8, "b": 1},
			pods:     []pod{{"ph", "stock", "g1", "b", 1}},
			incoming: pod{"x", "gpu", "g1", "", 1}, required: true,
			want: map[string]string{"a": `GPU spec "g1" has stock: Required`, "b": ""}, wantChosen: "b", wantClaim: "ph",
		},
		{
			name: "a placeholder itself never claims", nodes: map[string]int64{"a": 1},
			pods:     []pod{{"ph", "stock", "g1", "a", 1}},
			incoming: pod{"ph2", "stock", "g1", "", 1},
			want:     map[string]string{"a": "insufficient nvidia.com/gpu"},
		},
		{
			// Else the next GPU Pod packing onto a would take it where b's
			// free capacity would do (better says why).
			name: "a placeholder goes to a node without its spec's stock first", nodes: map[string]int64{"a": 4, "b": 4, "c": 4},
			pods:     []pod{{"ph", "stock", "g1", "a", 1}, {"w", "gpu", "g1", "a", 2}, {"other", "stock", "g2", "c", 1}},
			incoming: pod{"ph2", "stock", "g1", "", 1},
			want:     map[string]string{"a": "", "b": "", "c": ""}, wantChosen: "c",
		},
		{
			name: "packs onto the fuller node", nodes: map[string]int64{"a": 8, "b": 8},
			pods:     []pod{{"w", "gpu", "g1", "b", 3}},
			incoming: pod{"x", "gpu", "g1", "", 1},
			want:     map[string]string{"a": "", "b": ""}, wantChosen: "b",
		},
		{
			name: "unknown node", nodes: map[string]int64{},
			incoming: pod{"x", "gpu", "g1", "", 1},
			want:     map[string]string{"ghost": "not (yet) known"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := New(Options{})
			var names []string
			for n, g := range tt.nodes {
				l.UpsertNode(testNode(n, g))
			}
			for n := range tt.want {
				names = append(names, n)
			}
			for _, p := range tt.pods {
				l.UpsertPod(testPod(p.name, p.kind, p.spec, p.node, p.gpus, corev1.PodRunning))
			}
			in := testPod(tt.incoming.name, tt.incoming.kind, tt.incoming.spec, "", tt.incoming.gpus, corev1.PodPending)
			res := l.Filter(RequestFor(in, tt.required), names, true)
			for n, want := range tt.want {
				if want == "" {
					assert.NotContains(t, res.Reasons(), n)
					assert.Contains(t, res.Feasible, n)
				} else {
					assert.Contains(t, res.Reasons()[n], want, "node %s", n)
				}
			}
			assert.Equal(t, tt.wantChosen, res.Chosen)
			gotClaim := ""
			if res.Claim != nil {
				gotClaim = res.Claim.Name
			}
			assert.Equal(t, tt.wantClaim, gotClaim)
		})
	}
}

func TestReservationsNeverDoubleCount(t *testing.T) {
	l := New(Options{})
	l.UpsertNode(testNode("a", 2))
	l.UpsertPod(testPod("ph", "stock", "g1", "a", 1, corev1.PodRunning))
	l.UpsertPod(testPod("w", "gpu", "g1", "a", 1, corev1.PodRunning))
	x := RequestFor(testPod("x", "gpu", "g1", "", 1, corev1.PodPending), false)
	y := RequestFor(testPod("y", "gpu", "g1", "", 1, corev1.PodPending), false)
	r := l.Filter(x, []string{"a"}, true)
	require.Equal(t, "a", r.Chosen)
	requireClaim(t, "ph", r)
	require.Empty(t, l.Filter(y, []string{"a"}, true).Chosen, "x reserved the only placeholder")
	// x filtered again (a new cycle) supersedes its own reservation.
	require.Equal(t, "a", l.Filter(x, []string{"a"}, true).Chosen)
	// The scheduler binds y to a anyway: the bind re-check refuses it.
	_, err := l.BeginBind(y, "a")
	require.Error(t, err, "BeginBind(y) on a full node")
	ph, err := l.BeginBind(x, "a")
	require.NoError(t, err)
	require.NotNil(t, ph)
	require.Equal(t, "ph", ph.Name)
	_, err = l.BeginBind(x, "a")
	require.ErrorIs(t, err, ErrBindInProgress)
	// Bind fails before the delete: the placeholder is claimable again.
	l.EndBind(x.UID, false, false)
	requireClaim(t, "ph", l.Filter(y, []string{"a"}, true))
}

func TestBindLifecycle(t *testing.T) {
	l := New(Options{})
	l.UpsertNode(testNode("a", 1))
	ph := testPod("ph", "stock", "g1", "a", 1, corev1.PodRunning)
	l.UpsertPod(ph)
	xp := testPod("x", "gpu", "g1", "", 1, corev1.PodPending)
	l.UpsertPod(xp)
	x := RequestFor(xp, false)
	l.Filter(x, []string{"a"}, true)
	claim, err := l.BeginBind(x, "a")
	require.NoError(t, err)
	require.NotNil(t, claim)
	require.Zero(t, l.Free("a").Scalar[gpu], "free GPUs during claim (x assumed, ph claimed)")
	// The placeholder is deleted: waiting returns once the informer says so.
	done := make(chan error)
	go func() { done <- l.WaitGone(t.Context(), claim.UID) }()
	l.DeletePod(claim.UID)
	require.NoError(t, <-done)
	l.EndBind(x.UID, true, true)
	_, st, ok := l.Assumed(x.UID)
	require.True(t, ok)
	require.Equal(t, Bound, st)
	// Its replacement cannot take x's capacity.
	ph2 := RequestFor(testPod("ph2", "stock", "g1", "", 1, corev1.PodPending), false)
	require.Empty(t, l.Filter(ph2, []string{"a"}, true).Chosen, "the replacement placeholder got a node")
	// Informer sees x bound: the assumption turns into the bound record.
	xp = xp.DeepCopy()
	xp.Spec.NodeName = "a"
	l.UpsertPod(xp)
	_, _, ok = l.Assumed(x.UID)
	require.False(t, ok, "x still assumed after the informer saw it bound")
	require.Zero(t, l.Free("a").Scalar[gpu])
	xp = xp.DeepCopy()
	xp.Status.Phase = corev1.PodSucceeded
	l.UpsertPod(xp)
	require.Equal(t, int64(1), l.Free("a").Scalar[gpu], "free GPUs after x finished")
}

func TestReservationExpires(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(0, 0))
	l := New(Options{ReservationTTL: time.Second, Clock: clk})
	l.UpsertNode(testNode("a", 1))
	x := RequestFor(testPod("x", "gpu", "g1", "", 1, corev1.PodPending), false)
	y := RequestFor(testPod("y", "gpu", "g1", "", 1, corev1.PodPending), false)
	l.Filter(x, []string{"a"}, true)
	require.Empty(t, l.Filter(y, []string{"a"}, true).Chosen, "y fit while x held the reservation")
	clk.SetTime(clk.Now().Add(2 * time.Second))
	l.Sweep()
	require.Equal(t, "a", l.Filter(y, []string{"a"}, true).Chosen, "x's stale reservation was not swept")
}

func TestRecoverClaimAfterRestart(t *testing.T) {
	// A previous leader annotated x and deleted ph, then died before binding.
	l := New(Options{})
	l.UpsertNode(testNode("a", 1))
	l.UpsertNode(testNode("b", 1))
	xp := testPod("x", "gpu", "g1", "", 1, corev1.PodPending)
	xp.Annotations = map[string]string{api.AnnotationClaimedStock: "a/ns/ph/uid-ph"}
	l.UpsertPod(xp)
	// ph's replacement must not take the capacity ph left for x.
	ph2 := RequestFor(testPod("ph2", "stock", "g1", "", 1, corev1.PodPending), false)
	require.Equal(t, "b", l.Filter(ph2, []string{"a", "b"}, true).Chosen)
	r := l.Filter(RequestFor(xp, false), []string{"a", "b"}, true)
	require.Equal(t, "a", r.Chosen)
	require.Nil(t, r.Claim)
}

func TestRecoverClaimPlaceholderStillThere(t *testing.T) {
	// The previous leader annotated x but died before deleting ph.
	l := New(Options{})
	l.UpsertNode(testNode("a", 1))
	l.UpsertPod(testPod("ph", "stock", "g1", "a", 1, corev1.PodRunning))
	xp := testPod("x", "gpu", "g1", "", 1, corev1.PodPending)
	xp.Annotations = map[string]string{api.AnnotationClaimedStock: "a/ns/ph/uid-ph"}
	l.UpsertPod(xp)
	y := RequestFor(testPod("y", "gpu", "g1", "", 1, corev1.PodPending), false)
	require.Empty(t, l.Filter(y, []string{"a"}, true).Chosen, "ph is x's")
	requireClaim(t, "ph", l.Filter(RequestFor(xp, false), []string{"a"}, true))
}

func TestPrioritize(t *testing.T) {
	l := New(Options{})
	for _, n := range []string{"cold-empty", "cold-busy", "warm"} {
		l.UpsertNode(testNode(n, 8))
	}
	l.UpsertPod(testPod("w", "gpu", "g1", "cold-busy", 3, corev1.PodRunning))
	l.UpsertPod(testPod("ph", "stock", "g1", "warm", 1, corev1.PodRunning))
	x := RequestFor(testPod("x", "gpu", "g1", "", 1, corev1.PodPending), false)
	names := []string{"cold-empty", "cold-busy", "warm"}
	got := map[string]int64{}
	for i, s := range l.Prioritize(x, names) {
		got[names[i]] = s
	}
	require.Equal(t, int64(10), got["warm"])
	require.Greater(t, got["cold-busy"], got["cold-empty"])
	require.Less(t, got["cold-busy"], int64(10))
	// After a reservation the reserved node gets 10 whatever it scores.
	l.UpsertPod(testPod("y", "gpu", "g1", "warm", 2, corev1.PodRunning))
	l.Filter(x, names, true)
	n, _, _ := l.Assumed(x.UID)
	for i, s := range l.Prioritize(x, names) {
		require.Equal(t, names[i] == n, s == 10, "reserved %s, node %s scores %d", n, names[i], s)
	}
}

// TestConcurrentNeverOvercommits runs filter/bind cycles from many
// goroutines against few nodes and placeholders and checks the invariants:
// no node over-committed, no placeholder claimed twice.
func TestConcurrentNeverOvercommits(t *testing.T) {
	l := New(Options{})
	const nodes, pods = 8, 200
	var names []string
	for i := range nodes {
		n := fmt.Sprintf("n%d", i)
		names = append(names, n)
		l.UpsertNode(testNode(n, 4))
		for j := range 2 {
			l.UpsertPod(testPod(fmt.Sprintf("ph-%d-%d", i, j), "stock", "g1", n, 1, corev1.PodRunning))
		}
	}
	var mu sync.Mutex
	claimed := map[types.UID]types.UID{}
	gpusBound := map[string]int64{}
	var wg sync.WaitGroup
	for i := range pods {
		wg.Go(func() {
			kind := "gpu"
			if i%7 == 0 {
				kind = "stock" // a replacement placeholder, placed beside them
			}
			p := testPod(fmt.Sprintf("x%d", i), kind, "g1", "", 1+int64(i%2), corev1.PodPending)
			req := RequestFor(p, i%5 == 0)
			r := l.Filter(req, names, true)
			node := r.Chosen
			if node == "" || rand.Intn(4) == 0 {
				node = names[rand.Intn(nodes)] // the scheduler may pick another node
			}
			ph, err := l.BeginBind(req, node)
			if err != nil {
				return
			}
			if ph != nil {
				mu.Lock()
				assert.NotContains(t, claimed, ph.UID, "placeholder %s claimed twice, by %s too", ph.Name, req.UID)
				claimed[ph.UID] = req.UID
				mu.Unlock()
				if rand.Intn(3) == 0 {
					// Forget the claim before the ledger frees the
					// placeholder: another bind may take it at once.
					mu.Lock()
					delete(claimed, ph.UID)
					mu.Unlock()
					l.EndBind(req.UID, false, false)
					return
				}
				l.DeletePod(ph.UID)
			}
			l.EndBind(req.UID, true, ph != nil)
			if kind == "gpu" { // a bound placeholder is in Stock below
				mu.Lock()
				gpusBound[node] += req.Requests.Scalar[gpu]
				mu.Unlock()
			}
			p.Spec.NodeName = node
			p.Status.Phase = corev1.PodRunning
			l.UpsertPod(p)
		})
	}
	wg.Wait()
	checkIndex(t, l)
	for _, n := range names {
		free := l.Free(n)
		assert.GreaterOrEqual(t, free.Scalar[gpu], int64(0), "node %s over-committed", n)
		assert.GreaterOrEqual(t, free.MilliCPU, int64(0), "node %s over-committed", n)
		left := int64(0)
		for _, s := range l.Stock() {
			if s.Node == n {
				left += int64(s.Total)
			}
		}
		assert.LessOrEqual(t, gpusBound[n]+left, int64(4), "node %s: GPUs bound + placeholders left", n)
	}
}

// A placeholder the extender just bound is claimable at once, and a stale
// informer event from before the binding does not unbind it.
func TestPlaceholderBoundIsClaimableAtOnce(t *testing.T) {
	l := New(Options{})
	l.UpsertNode(testNode("a", 1))
	php := testPod("ph", "stock", "g1", "", 1, corev1.PodPending)
	l.UpsertPod(php)
	ph := RequestFor(php, false)
	require.Equal(t, "a", l.Filter(ph, []string{"a"}, true).Chosen)
	_, err := l.BeginBind(ph, "a")
	require.NoError(t, err)
	l.EndBind(ph.UID, true, false)
	l.UpsertPod(php) // stale: still unbound
	x := RequestFor(testPod("x", "gpu", "g1", "", 1, corev1.PodPending), true)
	requireClaim(t, "ph", l.Filter(x, []string{"a"}, true))
	require.Zero(t, l.Free("a").Scalar[gpu])
}

// Two unbound Pods name the same placeholder (a superseded intent): only
// one inherits the claim, and a recovered claim is re-checked at bind.
func TestRecoverOneHeir(t *testing.T) {
	l := New(Options{})
	l.UpsertNode(testNode("a", 1))
	var reqs []Request
	for _, name := range []string{"x", "y"} {
		p := testPod(name, "gpu", "g1", "", 1, corev1.PodPending)
		p.Annotations = map[string]string{api.AnnotationClaimedStock: "a/ns/ph/uid-ph"}
		l.UpsertPod(p)
		reqs = append(reqs, RequestFor(p, false))
	}
	heirs := 0
	for _, r := range reqs {
		if l.Inherits(r.UID) == "uid-ph" {
			heirs++
		}
	}
	require.Equal(t, 1, heirs, "heirs of one placeholder")
	bound := 0
	for _, r := range reqs {
		if _, err := l.BeginBind(r, "a"); err == nil {
			bound++
		}
	}
	require.Equal(t, 1, bound, "Pods bound to a 1-GPU node")
}

// A bound Pod recording a claim settles it: an unbound Pod naming the same
// placeholder (a superseded intent) does not inherit it, in either order.
func TestRecoverSettledClaim(t *testing.T) {
	for _, boundFirst := range []bool{true, false} {
		l := New(Options{})
		l.UpsertNode(testNode("a", 2))
		bound := testPod("b", "gpu", "g1", "a", 1, corev1.PodRunning)
		pending := testPod("p", "gpu", "g1", "", 1, corev1.PodPending)
		for _, p := range []*corev1.Pod{bound, pending} {
			p.Annotations = map[string]string{api.AnnotationClaimedStock: "a/ns/ph/uid-ph"}
		}
		if boundFirst {
			l.UpsertPod(bound)
			l.UpsertPod(pending)
		} else {
			l.UpsertPod(pending)
			l.UpsertPod(bound)
		}
		assert.Empty(t, l.Inherits(pending.UID), "boundFirst=%v: the pending Pod inherits", boundFirst)
		_, _, ok := l.Assumed(pending.UID)
		assert.False(t, ok, "boundFirst=%v: the pending Pod keeps a recovered assumption", boundFirst)
		assert.Equal(t, int64(1), l.Free("a").Scalar[gpu], "boundFirst=%v: free GPUs", boundFirst)
	}
}

// checkIndex compares each node's index of claimable placeholders, which
// Filter reads, with a walk of its placeholders: the same ones, in UID
// order, with their records' current pledge and frees.
func checkIndex(t *testing.T, l *Ledger) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range l.nodes {
		require.LessOrEqual(t, len(n.ready), len(l.specs), "node %s: index of a spec the ledger does not know", n.name)
		for spec, i := range l.specs {
			var want []stockRef
			for _, p := range n.stock[spec] {
				if p.claimable() {
					want = append(want, newStockRef(p))
				}
			}
			slices.SortFunc(want, func(a, b stockRef) int { return cmp.Compare(a.uid, b.uid) })
			assert.Equal(t, len(want), len(n.readyOf(i)), "node %s spec %s: indexed vs claimable placeholders", n.name, spec)
			if len(want) > 0 {
				assert.Equal(t, want, n.readyOf(i), "node %s spec %s: index vs claimable placeholders", n.name, spec)
			}
		}
		// placing counts the placeholders assumed onto the node.
		var placing []int32
		if n.placing != nil {
			placing = make([]int32, len(n.placing))
		}
		for _, a := range l.assumed {
			if a.node == n.name && a.stock > 0 {
				require.Less(t, a.stock-1, len(placing), "node %s: a placeholder assumed and not counted", n.name)
				placing[a.stock-1]++
			}
		}
		assert.Equal(t, placing, n.placing, "node %s: placing vs assumed placeholders", n.name)
	}
}

// requireClaim requires that the filter reserved the placeholder named ph.
func requireClaim(t *testing.T, ph string, r FilterResult) {
	t.Helper()
	require.NotNil(t, r.Claim, "%+v", r)
	require.Equal(t, ph, r.Claim.Name)
}

// A Pod list is in namespace/name order, so a successor often sees the
// heir of a claim before the placeholder it claimed: the placeholder is
// the heir's when it shows up, as when it comes first.
func TestRecoverPlaceholderListedAfterHeir(t *testing.T) {
	l := New(Options{})
	l.UpsertNode(testNode("a", 2))
	xp := testPod("x", "gpu", "g1", "", 1, corev1.PodPending)
	xp.Annotations = map[string]string{api.AnnotationClaimedStock: "a/ns/ph/uid-ph"}
	l.UpsertPod(xp)
	l.UpsertPod(testPod("ph", "stock", "g1", "a", 1, corev1.PodRunning))
	y := RequestFor(testPod("y", "gpu", "g1", "", 1, corev1.PodPending), false)
	r := l.Filter(y, []string{"a"}, true)
	require.Equal(t, "a", r.Chosen, "the node's free GPU")
	require.Nil(t, r.Claim, "ph is x's")
	requireClaim(t, "ph", l.Filter(RequestFor(xp, false), []string{"a"}, true))
	checkIndex(t, l)
}

// A placeholder another Pod claims is no longer inherited: the heir, bound
// on other capacity, must not record it.
func TestInheritanceEndsWhenAnotherPodClaims(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(0, 0))
	l := New(Options{Clock: clk})
	l.UpsertNode(testNode("a", 2))
	l.UpsertPod(testPod("ph", "stock", "g1", "a", 1, corev1.PodRunning))
	xp := testPod("x", "gpu", "g1", "", 1, corev1.PodPending)
	xp.Annotations = map[string]string{api.AnnotationClaimedStock: "a/ns/ph/uid-ph"}
	l.UpsertPod(xp)
	require.Equal(t, types.UID("uid-ph"), l.Inherits(xp.UID))
	clk.SetTime(clk.Now().Add(3 * time.Minute)) // x's recovered claim expires
	l.Sweep()
	y := RequestFor(testPod("y", "gpu", "g1", "", 1, corev1.PodPending), true) // Required: takes stock
	requireClaim(t, "ph", l.Filter(y, []string{"a"}, true))
	_, err := l.BeginBind(y, "a")
	require.NoError(t, err)
	l.EndBind(y.UID, true, true)
	l.DeletePod("uid-ph")
	require.Empty(t, l.Inherits(xp.UID), "x still inherits ph, which y took")
	_, ok := l.Inherited(xp.UID, "a")
	require.False(t, ok)
}

// An unbound Pod's claim annotation seen only after this process gave the
// placeholder to another Pod (a predecessor's superseded intent that
// landed late) inherits nothing, whether the placeholder is still there
// or already deleted by that claim.
func TestRecoverLateAnnotationOfClaimedPlaceholder(t *testing.T) {
	for _, deleted := range []bool{false, true} {
		l := New(Options{})
		l.UpsertNode(testNode("a", 2))
		l.UpsertPod(testPod("ph", "stock", "g1", "a", 1, corev1.PodRunning))
		y := RequestFor(testPod("y", "gpu", "g1", "", 1, corev1.PodPending), true)
		requireClaim(t, "ph", l.Filter(y, []string{"a"}, true))
		if deleted {
			_, err := l.BeginBind(y, "a")
			require.NoError(t, err)
			l.DeletePod("uid-ph")
		}
		xp := testPod("x", "gpu", "g1", "", 1, corev1.PodPending)
		xp.Annotations = map[string]string{api.AnnotationClaimedStock: "a/ns/ph/uid-ph"}
		l.UpsertPod(xp)
		assert.Empty(t, l.Inherits(xp.UID), "deleted=%v: x inherits the placeholder y claimed", deleted)
		_, _, ok := l.Assumed(xp.UID)
		assert.False(t, ok, "deleted=%v: x holds capacity for it", deleted)
	}
}

// Placeholders placed one after the other spread too: one reserved and not
// yet bound counts as stock on its node, or every replacement of a burst
// would pack onto the same node (bound later than the next one's filter)
// and be taken there by the GPU Pods packing it.
func TestPlaceholdersSpreadBeforeBound(t *testing.T) {
	l := New(Options{})
	names := []string{"a", "b", "c"}
	for _, n := range names {
		l.UpsertNode(testNode(n, 8))
	}
	l.UpsertPod(testPod("w", "gpu", "g1", "a", 2, corev1.PodRunning))
	chosen := map[string]string{}
	for _, ph := range []string{"ph1", "ph2", "ph3"} {
		res := l.Filter(RequestFor(testPod(ph, "stock", "g1", "", 1, corev1.PodPending), false), names, true)
		require.NotEmpty(t, res.Chosen, ph)
		chosen[res.Chosen] = ph
	}
	assert.Len(t, chosen, 3, "one placeholder per node: %v", chosen)
	assert.Equal(t, "ph1", chosen["a"], "the first packs: no node has stock yet")
	// A bind keeps the count: the next one still goes elsewhere.
	_, err := l.BeginBind(RequestFor(testPod("ph1", "stock", "g1", "", 1, corev1.PodPending), false), "a")
	require.NoError(t, err)
	res := l.Filter(RequestFor(testPod("ph4", "stock", "g2", "", 1, corev1.PodPending), false), names, true)
	assert.Equal(t, "a", res.Chosen, "another spec's stock does not count")
}

// A placeholder larger than the Pod claiming it holds its surplus until it
// is deleted: the claim can still be undone (the bind fails before the
// delete, the scheduler binds elsewhere, the reservation expires), and the
// placeholder then counts in full again. Lending the surplus out meanwhile
// over-committed the node (TestConcurrentNeverOvercommits: a 1-GPU Pod
// claimed a 2-GPU placeholder, another Pod bound on the GPU left over, the
// claimer's bind failed: node at -1 GPU).
func TestClaimedPlaceholderSurplusHeldUntilDeleted(t *testing.T) {
	tests := []struct {
		name string
		// undo ends x's claim on ph without deleting it (nil: x deletes
		// ph and binds).
		undo func(t *testing.T, l *Ledger, x Request, clk *clocktesting.FakeClock)
	}{
		{"bind fails before the delete", func(t *testing.T, l *Ledger, x Request, _ *clocktesting.FakeClock) {
			ph, err := l.BeginBind(x, "a")
			require.NoError(t, err)
			require.Equal(t, "ph", ph.Name)
			l.EndBind(x.UID, false, false)
		}},
		{"scheduler binds elsewhere", func(t *testing.T, l *Ledger, x Request, _ *clocktesting.FakeClock) {
			ph, err := l.BeginBind(x, "b")
			require.NoError(t, err)
			require.Nil(t, ph)
		}},
		{"reservation expires", func(t *testing.T, l *Ledger, _ Request, clk *clocktesting.FakeClock) {
			clk.Step(time.Minute)
			l.Sweep()
		}},
		{"placeholder deleted", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Unix(1e9, 0))
			l := New(Options{Clock: clk})
			l.UpsertNode(testNode("a", 2))
			l.UpsertNode(testNode("b", 1))
			l.UpsertPod(testPod("ph", "stock", "g1", "a", 2, corev1.PodRunning))
			x := RequestFor(testPod("x", "gpu", "g1", "", 1, corev1.PodPending), false)
			requireClaim(t, "ph", l.Filter(x, []string{"a"}, true))
			y := RequestFor(testPod("y", "", "", "", 1, corev1.PodPending), false)
			if tt.undo == nil {
				ph, err := l.BeginBind(x, "a")
				require.NoError(t, err)
				l.DeletePod(ph.UID)
				l.EndBind(x.UID, true, true)
				_, err = l.BeginBind(y, "a")
				require.NoError(t, err, "the GPU ph held beyond x's is free once ph is gone")
				require.Zero(t, l.Free("a").Scalar[gpu])
				return
			}
			assert.Empty(t, l.Filter(y, []string{"a"}, false).Feasible, "ph's second GPU is not free while ph is there")
			_, err := l.BeginBind(y, "a")
			var noRoom *NoRoomError
			assert.ErrorAs(t, err, &noRoom, "ph's second GPU is not free while ph is there")
			tt.undo(t, l, x, clk)
			require.Zero(t, l.Free("a").Scalar[gpu], "ph counts in full again")
			z := RequestFor(testPod("z", "gpu", "g1", "", 1, corev1.PodPending), true)
			requireClaim(t, "ph", l.Filter(z, []string{"a"}, true))
			checkIndex(t, l)
		})
	}
}
