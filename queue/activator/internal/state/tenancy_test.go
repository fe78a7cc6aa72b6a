package state

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/runplane/runplane/internal/messages"
)

func newAdmittingState() (*State, *clocktesting.FakeClock) {
	s, clk := newState(3)
	s.cfg.RequirePods = true
	return s, clk
}

func regIn(s *State, ns, pool, worker string) EventOutcome {
	return s.Event(messages.Event{Type: messages.EventRegistered, Namespace: ns, Pool: pool, Worker: worker, Concurrency: 1, Ready: true})
}

func enqueueIn(t *testing.T, s *State, ns, pool, id string) *Item {
	it := &Item{Inv: messages.Invocation{InvocationID: id, Namespace: ns, Pool: pool, AcceptedAt: s.Now(), TTLSeconds: 60, TimeoutSeconds: 30}}
	require.True(t, s.Enqueue(it))
	return it
}

// TestSamePoolNameInTwoNamespaces: pools, workers and invocations of two
// namespaces never mix, even with equal pool, worker and invocation names.
func TestSamePoolNameInTwoNamespaces(t *testing.T) {
	s, _ := newState(3)
	regIn(s, "team-a", "echo", "w")
	regIn(s, "team-b", "echo", "w")
	a := enqueueIn(t, s, "team-a", "echo", "same-id")
	b := enqueueIn(t, s, "team-b", "echo", "same-id")
	as := s.Dispatch()
	require.Len(t, as, 2, "one ID per namespace: both open")
	for _, x := range as {
		assert.Equal(t, x.Item.Inv.Namespace, x.Namespace, "dispatched within its namespace")
	}
	assert.Len(t, s.Pool(Key("team-a", "echo")).Workers, 1)
	assert.Len(t, s.Pool(Key("team-b", "echo")).Workers, 1, "two same-named workers in two namespaces are two workers")
	it, _ := s.Result(messages.Result{Namespace: "team-a", InvocationID: "same-id", Pool: "echo", Worker: "w", Attempt: 1, State: messages.StateSucceeded}, 1)
	require.Same(t, a, it)
	require.Same(t, b, s.Item(Key("team-b", "same-id")), "team-a's result leaves team-b's invocation open")
	require.Nil(t, s.Item(Key("team-a", "same-id")))
}

// TestUnadmittedWorkerGetsNothing: with RequirePods, a sidecar's Events
// make no worker until its Pod is admitted; then the held registration
// applies at once.
func TestUnadmittedWorkerGetsNothing(t *testing.T) {
	s, clk := newAdmittingState()
	enqueueIn(t, s, "team-a", "echo", "i")
	out := regIn(s, "team-a", "echo", "intruder")
	require.True(t, out.Unadmitted)
	require.True(t, out.NewlyHeld)
	require.True(t, regIn(s, "team-a", "echo", "intruder").Unadmitted)
	require.False(t, regIn(s, "team-a", "echo", "intruder").NewlyHeld, "held once")
	require.Empty(t, s.Dispatch(), "an unadmitted worker gets no work")
	require.Empty(t, s.Pool(Key("team-a", "echo")).Workers)

	// The real worker registers before its Pod is admitted, then is.
	regIn(s, "team-a", "echo", "real")
	_, poke := s.PodSeen("echo", "real", "team-a", 1, Pod{Created: s.Now()}, false)
	require.True(t, poke, "ready at once from the held registration")
	as := s.Dispatch()
	require.Len(t, as, 1)
	require.Equal(t, "real", as[0].Worker)

	// Held events expire.
	clk.Step(s.cfg.HeartbeatTimeout.Duration * 2)
	s.Housekeep()
	require.Empty(t, s.pending)
}

// TestPendingIsBounded: a flood of fake worker names holds at most MaxPending.
func TestPendingIsBounded(t *testing.T) {
	s, _ := newAdmittingState()
	for i := range MaxPending + 10 {
		regIn(s, "team-a", "echo", string(rune('a'+i%26))+"-"+string(rune(i)))
	}
	require.LessOrEqual(t, len(s.pending), MaxPending)
	require.Empty(t, s.pools, "no pool state for pools nobody serves")
}

// TestRefusedPodsLeaveNoPools: Pods refused as workers (a bare Pod
// labelled with a made-up pool) or finished create no pool state; a known
// pool's worker still goes when its Pod does.
func TestRefusedPodsLeaveNoPools(t *testing.T) {
	s, _ := newAdmittingState()
	for i := range 100 {
		lost, poke := s.PodSeen(fmt.Sprintf("junk-%d", i), "p", "team-a", 1, Pod{Created: s.Now()}, true)
		require.Nil(t, lost)
		require.False(t, poke)
	}
	require.Empty(t, s.PoolNames(), "refused Pods left pools behind")

	regIn(s, "team-a", "echo", "w")
	_, _ = s.PodSeen("echo", "w", "team-a", 1, Pod{Created: s.Now()}, false)
	require.Len(t, s.Pool(Key("team-a", "echo")).Workers, 1)
	_, poke := s.PodSeen("echo", "w", "team-a", 1, Pod{Created: s.Now()}, true)
	require.True(t, poke)
	require.Empty(t, s.Pool(Key("team-a", "echo")).Workers, "the worker goes with its Pod")
}
