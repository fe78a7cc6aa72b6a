package state

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/messages"
)

// TestRetryOf: a retried failure frees the slot, queues a new attempt
// after the delay and refuses later copies of the retried attempt; out of
// retries it is Exhausted; a failure of a superseded attempt is Stale.
func TestRetryOf(t *testing.T) {
	s, clk := newState(3)
	register(s, "w1", 1)
	it := enqueue(s, "a")
	require.Equal(t, []string{"a→w1"}, workersOf(s.Dispatch()))
	res := messages.Result{InvocationID: "a", Namespace: "ns", Pool: "p", Worker: "w1", Attempt: 1, State: messages.StateFailed}

	d, got := s.RetryOf(res, 1, 1, 2*time.Second)
	require.Equal(t, Retried, d)
	require.Same(t, it, got)
	require.Equal(t, 1, it.Retries)
	require.Equal(t, RefusedRetried, s.Refusal(res), "a second copy of the retried attempt decides nothing")
	require.Empty(t, s.Dispatch(), "not before the backoff")
	clk.Step(2*time.Second + time.Millisecond)
	require.Equal(t, []string{"a→w1"}, workersOf(s.Dispatch()))
	require.Equal(t, 2, it.Attempt)

	res2 := res
	res2.Attempt = 2
	d, _ = s.RetryOf(res2, 2, 1, time.Second)
	require.Equal(t, Exhausted, d, "max-retries 1 spent")

	d, _ = s.RetryOf(res, 3, 5, time.Second)
	require.Equal(t, Stale, d, "attempt 1's failure while attempt 2 runs")
}

// TestHandBack: a worker's handed-back current attempt is queued again at
// once, without a strike, and its slot freed; another worker's claim is
// ignored.
func TestHandBack(t *testing.T) {
	s, _ := newState(3)
	register(s, "w1", 1)
	register(s, "w2", 1)
	it := enqueue(s, "a")
	as := s.Dispatch()
	require.Len(t, as, 1)
	holder, other := as[0].Worker, "w1"
	if holder == "w1" {
		other = "w2"
	}
	s.Dispatched(it, 1, s.Publishing(it, "w"), 42)
	ev := messages.Event{Type: messages.EventHandedBack, Namespace: "ns", Pool: "p", Worker: other, InvocationID: "a", Attempt: 1}
	require.Nil(t, s.Event(ev).HandedBack, "not the holder's")
	ev.Worker, ev.Draining = holder, true
	out := s.Event(ev)
	require.Same(t, it, out.HandedBack)
	require.Equal(t, uint64(42), out.StaleDispatch)
	require.True(t, it.Queued)
	require.Zero(t, it.Strikes)
	s.Event(messages.Event{Type: messages.EventHeartbeat, Namespace: "ns", Pool: "p", Worker: holder, Draining: true})
	require.Equal(t, []string{"a→" + other}, workersOf(s.Dispatch()), "at once, to another worker")
	require.Equal(t, 2, it.Attempt)
}
