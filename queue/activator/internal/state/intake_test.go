package state

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/messages"
)

// TestIntakePosition: every pool's status says how far its invocation
// messages are taken in, in stream order — also a pool that took nothing
// in — and never further: not past a message of the pool whose Record read
// is pending, not past what a previous leader may still hold unacked
// before the server proves it handled, not for a namespace the consumer
// does not filter on, and not from a consumer made before.
func TestIntakePosition(t *testing.T) {
	inv := func(ns, pool, id string) messages.Invocation {
		return messages.Invocation{InvocationID: id, Namespace: ns, Pool: pool}
	}
	// take delivers seq of ns/pool through the consumer of epoch and
	// queues it (the fresh path).
	take := func(s *State, epoch, seq uint64, ns, pool, id string) {
		s.Consumed(epoch, seq)
		s.Accept(inv(ns, pool, id), seq)
		require.True(t, s.Enqueue(&Item{Inv: inv(ns, pool, id), Seq: seq}))
	}
	pos := func(s *State, ns, pool string) uint64 { return *s.Status(Key(ns, pool), 0).InvokeSeq }
	type tc struct {
		name string
		run  func(t *testing.T, s *State)
	}
	for _, c := range []tc{{
		name: "a pool that took nothing in is covered as far as the consumer went",
		run: func(t *testing.T, s *State) {
			e := s.InvokeConsumer(Intake{All: true})
			require.Zero(t, pos(s, "ns", "new"), "nothing delivered: a position of 0, not none")
			take(s, e, 5, "ns", "p", "a")
			require.EqualValues(t, 5, pos(s, "ns", "p"))
			require.EqualValues(t, 5, pos(s, "ns", "new"))
		},
	}, {
		name: "a pending Record read holds its pool only",
		run: func(t *testing.T, s *State) {
			e := s.InvokeConsumer(Intake{All: true})
			s.Consumed(e, 3)
			s.Accept(inv("ns", "p", "stale"), 3) // its Record is being read
			take(s, e, 4, "ns", "p", "fresh")
			take(s, e, 6, "ns", "q", "other")
			require.EqualValues(t, 2, pos(s, "ns", "p"), "not past the pending read")
			require.EqualValues(t, 6, pos(s, "ns", "q"))
			require.True(t, s.Enqueue(&Item{Inv: inv("ns", "p", "stale"), Seq: 3}))
			require.EqualValues(t, 6, pos(s, "ns", "p"), "read and queued")
		},
	}, {
		name: "a delivery the server will not make again holds nothing once the ack floor passes it",
		run: func(t *testing.T, s *State) {
			e := s.InvokeConsumer(Intake{All: true})
			s.Consumed(e, 3)
			s.Accept(inv("ns", "p", "gone"), 3) // nak'd, then removed from the stream
			take(s, e, 4, "ns", "p", "a")
			require.EqualValues(t, 2, pos(s, "ns", "p"))
			s.AckFloor(e, 4)
			require.EqualValues(t, 4, pos(s, "ns", "p"))
		},
	}, {
		name: "a previous leader's unacked deliveries wait for the server's proof",
		run: func(t *testing.T, s *State) {
			e := s.InvokeConsumer(Intake{All: true, AckFloor: 10, Delivered: 20, AckPending: 2})
			require.EqualValues(t, 10, pos(s, "ns", "p"), "the ack floor only")
			take(s, e, 21, "ns", "p", "a")
			require.EqualValues(t, 10, pos(s, "ns", "p"), "messages up to 20 may still come back")
			s.AckFloor(e, 15)
			require.EqualValues(t, 15, pos(s, "ns", "p"))
			s.AckFloor(e, 20)
			require.EqualValues(t, 21, pos(s, "ns", "p"), "proven up to what was delivered before: this one's deliveries count")
		},
	}, {
		name: "nothing unacked at start: what was delivered before is handled",
		run: func(t *testing.T, s *State) {
			s.InvokeConsumer(Intake{All: true, AckFloor: 7, Delivered: 9})
			require.EqualValues(t, 9, pos(s, "ns", "idle"), "an idle pool after a restart is covered")
		},
	}, {
		name: "the server moves an idle consumer's position: messages removed before delivery",
		run: func(t *testing.T, s *State) {
			e := s.InvokeConsumer(Intake{All: true})
			take(s, e, 2, "ns", "p", "a")
			s.AckFloor(e, 30) // nothing unacked: the last sequence the consumer went past
			require.EqualValues(t, 30, pos(s, "ns", "p"))
			s.AckFloor(e-1, 40)
			require.EqualValues(t, 30, pos(s, "ns", "p"), "what the consumer made before says, says nothing")
		},
	}, {
		name: "sharded: a namespace not filtered on is not covered",
		run: func(t *testing.T, s *State) {
			e := s.InvokeConsumer(Intake{Namespaces: []string{"a"}})
			take(s, e, 4, "a", "p", "x")
			require.EqualValues(t, 4, pos(s, "a", "p"))
			require.Zero(t, pos(s, "b", "p"), "namespace b's messages were never delivered")
			// Widened: made again from the stream's start.
			e2 := s.InvokeConsumer(Intake{Namespaces: []string{"a", "b"}})
			require.EqualValues(t, 4, pos(s, "a", "p"), "never goes back")
			require.Zero(t, pos(s, "b", "p"))
			s.Consumed(e, 9) // the consumer made before, still handing over a message
			require.Zero(t, pos(s, "b", "p"), "a stale epoch's delivery says nothing")
			s.Consumed(e2, 3)
			require.EqualValues(t, 3, pos(s, "b", "p"))
		},
	}} {
		t.Run(c.name, func(t *testing.T) {
			s, _ := newState(3)
			c.run(t, s)
		})
	}
}

// TestUncovered: a status is published again for its position only when
// the pool has a message above the last published one that it reaches.
func TestUncovered(t *testing.T) {
	p := &Pool{SeenSeq: 5, SentSeq: 3}
	require.True(t, p.Uncovered(4))
	require.False(t, p.Uncovered(3), "no further")
	p.SentSeq = 5
	require.False(t, p.Uncovered(9), "nothing of the pool above it")
}
