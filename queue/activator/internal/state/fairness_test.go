package state

import (
	"cmp"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue/pool"
)

// TestDispatchInFlightLimits: a pool never holds more than its
// MaxInFlight, a namespace never more than NamespaceMaxInFlight across its
// pools, and another namespace's dispatch is untouched by either.
func TestDispatchInFlightLimits(t *testing.T) {
	cases := []struct {
		name     string
		poolMax  map[string]int // by pool of namespace a
		nsMax    int
		queued   int // per pool
		wantA    map[string]int
		wantB    int
		finishA  int // results of namespace a (a/p1 first), then another Dispatch
		wantMore int // dispatched in namespace a by it
	}{
		{name: "unbounded", poolMax: map[string]int{}, queued: 5, wantA: map[string]int{"p1": 5, "p2": 5}, wantB: 5},
		{name: "pool cap", poolMax: map[string]int{"p1": 2}, queued: 5, wantA: map[string]int{"p1": 2, "p2": 5}, wantB: 5, finishA: 1, wantMore: 1},
		{name: "namespace cap", poolMax: map[string]int{}, nsMax: 3, queued: 5, wantB: 3, finishA: 2, wantMore: 2},
		{name: "both", poolMax: map[string]int{"p1": 1}, nsMax: 4, queued: 5, wantB: 4, finishA: 1, wantMore: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := New(Config{Workers: workers(time.Minute, 3), Limits: pool.Limits{NamespaceMaxInFlight: tc.nsMax}}, clocktesting.NewFakeClock(t0))
			for _, pk := range []struct{ ns, pool string }{{"a", "p1"}, {"a", "p2"}, {"b", "p1"}} {
				if pk.ns == "a" {
					s.SetMaxInFlight(Key(pk.ns, pk.pool), tc.poolMax[pk.pool])
				}
				s.Event(messages.Event{Type: messages.EventRegistered, Namespace: pk.ns, Pool: pk.pool, Worker: "w", Concurrency: 100, Ready: true})
				for i := range tc.queued {
					s.Enqueue(&Item{Inv: messages.Invocation{InvocationID: fmt.Sprintf("%s-%d", pk.pool, i), Namespace: pk.ns, Pool: pk.pool,
						AcceptedAt: t0, TTLSeconds: 60, TimeoutSeconds: 30}})
				}
			}
			byPool := map[string]int{}
			var open, openP2 []Assignment // namespace a's, those of p1 first
			for _, as := range s.Dispatch() {
				byPool[Key(as.Item.Inv.Namespace, as.Item.Inv.Pool)]++
				switch {
				case as.Item.Inv.Namespace != "a":
				case as.Item.Inv.Pool == "p1":
					open = append(open, as)
				default:
					openP2 = append(openP2, as)
				}
			}
			open = append(open, openP2...)
			nsA := byPool[Key("a", "p1")] + byPool[Key("a", "p2")]
			for p, want := range tc.wantA {
				require.Equal(t, want, byPool[Key("a", p)], "pool a/%s", p)
			}
			if tc.nsMax > 0 {
				require.Equal(t, tc.nsMax, nsA, "namespace a")
			}
			if m := tc.poolMax["p1"]; m > 0 {
				require.LessOrEqual(t, byPool[Key("a", "p1")], m, "pool a/p1")
			}
			require.Equal(t, tc.wantB, byPool[Key("b", "p1")], "namespace b: only its own namespace limit")
			require.Empty(t, s.Dispatch(), "nothing more while the limits are reached")

			// Freed slots are filled again, and no more.
			for _, as := range open[:tc.finishA] {
				s.Result(messages.Result{Namespace: "a", Pool: as.Item.Inv.Pool, InvocationID: as.Item.Inv.InvocationID, Worker: "w",
					Attempt: as.Attempt, State: messages.StateSucceeded}, 0)
			}
			require.Len(t, s.Dispatch(), tc.wantMore)
			for _, p := range []string{"p1", "p2"} {
				if m := tc.poolMax[p]; m > 0 {
					require.LessOrEqual(t, s.Pool(Key("a", p)).InFlight(), m)
				}
			}
			if tc.nsMax > 0 {
				require.Equal(t, tc.nsMax, s.Pool(Key("a", "p1")).InFlight()+s.Pool(Key("a", "p2")).InFlight())
			}
		})
	}
}

// TestDispatchInterleavesNamespaces: a namespace with a large burst does
// not have all its assignments ahead of another namespace's.
func TestDispatchInterleavesNamespaces(t *testing.T) {
	s := New(Config{Workers: workers(time.Minute, 3)}, clocktesting.NewFakeClock(t0))
	for _, ns := range []string{"a", "b"} {
		s.Event(messages.Event{Type: messages.EventRegistered, Namespace: ns, Pool: "p", Worker: "w", Concurrency: 1000, Ready: true})
	}
	for i := range 100 {
		s.Enqueue(&Item{Inv: messages.Invocation{InvocationID: fmt.Sprint(i), Namespace: "a", Pool: "p", AcceptedAt: t0, TTLSeconds: 60}})
	}
	s.Enqueue(&Item{Inv: messages.Invocation{InvocationID: "b0", Namespace: "b", Pool: "p", AcceptedAt: t0, TTLSeconds: 60}})
	as := s.Dispatch()
	require.Len(t, as, 101)
	pos := -1
	for i, a := range as {
		if a.Namespace == "b" {
			pos = i
		}
	}
	require.LessOrEqual(t, pos, 1, "b's one invocation is among the first two assignments")
}

// TestDecideCapsByMaxInFlight: no more workers than MaxInFlight keeps busy.
func TestDecideCapsByMaxInFlight(t *testing.T) {
	pol := pool.DefaultPolicy()
	pol.MaxInFlight = 3
	require.Equal(t, 3, Decide(pol, 0, 50, 0, nil, t0).To)
	pol.MaxInFlight = 0
	require.Equal(t, 50, Decide(pol, 0, 50, 0, nil, t0).To)
}

// TestResultRefusal: a Result counts only from the worker its attempt was
// dispatched to, with the attempt's token when one is known; attempts of a previous leader whose worker is unknown are
// taken as before.
func TestResultRefusal(t *testing.T) {
	s, _ := newState(3)
	register(s, "w", 1)
	register(s, "x", 1)
	enqueue(s, "i")
	as := s.Dispatch()
	require.Len(t, as, 1)
	owner, other := as[0].Worker, map[string]string{"w": "x", "x": "w"}[as[0].Worker]
	s.SetResultToken(as[0].Item, 1, "t1")
	require.Equal(t, "t1", s.SetResultToken(as[0].Item, 1, "t2"), "the first token is kept")
	restored := &Item{Inv: messages.Invocation{InvocationID: "r", Namespace: "ns", Pool: "p", AcceptedAt: t0, TTLSeconds: 60}, Attempt: 3}
	s.Restore(restored, messages.Record{InvocationID: "r", Namespace: "ns", Pool: "p", State: messages.StateDispatched, Worker: owner, Attempt: 3})
	cases := []struct {
		name   string
		res    messages.Result
		reason string
	}{
		{"dispatched worker", messages.Result{InvocationID: "i", Worker: owner, Attempt: 1, ResultToken: "t1"}, ""},
		{"dispatched worker's name, no token", messages.Result{InvocationID: "i", Worker: owner, Attempt: 1}, RefusedToken},
		{"dispatched worker's name, wrong token", messages.Result{InvocationID: "i", Worker: owner, Attempt: 1, ResultToken: "t2"}, RefusedToken},
		{"another worker of the pool, with the token", messages.Result{InvocationID: "i", Worker: other, Attempt: 1, ResultToken: "t1"}, RefusedOtherWorker},
		{"an attempt never dispatched", messages.Result{InvocationID: "i", Worker: owner, Attempt: 2}, RefusedUnknownAttempt},
		{"attempt 0", messages.Result{InvocationID: "i", Worker: owner}, RefusedUnknownAttempt},
		{"restored: recorded worker", messages.Result{InvocationID: "r", Worker: owner, Attempt: 3}, ""},
		{"restored: another worker", messages.Result{InvocationID: "r", Worker: other, Attempt: 3}, RefusedOtherWorker},
		{"restored: an earlier attempt, worker unknown", messages.Result{InvocationID: "r", Worker: other, Attempt: 2}, ""},
		{"not open: judged on the Record", messages.Result{InvocationID: "gone", Worker: other, Attempt: 1}, ""},
		{"another pool of the namespace", messages.Result{InvocationID: "i", Pool: "q", Worker: owner, Attempt: 1, ResultToken: "t1"}, RefusedOtherPool},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.res.Namespace, tc.res.Pool = "ns", cmp.Or(tc.res.Pool, "p")
			require.Equal(t, tc.reason, s.Refusal(tc.res))
		})
	}
}
