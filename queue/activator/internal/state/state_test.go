package state

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/runplane/runplane/internal/messages"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// pk is the Key of the pool the tests use.
var pk = Key("ns", "p")

// workers is a Workers section of the given heartbeat timeout and attempts.
func workers(heartbeat time.Duration, maxAttempts int) Workers {
	return Workers{HeartbeatTimeout: metav1.Duration{Duration: heartbeat}, MaxAttempts: maxAttempts}
}

func newState(maxAttempts int) (*State, *clocktesting.FakeClock) {
	clk := clocktesting.NewFakeClock(t0)
	return New(Config{Workers: workers(15*time.Second, maxAttempts), Backoff: time.Second, MaxBackoff: 4 * time.Second,
		ExecutionGrace: 10 * time.Second, DrainHold: time.Minute}, clk), clk
}

func register(s *State, worker string, conc int) {
	s.Event(messages.Event{Type: messages.EventRegistered, Namespace: "ns", Pool: "p", Worker: worker, Concurrency: conc, Ready: true})
}

func enqueue(s *State, id string, mut ...func(*messages.Invocation)) *Item {
	inv := messages.Invocation{InvocationID: id, Namespace: "ns", Pool: "p", AcceptedAt: s.Now(), TTLSeconds: 60, TimeoutSeconds: 30}
	for _, m := range mut {
		m(&inv)
	}
	it := &Item{Inv: inv}
	s.Enqueue(it)
	return it
}

func workersOf(as []Assignment) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.Item.Inv.InvocationID+"→"+a.Worker)
	}
	return out
}

// TestLifecycle walks one invocation queued → dispatched → running →
// finished.
func TestLifecycle(t *testing.T) {
	s, clk := newState(3)
	it := enqueue(s, "i")
	require.True(t, it.Queued)
	require.Empty(t, s.Dispatch(), "no worker yet")

	register(s, "w", 1)
	as := s.Dispatch()
	require.Equal(t, []Assignment{{Item: it, Worker: "w", Namespace: "ns", Attempt: 1}}, as)
	require.False(t, it.Queued)
	require.Equal(t, t0, it.DispatchedAt)
	require.Empty(t, s.Dispatch(), "dispatched once")
	s.Dispatched(it, 1, s.Publishing(it, "w"), 42)
	require.EqualValues(t, 42, it.DispatchSeq)

	out := s.Event(messages.Event{Type: messages.EventStarted, Namespace: "ns", Pool: "p", Worker: "w", InvocationID: "i", Attempt: 1})
	require.Same(t, it, out.Started)
	require.True(t, it.Started)
	stale := s.Event(messages.Event{Type: messages.EventStarted, Namespace: "ns", Pool: "p", Worker: "w", InvocationID: "i", Attempt: 0})
	require.Nil(t, stale.Started, "an older attempt's start changes nothing")

	clk.Step(time.Second)
	got, other := s.Result(messages.Result{Namespace: "ns", InvocationID: "i", Pool: "p", Worker: "w", Attempt: 1, State: messages.StateSucceeded}, 7)
	require.Same(t, it, got)
	require.Nil(t, other)
	require.True(t, it.Done.Load())
	require.Nil(t, s.Item(Key("ns", "i")))
	require.EqualValues(t, 7, s.ResultSeq())
	w := s.Pool(pk).Workers["w"]
	require.Empty(t, w.InFlight)
	require.Equal(t, t0.Add(time.Second), w.IdleSince)
}

// TestResultFromOtherWorkerCancelsNewerAttempt: the first result wins; an
// attempt running elsewhere is to be cancelled.
func TestResultFromOtherWorkerCancelsNewerAttempt(t *testing.T) {
	s, _ := newState(3)
	register(s, "b", 1)
	it := enqueue(s, "i")
	it.Attempt = 1 // attempt 1 ran on a, which was lost
	s.Dispatch()
	_, other := s.Result(messages.Result{Namespace: "ns", InvocationID: "i", Pool: "p", Worker: "a", Attempt: 1, State: messages.StateSucceeded}, 1)
	require.Equal(t, &Superseded{Namespace: "ns", Pool: "p", Worker: "b", InvocationID: "i", Attempt: 2}, other)
	require.Empty(t, s.Pool(pk).Workers["b"].InFlight)
}

// TestUnheardWorkersAreNotLost: silence the activator could not hear (its
// own NATS outage) does not make a worker lost; silence after it does.
func TestUnheardWorkersAreNotLost(t *testing.T) {
	s, clk := newState(3)
	register(s, "a", 1)
	enqueue(s, "i")
	s.Dispatch()
	clk.Step(20 * time.Second) // the outage, longer than HeartbeatTimeout
	s.Unheard()
	losses, _, silenced := s.Housekeep()
	require.Empty(t, losses)
	require.Empty(t, silenced)
	clk.Step(16 * time.Second) // silent after it
	_, _, silenced = s.Housekeep()
	require.Len(t, silenced, 1)
}

// TestSilentWorkerHeld: a worker not heard for HeartbeatTimeout gets no new
// work, and what it holds waits for it — until SilentHold is over or the
// earliest deadline (timeoutSeconds + ExecutionGrace) of what it holds.
// Heard again in time, it keeps its work and its late result counts: a
// frozen worker's finished execution is not run a second time elsewhere.
func TestSilentWorkerHeld(t *testing.T) {
	tests := []struct {
		name      string
		hold      time.Duration
		wantUntil time.Duration // from t0; 0: lost at once
	}{
		{name: "until the deadline", hold: 0, wantUntil: 40 * time.Second}, // timeoutSeconds 30 + grace 10
		{name: "capped", hold: 5 * time.Second, wantUntil: 20 * time.Second},
		{name: "no hold", hold: -1, wantUntil: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, clk := newState(3)
			s.cfg.SilentHold.Duration = tc.hold
			register(s, "a", 2)
			register(s, "b", 2)
			it := enqueue(s, "i")
			require.Equal(t, []string{"i→a"}, workersOf(s.Dispatch()))
			clk.Step(15*time.Second + time.Millisecond)
			register(s, "b", 2) // b keeps talking, a falls silent
			losses, _, silenced := s.Housekeep()
			if tc.wantUntil == 0 {
				require.Len(t, losses, 1)
				require.Equal(t, []*Item{it}, losses[0].Items)
				require.Empty(t, silenced)
				return
			}
			require.Empty(t, losses)
			require.Equal(t, []Silence{{Namespace: "ns", Pool: "p", Worker: "a", Held: 1, Until: t0.Add(tc.wantUntil)}}, silenced)
			enqueue(s, "j")
			require.Equal(t, []string{"j→b"}, workersOf(s.Dispatch()), "a silent worker gets no new work")
			st := s.Status(pk, 2)
			require.Equal(t, 2, st.Capacity, "only b serves")
			require.True(t, st.Workers[0].Silent)
			_, _, silenced = s.Housekeep()
			require.Empty(t, silenced, "reported once")

			// Heard again within the hold: its work is still its own.
			register(s, "a", 2)
			require.Empty(t, s.Status(pk, 2).Workers[0].Silent)
			done, other := s.Result(messages.Result{Namespace: "ns", InvocationID: "i", Pool: "p", Worker: "a", Attempt: 1, State: messages.StateSucceeded}, 1)
			require.Same(t, it, done)
			require.Nil(t, other, "nothing else ran it")

			// Silent again, past the hold: lost, its work given up.
			enqueue(s, "k")
			require.Equal(t, []string{"k→a"}, workersOf(s.Dispatch()))
			clk.Step(tc.wantUntil + 15*time.Second)
			register(s, "b", 2)
			losses, _, _ = s.Housekeep()
			require.Len(t, losses, 1)
			require.Equal(t, "heartbeats stopped", losses[0].Why)
			require.Equal(t, "k", losses[0].Items[0].Inv.InvocationID)
		})
	}
}

// TestLateResultCancelsNewerAttemptOnSameWorker: a worker declared lost
// while it ran attempt 1 resumes and is given attempt 2; attempt 1's late
// result wins and attempt 2 is cancelled on that same worker.
func TestLateResultCancelsNewerAttemptOnSameWorker(t *testing.T) {
	s, _ := newState(3)
	register(s, "a", 1)
	it := enqueue(s, "i")
	it.Attempt = 1 // attempt 1 ran on a, which was declared lost and came back
	s.Dispatch()
	require.Equal(t, "a", it.Worker)
	_, other := s.Result(messages.Result{Namespace: "ns", InvocationID: "i", Pool: "p", Worker: "a", Attempt: 1, State: messages.StateSucceeded}, 1)
	require.Equal(t, &Superseded{Namespace: "ns", Pool: "p", Worker: "a", InvocationID: "i", Attempt: 2}, other)
	require.Empty(t, s.Pool(pk).Workers["a"].InFlight)
}

func TestDispatchRespectsConcurrencyBackoffAndOrder(t *testing.T) {
	s, clk := newState(3)
	register(s, "a", 2)
	register(s, "b", 1)
	enqueue(s, "1")
	enqueue(s, "2")
	enqueue(s, "3")
	enqueue(s, "4")
	require.Equal(t, []string{"1→a", "2→b", "3→a"}, workersOf(s.Dispatch()), "least loaded, then name; within concurrency")
	require.Len(t, s.Pool(pk).Queue, 1)

	later := s.Pool(pk).Queue[0]
	s.Requeue(later, "", time.Second) // queued already: no change
	require.True(t, later.NotBefore.IsZero())
	_, _ = s.Result(messages.Result{Namespace: "ns", InvocationID: "1", Pool: "p", Worker: "a", Attempt: 1}, 1)
	it := s.Item(Key("ns", "3"))
	s.Requeue(it, "a", time.Second) // a failed Record write
	require.Equal(t, []string{"4→a"}, workersOf(s.Dispatch()), "3 waits for its delay, 4 goes")
	clk.Step(time.Second + time.Millisecond)
	_, _ = s.Result(messages.Result{Namespace: "ns", InvocationID: "4", Pool: "p", Worker: "a", Attempt: 1}, 2)
	require.Equal(t, []string{"3→a"}, workersOf(s.Dispatch()))
	require.Equal(t, 2, it.Attempt)
}

func TestDrainingAndHeldWorkersGetNothing(t *testing.T) {
	s, clk := newState(3)
	s.Event(messages.Event{Type: messages.EventHeartbeat, Namespace: "ns", Pool: "p", Worker: "d", Ready: true, Draining: true})
	register(s, "h", 1)
	s.Hold(pk, []string{"h"})
	enqueue(s, "i")
	require.Empty(t, s.Dispatch())
	clk.Step(time.Minute + time.Millisecond)
	require.Equal(t, []string{"i→h"}, workersOf(s.Dispatch()), "hold over")
}

// TestLossAndRedelivery covers every way a worker is lost and what Settle
// decides: redelivery with backoff, at once, or a dead letter.
func TestLossAndRedelivery(t *testing.T) {
	type step struct {
		strike      bool
		wantVerdict Verdict
		wantDelay   time.Duration
	}
	tests := []struct {
		name        string
		maxAttempts int
		lose        func(s *State, clk *clocktesting.FakeClock) *Loss
		wantWhy     string
		wantClean   bool
		steps       []step
	}{
		{name: "heartbeat timeout", maxAttempts: 3, wantWhy: "heartbeats stopped",
			lose: func(s *State, clk *clocktesting.FakeClock) *Loss {
				clk.Step(15 * time.Second)
				l, _, silenced := s.Housekeep()
				if len(l)+len(silenced) != 0 {
					return nil // not silent for longer than the timeout yet
				}
				// Silent: held until the deadline of what it holds
				// (TestSilentWorkerHeld), then lost.
				clk.Step(time.Millisecond)
				if l, _, silenced = s.Housekeep(); len(l) != 0 || len(silenced) != 1 {
					return nil
				}
				clk.SetTime(s.Item(Key("ns", "i")).DispatchedAt.Add(40 * time.Second))
				l, _, _ = s.Housekeep()
				return l[0]
			},
			steps: []step{{true, Redeliver, time.Second}, {true, Redeliver, 2 * time.Second}, {true, DeadLetter, 0}}},
		{name: "pod gone", maxAttempts: 2, wantWhy: "pod gone",
			lose: func(s *State, _ *clocktesting.FakeClock) *Loss {
				l, poke := s.PodSeen("p", "w", "ns", 1, Pod{}, true)
				if !poke {
					return nil
				}
				return l
			},
			steps: []step{{true, Redeliver, time.Second}, {true, DeadLetter, 0}}},
		{name: "clean deregistration of unstarted work", maxAttempts: 1, wantWhy: "deregistered", wantClean: true,
			lose: func(s *State, _ *clocktesting.FakeClock) *Loss {
				out := s.Event(messages.Event{Type: messages.EventDeregistered, Namespace: "ns", Pool: "p", Worker: "w", InFlight: 0})
				if !out.Gone {
					return nil
				}
				return out.Lost
			},
			steps: []step{{false, Redeliver, 0}, {false, Redeliver, 0}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, clk := newState(tc.maxAttempts)
			for _, st := range tc.steps {
				register(s, "w", 1)
				it := s.Item(Key("ns", "i"))
				if it == nil {
					it = enqueue(s, "i")
				}
				require.Len(t, s.Dispatch(), 1)
				s.Dispatched(it, it.Attempt, s.Publishing(it, it.Worker), 99)
				l := tc.lose(s, clk)
				require.NotNil(t, l)
				require.Equal(t, tc.wantWhy, l.Why)
				require.Equal(t, tc.wantClean, l.Clean)
				require.Equal(t, []*Item{it}, l.Items)
				require.NotContains(t, s.Pool(pk).Workers, "w")
				live, _ := s.Settling(it)
				require.True(t, live)

				v, stale := s.Settle(it, st.strike)
				require.Equal(t, st.wantVerdict, v)
				if v == DeadLetter {
					require.Nil(t, s.Item(Key("ns", "i")))
					require.True(t, it.Done.Load())
					return
				}
				require.EqualValues(t, 99, stale, "the abandoned Dispatch is to be deleted")
				require.Equal(t, []*Item{it}, s.Pool(pk).Queue, "at the head of the queue")
				require.Equal(t, s.Now().Add(st.wantDelay), it.NotBefore)
				v, _ = s.Settle(it, st.strike)
				require.Equal(t, Skip, v, "settled once")
				if st.wantDelay > 0 {
					register(s, "w", 1)
					require.Empty(t, s.Dispatch(), "backoff")
					clk.Step(st.wantDelay)
				}
			}
			require.Zero(t, s.Item(Key("ns", "i")).Strikes, "unstarted work counts no strikes")
		})
	}
}

func TestSettleSkipsFinished(t *testing.T) {
	s, _ := newState(3)
	register(s, "w", 1)
	it := enqueue(s, "i")
	s.Dispatch()
	out := s.Event(messages.Event{Type: messages.EventDeregistered, Namespace: "ns", Pool: "p", Worker: "w", InFlight: 0})
	_, _ = s.Result(messages.Result{Namespace: "ns", InvocationID: "i", Pool: "p", Worker: "w", Attempt: 1, State: messages.StateSucceeded}, 3)
	live, _ := s.Settling(out.Lost.Items[0])
	require.False(t, live)
	v, _ := s.Settle(it, true)
	require.Equal(t, Skip, v)
}

func TestBackoff(t *testing.T) {
	s, _ := newState(3)
	for strikes, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 10: 4 * time.Second} {
		require.Equal(t, want, s.Backoff(strikes), "strikes %d", strikes)
	}
}

func TestExpiry(t *testing.T) {
	tests := []struct {
		name       string
		dispatch   bool
		after      time.Duration
		wantWorker string
		wantReason string
	}{
		{name: "queued within ttl", after: 60 * time.Second},
		{name: "queued past ttl", after: 60*time.Second + time.Millisecond, wantReason: "not dispatched within ttlSeconds=60"},
		{name: "running within timeout and grace", dispatch: true, after: 40 * time.Second},
		{name: "running past timeout and grace", dispatch: true, after: 40*time.Second + time.Millisecond, wantWorker: "w",
			wantReason: "no result within timeoutSeconds=30"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, clk := newState(3)
			it := enqueue(s, "i")
			if tc.dispatch {
				register(s, "w", 1)
				s.Dispatch()
			}
			clk.Step(tc.after)
			if tc.dispatch { // keep the worker alive
				register(s, "w", 1)
			}
			_, expired, _ := s.Housekeep()
			if tc.wantReason == "" {
				require.Empty(t, expired)
				require.Same(t, it, s.Item(Key("ns", "i")))
				return
			}
			require.Equal(t, []Expiry{{Item: it, Worker: tc.wantWorker, Reason: tc.wantReason}}, expired)
			require.Nil(t, s.Item(Key("ns", "i")))
			require.True(t, it.Done.Load())
			require.Zero(t, s.Status(pk, 0).Backlog+s.Status(pk, 0).InFlight)
		})
	}
}

func TestRestore(t *testing.T) {
	tests := []struct {
		name        string
		rec         messages.Record
		wantQueued  bool
		wantStrikes int
		wantStarted bool
	}{
		{name: "queued", rec: messages.Record{State: messages.StateQueued}, wantQueued: true},
		{name: "dispatched", rec: messages.Record{State: messages.StateDispatched, Worker: "w", Attempt: 2, UpdatedAt: t0}, wantStrikes: 1},
		{name: "running", rec: messages.Record{State: messages.StateRunning, Worker: "w", Attempt: 1, UpdatedAt: t0}, wantStarted: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newState(3)
			it := &Item{Inv: messages.Invocation{InvocationID: "i", Namespace: "ns", Pool: "p"}, Attempt: tc.rec.Attempt}
			s.Restore(it, tc.rec)
			require.Same(t, it, s.Item(Key("ns", "i")))
			require.Equal(t, tc.wantQueued, it.Queued)
			require.Equal(t, tc.wantStrikes, it.Strikes)
			require.Equal(t, tc.wantStarted, it.Started)
			st := s.Status(pk, 1)
			if tc.wantQueued {
				require.Equal(t, 1, st.Backlog)
				return
			}
			require.Equal(t, 1, st.InFlight)
			require.Equal(t, "w", it.Worker)
			require.Equal(t, t0, it.DispatchedAt)
		})
	}
}

func TestStatusAndScaleInput(t *testing.T) {
	s, clk := newState(3)
	register(s, "ready", 2)
	_, _ = s.PodSeen("p", "starting", "ns", 4, Pod{Created: t0}, false)
	_, poke := s.PodSeen("p", "leaving", "ns", 1, Pod{Created: t0, Terminating: true}, false)
	require.True(t, poke, "a terminating Pod takes no more work")
	enqueue(s, "a")
	enqueue(s, "b")
	enqueue(s, "c")
	require.Len(t, s.Dispatch(), 2)
	clk.Step(time.Second)

	st := s.Status(pk, 3)
	require.Equal(t, 3, st.Replicas)
	require.Equal(t, 1, st.Backlog)
	require.Equal(t, 2, st.InFlight)
	require.Equal(t, 2, st.Capacity)
	require.Len(t, st.Workers, 3)
	require.Equal(t, "leaving", st.Workers[0].Name)
	require.True(t, st.Workers[1].Ready)
	require.Equal(t, 4, st.Workers[2].Concurrency)

	backlog, inflight, views, waited := s.ScaleInput(pk, 10*time.Second)
	require.Equal(t, 1, backlog)
	require.Equal(t, 2, inflight)
	require.Equal(t, time.Second, waited)
	require.ElementsMatch(t, []WorkerView{{Name: "ready", Ready: true, InFlight: 2}, {Name: "starting", Starting: true}}, views)
	clk.Step(10 * time.Second)
	_, _, views, _ = s.ScaleInput(pk, 10*time.Second)
	require.ElementsMatch(t, []WorkerView{{Name: "ready", Ready: true, InFlight: 2}, {Name: "starting"}}, views, "past startup-timeout")
}

// TestDeepQueueIsLight: past FullItems, a pool's queued invocations keep no
// payload, headers or attributes in memory; the head keeps them.
func TestDeepQueueIsLight(t *testing.T) {
	s, _ := newState(3)
	for i := range FullItems + 2 {
		inv := messages.Invocation{InvocationID: fmt.Sprint(i), Namespace: "ns", Pool: "p", AcceptedAt: s.Now(),
			Payload: []byte(`{"big":true}`), Headers: map[string]string{"h": "v"}}
		require.True(t, s.Enqueue(&Item{Inv: inv, Seq: uint64(i + 1)}))
	}
	q := s.Pool(pk).Queue
	require.False(t, q[0].Light)
	require.NotEmpty(t, q[0].Inv.Payload)
	last := q[len(q)-1]
	require.True(t, last.Light)
	require.Nil(t, last.Inv.Payload)
	require.Nil(t, last.Inv.Headers)
	require.Equal(t, fmt.Sprint(FullItems+1), last.Inv.InvocationID, "names and times stay")
}

// TestDeepQueueKeepsTheIngressRecord: a Light item whose cached Record is
// the one the ingress created gets it back at its dispatch (Unlighten), so
// the dispatch's compare-and-set needs no read; one whose Record was read
// (a late message, a rebuild) is read again.
func TestDeepQueueKeepsTheIngressRecord(t *testing.T) {
	s, _ := newState(3)
	var items []*Item
	for i := range FullItems + 2 {
		it := &Item{Inv: messages.Invocation{InvocationID: fmt.Sprint(i), Namespace: "ns", Pool: "p", Mode: messages.ModeSync, AcceptedAt: s.Now(),
			NamespaceUID: "uid", Payload: []byte(`{"big":true}`)}, Seq: uint64(i + 1)}
		if i != FullItems+1 {
			it.FromIngress(uint64(100+i), "STREAM", "sha256:h", 2048)
		} else {
			it.Rec = messages.Cached{Rev: 7, Record: messages.Record{InvocationID: fmt.Sprint(i), State: messages.StateQueued}} // read
		}
		require.True(t, s.Enqueue(it))
		items = append(items, it)
	}
	ingress, read := items[FullItems], items[FullItems+1]
	require.True(t, ingress.Light)
	require.Zero(t, ingress.Rec.Rev, "held light")
	ingress.Unlighten()
	want := messages.Record{InvocationID: fmt.Sprint(FullItems), Namespace: "ns", Pool: "p", Mode: messages.ModeSync, State: messages.StateQueued,
		Stream: "STREAM", RequestHash: "sha256:h", AcceptedAt: s.Now(), UpdatedAt: s.Now(), NamespaceUID: "uid", StreamBytes: 2048}
	require.Equal(t, messages.Cached{Rev: uint64(100 + FullItems), Record: want}, ingress.Rec)
	require.Nil(t, ingress.Inv.Payload, "the payload is read back from the stream, not kept")

	require.True(t, read.Light)
	read.Unlighten()
	require.Zero(t, read.Rec.Rev, "a Record that was read is read again")

	head := items[0]
	require.False(t, head.Light)
	head.Unlighten()
	require.EqualValues(t, 100, head.Rec.Rev, "a full item keeps its Record as it is")
}

// TestSilentWorkerReleasesEachOnItsDeadline: a silent worker's invocations
// are given up one by one, each at its own deadline; one dispatched later
// (still running there) stays the worker's until its own.
func TestSilentWorkerReleasesEachOnItsDeadline(t *testing.T) {
	s, clk := newState(3)
	register(s, "a", 2)
	first := enqueue(s, "first")
	require.Equal(t, []string{"first→a"}, workersOf(s.Dispatch()))
	clk.Step(10 * time.Second)
	register(s, "a", 2) // last heard at t0+10s
	second := enqueue(s, "second")
	require.Equal(t, []string{"second→a"}, workersOf(s.Dispatch()))

	clk.SetTime(t0.Add(40 * time.Second)) // first's deadline: 30s + 10s grace
	losses, _, _ := s.Housekeep()
	require.Len(t, losses, 1)
	require.Equal(t, []*Item{first}, losses[0].Items)
	require.Contains(t, s.Pool(pk).Workers, "a", "still holds second")
	require.Same(t, second, s.Pool(pk).Workers["a"].InFlight["second"])

	clk.SetTime(t0.Add(50 * time.Second)) // second's deadline
	losses, _, _ = s.Housekeep()
	require.Len(t, losses, 1)
	require.Equal(t, []*Item{second}, losses[0].Items)
	require.NotContains(t, s.Pool(pk).Workers, "a", "lost once it holds nothing")
}

// TestFinalOnce: a final invocation's messages — its own and every
// attempt's Dispatch, a superseded one's too — are released once.
func TestFinalOnce(t *testing.T) {
	s, _ := newState(3)
	it := &Item{Inv: messages.Invocation{InvocationID: "i", Namespace: "ns", Pool: "p"}, Seq: 7, Attempt: 2}
	require.True(t, s.Enqueue(it))
	s.Dispatched(it, 1, s.Publishing(it, "a"), 9) // a superseded attempt
	s.Dispatched(it, 2, s.Publishing(it, "b"), 11)
	s.Found(it, "b", 12)
	var seqs []uint64
	for _, h := range s.Final(it) {
		seqs = append(seqs, h.Seq)
	}
	require.ElementsMatch(t, []uint64{7, 9, 11, 12}, seqs)
	require.Empty(t, s.Final(it), "once")
	require.Equal(t, uint64(11), it.DispatchSeq)
}
