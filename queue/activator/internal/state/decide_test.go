package state

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/queue/pool"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	long := now.Add(-time.Hour)
	pol := func(mut func(*pool.Policy)) pool.Policy {
		p := pool.DefaultPolicy()
		p.IdleTimeout = time.Minute
		if mut != nil {
			mut(&p)
		}
		return p
	}
	idle := func(n string) WorkerView { return WorkerView{Name: n, Ready: true, IdleSince: long} }
	tests := []struct {
		name             string
		pol              pool.Policy
		current, backlog int
		inflight         int
		workers          []WorkerView
		wantTo           int
		wantRemove       []string
	}{
		{name: "empty stays empty", pol: pol(nil), wantTo: 0},
		{name: "scale from zero on first invocation", pol: pol(nil), backlog: 1, wantTo: 1},
		{name: "min-request-count holds at floor", pol: pol(func(p *pool.Policy) { p.MinRequestCount = 3 }), backlog: 2, wantTo: 0},
		{name: "min-request-count reached", pol: pol(func(p *pool.Policy) { p.MinRequestCount = 3 }), backlog: 3, wantTo: 3},
		{name: "prewarm floor", pol: pol(func(p *pool.Policy) { p.MinAvailable = 2 }), wantTo: 2},
		{name: "backlog beyond capacity", pol: pol(nil), current: 2, backlog: 3, inflight: 2, wantTo: 5},
		{name: "concurrency packs", pol: pol(func(p *pool.Policy) { p.Concurrency = 4 }), current: 1, backlog: 5, inflight: 4, wantTo: 3},
		{name: "max-replicas caps", pol: pol(func(p *pool.Policy) { p.MaxReplicas = 3 }), current: 1, backlog: 10, wantTo: 3},
		{name: "busy workers are kept", pol: pol(nil), current: 2, inflight: 2,
			workers: []WorkerView{{Name: "a", Ready: true, InFlight: 1}, {Name: "b", Ready: true, InFlight: 1}}, wantTo: 2},
		{name: "idle removed, oldest first", pol: pol(nil), current: 3, inflight: 1,
			workers: []WorkerView{{Name: "busy", Ready: true, InFlight: 1}, idle("i2"), {Name: "i1", Ready: true, IdleSince: long.Add(-time.Minute)}},
			wantTo:  1, wantRemove: []string{"i1", "i2"}},
		{name: "not idle long enough", pol: pol(nil), current: 1, workers: []WorkerView{{Name: "a", Ready: true, IdleSince: now.Add(-time.Second)}}, wantTo: 1},
		{name: "never below floor", pol: pol(func(p *pool.Policy) { p.MinAvailable = 1 }), current: 2, workers: []WorkerView{idle("a"), idle("b")},
			wantTo: 1, wantRemove: []string{"a"}},
		{name: "starting worker blocks scale-down", pol: pol(nil), current: 2, workers: []WorkerView{idle("a"), {Name: "s", Starting: true}}, wantTo: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.pol, tc.current, tc.backlog, tc.inflight, tc.workers, now)
			require.Equal(t, tc.wantTo, d.To, d.Reason)
			require.Equal(t, tc.wantRemove, d.Remove, d.Reason)
		})
	}
}

func TestLeastLoaded(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	mk := func(n string, conc, inflight int) *Worker {
		w := &Worker{Name: n, Concurrency: conc, InFlight: map[string]*Item{}, Registered: true, Ready: true}
		for i := range inflight {
			w.InFlight[string(rune('a'+i))] = &Item{}
		}
		return w
	}
	draining := mk("d", 4, 0)
	draining.Draining = true
	held := mk("h", 4, 0)
	held.DrainUntil = now.Add(time.Second)
	terminating := mk("t", 4, 0)
	terminating.Pod = &Pod{Terminating: true}
	tests := []struct {
		name string
		ws   []*Worker
		want string
	}{
		{"lowest ratio", []*Worker{mk("a", 4, 3), mk("b", 2, 1)}, "b"},
		{"full excluded", []*Worker{mk("a", 1, 1), mk("b", 4, 3)}, "b"},
		{"all full", []*Worker{mk("a", 1, 1)}, ""},
		{"tie by name", []*Worker{mk("b", 1, 0), mk("a", 1, 0)}, "a"},
		{"draining, held for scale-down or terminating excluded", []*Worker{draining, held, terminating, mk("z", 1, 0)}, "z"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := LeastLoaded(tc.ws, now)
			name := ""
			if got != nil {
				name = got.Name
			}
			require.Equal(t, tc.want, name)
		})
	}
}

// TestScaleDownNeverPicksAWorkerAlreadyLeaving: a worker a scale-down
// picked is held until its Pod is seen terminating; a second scale-down
// decided before that picks another idle worker, not it again. Picking it
// again left the choice of the Pod to delete to the ReplicaSet controller,
// which took the busy one (queue/kubetest TestIdleScaleDownKeepsBusyPod
// failed so at load: two decisions 64ms apart both removed the same Pod,
// and the busy worker was lost) — for as long as its deletion takes to be
// seen, not for its whole hold.
func TestScaleDownNeverPicksAWorkerAlreadyLeaving(t *testing.T) {
	s, clk := newState(3)
	pol := pool.DefaultPolicy()
	pol.IdleTimeout = 2 * time.Second
	register(s, "busy", 1)
	enqueue(s, "x")
	require.Equal(t, []string{"x→busy"}, workersOf(s.Dispatch()))
	register(s, "a", 1)
	clk.Step(time.Second)
	register(s, "b", 1)
	clk.Step(1500 * time.Millisecond) // a idle 2.5s, b 1.5s

	decide := func(current int) Decision {
		backlog, inflight, views, _ := s.ScaleInput(pk, time.Minute)
		return Decide(pol, current, backlog, inflight, views, s.Now())
	}
	first := decide(3)
	require.Equal(t, Decision{To: 2, Remove: []string{"a"}, Reason: "1 workers idle for 2s"}, first)
	s.Hold(pk, first.Remove)
	clk.Step(time.Second) // b idle 2.5s too; a's Pod not seen terminating yet
	require.Equal(t, Decision{To: 1, Remove: []string{"b"}, Reason: "1 workers idle for 2s"}, decide(2))

	// The ReplicaSet controller kept a's Pod (it deletes an unready Pod
	// before a low deletion cost): once its deletion would have been seen,
	// a is picked again rather than kept for the whole hold.
	s.Hold(pk, []string{"b"})
	clk.Step(pickedFor)
	require.Equal(t, Decision{To: 1, Remove: []string{"a"}, Reason: "1 workers idle for 2s"}, decide(2))
}
