package ledger

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

// indexed lists node/spec's indexed placeholders by name, in index order;
// a pledged one as name>pledgedTo.
func indexed(l *Ledger, node, spec string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, i, ok := l.nodes[node], 0, false
	if i, ok = l.specs[spec]; !ok || n == nil {
		return nil
	}
	var out []string
	for _, r := range n.readyOf(i) {
		s := r.rec.name
		if r.pledged != "" {
			s += ">" + string(r.pledged)
		}
		out = append(out, s)
	}
	return out
}

func TestStockIndex(t *testing.T) {
	stock := func(name, spec, node string) *corev1.Pod {
		return testPod(name, "stock", spec, node, 1, corev1.PodRunning)
	}
	// full: node a with 2 GPUs, both held by placeholders ph2 and ph1
	// (added in that order: the index is in UID order all the same).
	full := func(l *Ledger) {
		l.UpsertNode(testNode("a", 2))
		l.UpsertPod(stock("ph2", "g1", "a"))
		l.UpsertPod(stock("ph1", "g1", "a"))
	}
	gpuPod := func(name string) Request {
		return RequestFor(testPod(name, "gpu", "g1", "", 1, corev1.PodPending), false)
	}
	for _, tt := range []struct {
		name  string
		steps func(t *testing.T, l *Ledger, clk *clocktesting.FakePassiveClock)
		want  map[string][]string // node/spec -> indexed placeholders
	}{
		{"bound placeholders, in UID order", func(*testing.T, *Ledger, *clocktesting.FakePassiveClock) {},
			map[string][]string{"a/g1": {"ph1", "ph2"}}},
		{"a pending placeholder is not claimable", func(_ *testing.T, l *Ledger, _ *clocktesting.FakePassiveClock) {
			l.UpsertPod(testPod("ph0", "stock", "g1", "", 1, corev1.PodPending))
		}, map[string][]string{"a/g1": {"ph1", "ph2"}}},
		{"a placeholder the extender bound, at EndBind", func(t *testing.T, l *Ledger, _ *clocktesting.FakePassiveClock) {
			l.UpsertNode(testNode("b", 1))
			p := testPod("ph0", "stock", "g1", "", 1, corev1.PodPending)
			l.UpsertPod(p)
			_, err := l.BeginBind(RequestFor(p, false), "b")
			require.NoError(t, err)
			l.EndBind(p.UID, true, false)
		}, map[string][]string{"a/g1": {"ph1", "ph2"}, "b/g1": {"ph0"}}},
		{"deleted", func(_ *testing.T, l *Ledger, _ *clocktesting.FakePassiveClock) {
			l.DeletePod("uid-ph1")
		}, map[string][]string{"a/g1": {"ph2"}}},
		{"being deleted", func(_ *testing.T, l *Ledger, _ *clocktesting.FakePassiveClock) {
			p := stock("ph1", "g1", "a")
			p.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
			l.UpsertPod(p)
		}, map[string][]string{"a/g1": {"ph2"}}},
		{"terminal", func(_ *testing.T, l *Ledger, _ *clocktesting.FakePassiveClock) {
			l.UpsertPod(testPod("ph2", "stock", "g1", "a", 1, corev1.PodFailed))
		}, map[string][]string{"a/g1": {"ph1"}}},
		{"claimed by a filter's reservation: the lowest UID", func(t *testing.T, l *Ledger, _ *clocktesting.FakePassiveClock) {
			requireClaim(t, "ph1", l.Filter(gpuPod("x"), []string{"a"}, true))
		}, map[string][]string{"a/g1": {"ph2"}}},
		{"two claimed, then the node is full", func(t *testing.T, l *Ledger, _ *clocktesting.FakePassiveClock) {
			requireClaim(t, "ph1", l.Filter(gpuPod("x"), []string{"a"}, true))
			requireClaim(t, "ph2", l.Filter(gpuPod("y"), []string{"a"}, true))
			assert.Empty(t, l.Filter(gpuPod("z"), []string{"a"}, true).Chosen)
		}, map[string][]string{"a/g1": nil}},
		{"claim released when the reservation expires", func(t *testing.T, l *Ledger, clk *clocktesting.FakePassiveClock) {
			requireClaim(t, "ph1", l.Filter(gpuPod("x"), []string{"a"}, true))
			clk.SetTime(clk.Now().Add(time.Hour))
			l.Sweep()
		}, map[string][]string{"a/g1": {"ph1", "ph2"}}},
		{"claimed placeholder deleted by a bind that failed", func(t *testing.T, l *Ledger, _ *clocktesting.FakePassiveClock) {
			x := gpuPod("x")
			requireClaim(t, "ph1", l.Filter(x, []string{"a"}, true))
			_, err := l.BeginBind(x, "a")
			require.NoError(t, err)
			l.EndBind(x.UID, false, true)
		}, map[string][]string{"a/g1": {"ph2"}}},
		{"spec moved", func(_ *testing.T, l *Ledger, _ *clocktesting.FakePassiveClock) {
			l.UpsertPod(stock("ph1", "g2", "a"))
		}, map[string][]string{"a/g1": {"ph2"}, "a/g2": {"ph1"}}},
		{"pledged to the GPU Pod its claim's devices are handed to", func(_ *testing.T, l *Ledger, _ *clocktesting.FakePassiveClock) {
			draNode(l, "d", 2)
			l.UpsertPod(draPod("ph3", "stock", "g1", "d"))
			l.UpsertPod(draPod("ph4", "stock", "g1", "d"))
			l.UpsertClaim(draClaim("ph3", devID("d", 0)))
			l.UpsertClaim(draClaim("ph4", devID("d", 1)))
			l.UpsertPod(draPod("p", "gpu", "g1", ""))
			handed := draClaim("ph4", devID("d", 1))
			handed.Pods = []types.UID{"uid-p", "uid-ph4"}
			l.UpsertClaim(handed)
		}, map[string][]string{"a/g1": {"ph1", "ph2"}, "d/g1": {"ph3", "ph4>uid-p"}}},
		{"pledge ends with the hand-over's claim", func(_ *testing.T, l *Ledger, _ *clocktesting.FakePassiveClock) {
			draNode(l, "d", 1)
			l.UpsertPod(draPod("ph4", "stock", "g1", "d"))
			l.UpsertPod(draPod("p", "gpu", "g1", ""))
			handed := draClaim("ph4", devID("d", 0))
			handed.Pods = []types.UID{"uid-p", "uid-ph4"}
			l.UpsertClaim(handed)
			l.DeleteClaim(handed.UID)
		}, map[string][]string{"a/g1": {"ph1", "ph2"}, "d/g1": {"ph4"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(time.Unix(0, 0))
			l := New(Options{Clock: clk})
			full(l)
			tt.steps(t, l, clk)
			for key, want := range tt.want {
				var node, spec string
				_, err := fmt.Sscanf(key, "%1s/%s", &node, &spec)
				require.NoError(t, err)
				assert.Equal(t, want, indexed(l, node, spec), key)
			}
			checkIndex(t, l)
		})
	}
}

// TestStockIndexMatchesScan runs random ledgers (placeholders bound,
// pending, deleted, terminal, changing spec; GPU Pods reserving, binding,
// failing; reservations expiring) and, after every step, compares the
// placeholder every node offers a random request with the scan of the
// node's placeholder records the index replaced.
func TestStockIndexMatchesScan(t *testing.T) {
	nodes := []string{"n0", "n1", "n2"}
	specs := []string{"g1", "g2"}
	for seed := range int64(20) {
		rnd := rand.New(rand.NewSource(seed))
		clk := clocktesting.NewFakePassiveClock(time.Unix(0, 0))
		l := New(Options{Clock: clk})
		for _, n := range nodes {
			l.UpsertNode(testNode(n, 4))
		}
		pick := func(s []string) string { return s[rnd.Intn(len(s))] }
		for step := range 300 {
			switch op := rnd.Intn(10); {
			case op < 4: // a placeholder, as the informer sees it
				i := rnd.Intn(10)
				node := pick(nodes)
				if rnd.Intn(4) == 0 {
					node = ""
				}
				phase := corev1.PodRunning
				if rnd.Intn(20) == 0 {
					phase = corev1.PodSucceeded
				}
				p := testPod(fmt.Sprintf("ph%d", i), "stock", pick(specs), node, 1+int64(i%2), phase)
				if rnd.Intn(10) == 0 {
					p.DeletionTimestamp = &metav1.Time{Time: clk.Now()}
				}
				l.UpsertPod(p)
			case op < 5:
				l.DeletePod(types.UID(fmt.Sprintf("uid-ph%d", rnd.Intn(10))))
			case op < 8: // a GPU Pod's cycle
				p := testPod(fmt.Sprintf("x%d", step), "gpu", pick(specs), "", 1+int64(rnd.Intn(2)), corev1.PodPending)
				req := RequestFor(p, rnd.Intn(3) == 0)
				r := l.Filter(req, nodes, true)
				if r.Chosen == "" || rnd.Intn(3) == 0 {
					continue // its reservation expires
				}
				ph, err := l.BeginBind(req, r.Chosen)
				require.NoError(t, err)
				if rnd.Intn(4) == 0 {
					l.EndBind(req.UID, false, ph != nil && rnd.Intn(2) == 0)
					continue
				}
				if ph != nil {
					l.DeletePod(ph.UID)
				}
				l.EndBind(req.UID, true, ph != nil)
				p.Spec.NodeName, p.Status.Phase = r.Chosen, corev1.PodRunning
				l.UpsertPod(p)
			case op < 9:
				clk.SetTime(clk.Now().Add(time.Duration(rnd.Intn(40)) * time.Second))
				l.Sweep()
			default: // a bound GPU Pod goes
				l.DeletePod(types.UID(fmt.Sprintf("uid-x%d", rnd.Intn(step+1))))
			}
			checkIndex(t, l)
			req := RequestFor(testPod("probe", "gpu", pick(specs), "", 1+int64(rnd.Intn(2)), corev1.PodPending), false)
			prefer := types.UID("")
			if rnd.Intn(3) == 0 {
				prefer = types.UID(fmt.Sprintf("uid-ph%d", rnd.Intn(10)))
			}
			l.mu.Lock()
			pr := l.newProbe(req)
			for _, name := range nodes {
				n := l.nodes[name]
				want := scanStock(pr, n, prefer)
				v := l.evaluate(pr, n, prefer)
				var got types.UID
				if v.ph != nil {
					got = v.ph.uid
				}
				assert.Equal(t, want, got, "seed %d step %d node %s: %s of %d GPUs, prefer %q", seed, step, name, req.Spec, req.Requests.Scalar[gpu], prefer)
				if v.ph != nil {
					assert.Equal(t, packing(pr.prim, n, pr.vec, at(v.ph.frees(), pr.prim)), v.packing)
				}
			}
			l.mu.Unlock()
			if t.Failed() {
				return
			}
		}
	}
}

// scanStock is the placeholder a request takes on a full node as the
// ledger chose it before the index: every placeholder record of its spec
// on the node, the preferred one if it may take it, else the lowest UID.
func scanStock(pr *probe, n *node, prefer types.UID) types.UID {
	if ok, _ := fitsVec(n.alloc, n.used, nil, pr.vec, pr.nz); ok {
		return "" // it fits the free room: no placeholder
	}
	var ph *podRec
	for _, p := range n.stock[pr.req.Spec] {
		if !p.claimable() || (p.pledged != "" && p.pledged != pr.req.UID) {
			continue
		}
		if ok, _ := fitsVec(n.alloc, n.used, p.frees(), pr.vec, pr.nz); !ok {
			continue
		}
		if ph == nil || p.uid == prefer || (ph.uid != prefer && p.uid < ph.uid) {
			ph = p
		}
	}
	if ph == nil {
		return ""
	}
	return ph.uid
}
