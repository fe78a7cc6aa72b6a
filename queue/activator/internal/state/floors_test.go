package state

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/messages"
)

// item enqueues invocation id whose message is at seq of pool p.
func item(t *testing.T, s *State, id, pool string, seq uint64) *Item {
	t.Helper()
	it := &Item{Inv: messages.Invocation{InvocationID: id, Namespace: "ns", Pool: pool}, Seq: seq}
	s.Accept(it.Inv, seq)
	require.True(t, s.Enqueue(it))
	return it
}

func bySubject(ps []Purge) map[Subject]Purge {
	out := map[Subject]Purge{}
	for _, p := range ps {
		out[p.Subject] = p
	}
	return out
}

var (
	poolP   = Subject{Namespace: "ns", Pool: "p"}
	workerW = Subject{Namespace: "ns", Pool: "p", Worker: "w"}
)

// TestPurgeFloors: each subject is purged below the lowest sequence still
// held on it (an open invocation's message, its Dispatch, a publish not
// answered yet), an invoke subject never above the invoke consumer's ack
// floor; what waits behind a held message is deleted one by one after
// FallbackAfter.
func TestPurgeFloors(t *testing.T) {
	type step func(t *testing.T, s *State, its map[string]*Item)
	dispatch := func(id string, seq uint64) step {
		return func(_ *testing.T, s *State, its map[string]*Item) {
			s.Dispatched(its[id], 1, s.Publishing(its[id], "w"), seq)
		}
	}
	final := func(ids ...string) step {
		return func(_ *testing.T, s *State, its map[string]*Item) {
			for _, id := range ids {
				s.Final(its[id])
			}
		}
	}
	for _, tc := range []struct {
		name     string
		steps    []step
		ackFloor uint64
		wait     time.Duration
		want     map[Subject]Purge
	}{{
		name:     "all final: below the highest, plus one",
		steps:    []step{dispatch("a", 3), dispatch("b", 4), final("a", "b")},
		ackFloor: 100,
		want: map[Subject]Purge{
			poolP:   {Subject: poolP, Below: 3, Removed: 2},
			workerW: {Subject: workerW, Below: 5, Removed: 2},
		},
	}, {
		name:     "an open invocation below holds its subjects",
		steps:    []step{dispatch("a", 3), dispatch("b", 4), final("b")},
		ackFloor: 100,
		want:     map[Subject]Purge{},
	}, {
		name:     "an open invocation above does not",
		steps:    []step{dispatch("a", 3), dispatch("b", 4), final("a")},
		ackFloor: 100,
		want: map[Subject]Purge{
			poolP:   {Subject: poolP, Below: 2, Removed: 1},
			workerW: {Subject: workerW, Below: 4, Removed: 1},
		},
	}, {
		name:     "the invoke consumer's ack floor bounds an invoke subject",
		steps:    []step{dispatch("a", 3), dispatch("b", 4), final("a", "b")},
		ackFloor: 1,
		want: map[Subject]Purge{
			poolP:   {Subject: poolP, Below: 2, Removed: 1},
			workerW: {Subject: workerW, Below: 5, Removed: 2},
		},
	}, {
		name:  "an unknown ack floor purges no invoke subject",
		steps: []step{dispatch("a", 3), dispatch("b", 4), final("a", "b")},
		want: map[Subject]Purge{
			workerW: {Subject: workerW, Below: 5, Removed: 2},
		},
	}, {
		name: "a Dispatch publish in flight holds its subject from above what was seen",
		steps: []step{dispatch("a", 3), final("a"), func(_ *testing.T, s *State, its map[string]*Item) {
			s.Publishing(its["b"], "w") // may be stored at 5 or later: 4 was seen
		}},
		ackFloor: 100,
		want: map[Subject]Purge{
			poolP:   {Subject: poolP, Below: 2, Removed: 1},
			workerW: {Subject: workerW, Below: 4, Removed: 1},
		},
	}, {
		name: "a Dispatch answered after its invocation is final is removable at once",
		steps: []step{final("a"), func(_ *testing.T, s *State, its map[string]*Item) {
			s.Dispatched(its["a"], 1, s.Publishing(its["a"], "w"), 7)
		}},
		ackFloor: 100,
		want: map[Subject]Purge{
			poolP:   {Subject: poolP, Below: 2, Removed: 1},
			workerW: {Subject: workerW, Below: 8, Removed: 1},
		},
	}, {
		name:     "behind a held one, deleted one by one after FallbackAfter",
		steps:    []step{dispatch("a", 3), dispatch("b", 4), final("b")},
		ackFloor: 100,
		wait:     FallbackAfter,
		want: map[Subject]Purge{
			poolP:   {Subject: poolP, Delete: []uint64{2}, Removed: 1},
			workerW: {Subject: workerW, Delete: []uint64{4}, Removed: 1},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s, clk := newState(3)
			its := map[string]*Item{"a": item(t, s, "a", "p", 1), "b": item(t, s, "b", "p", 2)}
			for _, st := range tc.steps {
				st(t, s, its)
			}
			clk.Step(tc.wait)
			require.Equal(t, tc.want, bySubject(s.Purges(tc.ackFloor)))
		})
	}
}

// TestPurgedOnce: what a purge took is not purged again; what was released
// since is.
func TestPurgedOnce(t *testing.T) {
	s, _ := newState(3)
	a, b := item(t, s, "a", "p", 1), item(t, s, "b", "p", 2)
	s.Final(a)
	ps := s.Purges(100)
	require.Equal(t, []Purge{{Subject: poolP, Below: 2, Removed: 1}}, ps)
	s.Purged(ps[0])
	require.Empty(t, s.Purges(100))
	require.False(t, s.Removable())
	s.Final(b)
	require.Equal(t, []Purge{{Subject: poolP, Below: 3, Removed: 1}}, s.Purges(100))
	s.Purged(Purge{Subject: poolP, Below: 3})
	require.Empty(t, s.floors, "a subject nothing is known of is forgotten")
}

// TestPublishFailedReleasesItsPlaceholder: a publish that stored nothing
// holds nothing.
func TestPublishFailedReleasesItsPlaceholder(t *testing.T) {
	s, _ := newState(3)
	a, b := item(t, s, "a", "p", 1), item(t, s, "b", "p", 2)
	ph := s.Publishing(b, "w") // sent first; may be stored at 3 or later
	s.Dispatched(a, 1, s.Publishing(a, "w"), 4)
	s.Final(a)
	require.Equal(t, uint64(0), bySubject(s.Purges(100))[workerW].Below, "held by the publish in flight")
	s.PublishFailed(ph)
	require.Equal(t, uint64(5), bySubject(s.Purges(100))[workerW].Below)
}

// TestSweptReleasesAHold: a hold an invocation left behind (forgotten
// without a final Record here) goes once the sweep removed its message.
func TestSweptReleasesAHold(t *testing.T) {
	s, _ := newState(3)
	a, b := item(t, s, "a", "p", 1), item(t, s, "b", "p", 2)
	s.Forget(a, "")
	s.Final(b)
	require.Empty(t, s.Purges(100), "a forgotten invocation's message is held")
	s.Swept(poolP, 1)
	require.Equal(t, []Purge{{Subject: poolP, Below: 3, Removed: 1}}, s.Purges(100))
}

// TestSweptKeepsAPlaceholder: the sweep removing a message at the sequence
// of a publish's placeholder does not release the placeholder (review,
// Low): the publish may still be stored there or above.
func TestSweptKeepsAPlaceholder(t *testing.T) {
	s, _ := newState(3)
	b, c := item(t, s, "b", "p", 1), item(t, s, "c", "p", 2)
	pb := s.Publishing(b, "w")
	require.Equal(t, uint64(3), pb.Seq)
	s.Swept(workerW, 3)
	s.Dispatched(c, 1, s.Publishing(c, "w"), 4)
	s.Final(c)
	require.LessOrEqual(t, bySubject(s.Purges(100))[workerW].Below, uint64(3), "b's Dispatch may be stored at 3")
}

// TestDeliveredHoldsItsInvokeSubject: an invocation message delivered and
// not acked (its Record read failed: naked) holds its subject even below
// the consumer's ack floor, which passes it without an ack once it reaches
// MaxDeliver (review M1); handled, it no longer does.
func TestDeliveredHoldsItsInvokeSubject(t *testing.T) {
	s, _ := newState(3)
	a := item(t, s, "a", "p", 1)
	s.Accept(messages.Invocation{InvocationID: "x", Namespace: "ns", Pool: "p"}, 2)
	c := item(t, s, "c", "p", 3)
	s.Final(a)
	s.Final(c)
	require.Equal(t, Purge{Subject: poolP, Below: 2, Removed: 1}, bySubject(s.Purges(100))[poolP])
	s.Handled(poolP, 2)
	require.Equal(t, Purge{Subject: poolP, Below: 4, Removed: 2}, bySubject(s.Purges(100))[poolP])
}
