package queue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/stream"

	"github.com/stretchr/testify/assert"
)

// TestDeregisterRightAfterResultsRunsEachOnce: a worker finishes N
// invocations and deregisters as soon as its results are stored, while the
// activator's results consumer may still be behind. No finished invocation
// is dispatched again, though another worker stands ready and redelivery
// has no backoff.
func TestDeregisterRightAfterResultsRunsEachOnce(t *testing.T) {
	const n = 16
	e := newEnv(t, func(c *queue.Config) { c.Backoff = time.Nanosecond })
	g := newGate()
	a := e.worker("a", n, g.handler)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("fin-%d", i)
		r := e.invoke(map[string]any{"mode": "async", "invocationID": ids[i], "ttlSeconds": 60})
		require.EqualValues(t, 202, r.code, "%s: %d %s", ids[i], r.code, r.raw)
	}
	for range n {
		g.next(t)
	}
	e.worker("b", n, nil) // would take any redelivery at once
	close(g.release)
	require.NoError(t, a.Stop()) // returns once the results are stored, then deregisters
	for _, id := range ids {
		rec := e.waitState(id, messages.StateSucceeded, 10*time.Second)
		assert.False(t, rec.Worker != "a" || rec.Attempt != 1, "%s: finished by %s on attempt %d, want a on attempt 1", id, rec.Worker, rec.Attempt)
	}
	e.quiet("b") // a wrong redelivery would have run on b by now
	for _, id := range ids {
		assert.Equal(t, []string{"a"}, e.log.Runs(id), "%s runs", id)
	}
}

// TestDeregisterRedeliversUnstartedWork: what a worker was sent but never
// started when it deregistered cleanly goes to another worker at once and
// does not count as a lost attempt.
func TestDeregisterRedeliversUnstartedWork(t *testing.T) {
	e := newEnv(t, func(c *queue.Config) { c.MaxAttempts = 1; c.Backoff = time.Hour })
	a := e.fakeWorker("a")
	r := e.invoke(map[string]any{"mode": "async", "invocationID": "unstarted", "ttlSeconds": 60})
	require.EqualValues(t, 202, r.code, "%d %s", r.code, r.raw)
	e.waitState("unstarted", messages.StateDispatched, 5*time.Second)
	e.worker("b", 1, nil)
	a.deregister(0)
	rec := e.waitState("unstarted", messages.StateSucceeded, 5*time.Second)
	require.Equal(t, "b", rec.Worker)
	require.Equal(t, 2, rec.Attempt)
	require.Equal(t, []string{"b"}, e.log.Runs("unstarted"))
	// The abandoned attempt's Dispatch is gone: a worker named a that
	// resumes its consumer finds nothing to run.
	n := e.dispatches(t, "a", "unstarted")
	require.EqualValues(t, 0, n, "%d dispatches of unstarted left for a", n)
}

// TestActivatorRestartAfterDuplicateWindow: an invocation dispatched to a
// worker that has not started it yet is not handed to it a second time by
// an activator that restarts after the stream's duplicate window (1s here);
// one recorded as dispatched whose Dispatch never reached the stream (the
// old leader died in between) is published by the new one.
func TestActivatorRestartAfterDuplicateWindow(t *testing.T) {
	tests := []struct {
		name string
		// prepare leaves id recorded as dispatched to worker w while the
		// queue service is stopped.
		prepare func(e *env, id, w string)
	}{
		{"dispatch published", func(e *env, id, w string) {
			e.invoke(map[string]any{"mode": "async", "invocationID": id, "ttlSeconds": 60})
			e.waitState(id, messages.StateDispatched, 5*time.Second)
			e.stop()
		}},
		{"leader died before publishing", func(e *env, id, w string) {
			e.stop()
			e.crashedDispatch(id, w)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			require.Equal(t, time.Second, e.cfg.Stream.DuplicateWindow.Duration, "duplicate window %s, want 1s", e.cfg.Stream.DuplicateWindow.Duration)
			const w, id = "late", "not-yet-started"
			fw := e.fakeWorker(w) // registered and heartbeating, fetches nothing
			tc.prepare(e, id, w)
			time.Sleep(1500 * time.Millisecond) // past the duplicate window
			e.startQueue()
			require.Eventually(t, func() bool {
				body, err := e.metrics()
				return err == nil && strings.Contains(body, "\nrunplane_activator_rebuilt 1\n")
			}, 10*time.Second, 20*time.Millisecond, "the new activator rebuilt its state")
			// Rebuilt: the new activator holds id on w (its status follows).
			require.Eventually(t, func() bool { return e.poolStatus().InFlight == 1 }, 10*time.Second, 20*time.Millisecond)
			// One Dispatch of attempt 1 is stored (the republished one when
			// the old leader died before publishing), never two.
			require.Eventually(t, func() bool { return e.dispatches(t, w, id) == 1 }, 10*time.Second, 20*time.Millisecond)
			fw.stop()
			e.worker(w, 1, nil) // its durable consumer picks up the stored dispatch
			rec := e.waitState(id, messages.StateSucceeded, 10*time.Second)
			e.quiet(w)
			runs := e.log.Runs(id)
			require.False(t, len(runs) != 1 || rec.Attempt != 1, "ran %d times (%v), record attempt %d", len(runs), runs, rec.Attempt)
			// Finished: its Dispatch has left the stream.
			require.Eventually(t, func() bool { return e.dispatches(t, w, id) == 0 }, 10*time.Second, 20*time.Millisecond)
		})
	}
}

// fake is a worker that registers and heartbeats but fetches nothing.
type fake struct {
	e    *env
	name string
	done chan struct{}
}

func (e *env) fakeWorker(name string) *fake {
	f := &fake{e: e, name: name, done: make(chan struct{})}
	f.event(messages.EventRegistered, 0)
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-f.done:
				return
			case <-t.C:
				f.event(messages.EventHeartbeat, 0)
			}
		}
	}()
	e.t.Cleanup(f.stop)
	return f
}

func (f *fake) event(t messages.EventType, inFlight int) {
	b, _ := json.Marshal(messages.Event{Type: t, Pool: testPool, Worker: f.name, Namespace: "default", Concurrency: 1,
		InFlight: inFlight, Ready: true, At: time.Now().UTC()})
	_ = f.e.nc.Publish(f.e.subj.Events("default", testPool, f.name), b)
}

func (f *fake) stop() {
	select {
	case <-f.done:
	default:
		close(f.done)
	}
}

func (f *fake) deregister(inFlight int) {
	f.stop()
	f.event(messages.EventDeregistered, inFlight)
}

// crashedDispatch leaves the state an activator leaves when it dies between
// the dispatch compare-and-set and the publish: the invocation stored, its
// Record dispatched to w on attempt 1, no Dispatch.
func (e *env) crashedDispatch(id, w string) {
	e.t.Helper()
	ctx := context.Background()
	st, err := stream.Open(ctx, e.js, e.cfg.Stream)
	require.NoError(e.t, err)
	inv := messages.Invocation{InvocationID: id, Namespace: "default", Pool: testPool, Mode: messages.ModeAsync, TimeoutSeconds: 60, TTLSeconds: 60, AcceptedAt: time.Now().UTC()}
	b, _ := json.Marshal(inv)
	pa, err := e.js.Publish(ctx, e.subj.Invoke("default", testPool), b, jetstream.WithMsgID(messages.MsgID("default", id)))
	require.NoError(e.t, err)
	_, err = st.Create(ctx, messages.Record{InvocationID: id, Namespace: "default", Pool: testPool, Mode: inv.Mode, State: messages.StateDispatched,
		Worker: w, Attempt: 1, Stream: st.Config.Stream, Sequence: pa.Sequence, AcceptedAt: inv.AcceptedAt, UpdatedAt: time.Now().UTC()})
	require.NoError(e.t, err)
}

// dispatches counts the stored Dispatches of id's attempt 1 to worker w.
func (e *env) dispatches(t *testing.T, w, id string) int {
	t.Helper()
	ctx := context.Background()
	st, err := e.js.Stream(ctx, e.cfg.Stream.WithDefaults().Stream)
	require.NoError(t, err)
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{e.subj.Dispatch("default", testPool, w)}})
	require.NoError(t, err)
	n := 0
	for {
		batch, err := c.Fetch(100, jetstream.FetchMaxWait(300*time.Millisecond))
		require.NoError(t, err)
		got := 0
		for m := range batch.Messages() {
			got++
			if m.Headers().Get(jetstream.MsgIDHeader) == messages.DispatchPublishID("default", id, 1) {
				n++
			}
		}
		if got == 0 {
			return n
		}
	}
}
