package activator

import (
	"slices"
	"testing"
	"time"

	"github.com/runplane/runplane/queue/pool"
)

func TestDecide(t *testing.T) {
	now := time.Now()
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
			if d.To != tc.wantTo || !slices.Equal(d.Remove, tc.wantRemove) {
				t.Fatalf("got to=%d remove=%v (%s); want to=%d remove=%v", d.To, d.Remove, d.Reason, tc.wantTo, tc.wantRemove)
			}
		})
	}
}

func TestLeastLoaded(t *testing.T) {
	now := time.Now()
	mk := func(n string, conc, inflight int) *worker {
		w := &worker{name: n, concurrency: conc, inflight: map[string]*item{}, registered: true, ready: true}
		for i := range inflight {
			w.inflight[string(rune('a'+i))] = &item{}
		}
		return w
	}
	tests := []struct {
		name string
		ws   []*worker
		want string
	}{
		{"lowest ratio", []*worker{mk("a", 4, 3), mk("b", 2, 1)}, "b"},
		{"full excluded", []*worker{mk("a", 1, 1), mk("b", 4, 3)}, "b"},
		{"all full", []*worker{mk("a", 1, 1)}, ""},
		{"tie by name", []*worker{mk("b", 1, 0), mk("a", 1, 0)}, "a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := leastLoaded(tc.ws, now)
			name := ""
			if got != nil {
				name = got.name
			}
			if name != tc.want {
				t.Fatalf("got %q want %q", name, tc.want)
			}
		})
	}
}
