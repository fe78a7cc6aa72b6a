package state

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A long-held message at the bottom of a subject: every later hold stays in
// the heap after it is released (100 invocations/s for 1000 s here).
func TestReviewHeapGrowsBehindALongHold(t *testing.T) {
	s, clk := newState(3)
	item(t, s, "long", "p", 1)
	for i := range 100000 {
		it := item(t, s, fmt.Sprint("i", i), "p", uint64(i+2))
		s.Final(it)
		if i%100 == 99 {
			clk.Step(10 * time.Second / 10)
			for _, p := range s.Purges(1 << 40) {
				s.Purged(p)
			}
		}
	}
	f := s.floors[poolP]
	t.Logf("held %d, heap %d (cap %d), removable %d", len(f.held), len(f.low), cap(f.low), len(f.removable))
	require.Less(t, len(f.low), 1000)
}

// Publishes a1, a2 (worker v), b (worker w) take placeholders 4, 5, 6
// although nothing was stored meanwhile (Publishing raises seen). b is
// stored first, at 4, and its PubAck is slow (publishUntilKnown retrying);
// c to w is stored at 5 and finishes. The purge of w must not take b's
// Dispatch at 4.
func TestReviewPlaceholderAboveItsMessage(t *testing.T) {
	s, _ := newState(3)
	a1, a2, b, c := item(t, s, "a1", "p", 1), item(t, s, "a2", "p", 2), item(t, s, "b", "p", 3), item(t, s, "c", "p", 0)
	_ = s.Publishing(a1, "v")
	_ = s.Publishing(a2, "v")
	pb := s.Publishing(b, "w")
	t.Logf("b's placeholder %d, b stored at 4", pb.Seq)
	pc := s.Publishing(c, "w")
	s.Dispatched(c, 1, pc, 5)
	s.Final(c)
	for _, p := range s.Purges(100) {
		if p.Subject == (Subject{Namespace: "ns", Pool: "p", Worker: "w"}) {
			require.LessOrEqual(t, p.Below, uint64(4), "purge of w below %d takes b's Dispatch stored at 4", p.Below)
		}
	}
}
