package sidecar

import (
	"context"
	"encoding/json"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"
)

// countingEcho serves the echo framework on sock and counts its calls;
// while gate is non-nil each call waits for it to close.
func countingEcho(t *testing.T, sock string, gate chan struct{}) (calls *atomic.Int32, stop func()) {
	calls = &atomic.Int32{}
	echo := framework.Echo(framework.EchoOptions{})
	stop = serveFramework(t, sock, func(ctx context.Context, r framework.Request) (framework.Response, error) {
		calls.Add(1)
		if gate != nil {
			<-gate
		}
		return echo(ctx, r)
	})
	return calls, stop
}

// TestUnstorableResultIsRetriedNotRerun: a result that cannot be stored
// (here: a full results stream that refuses new messages, as a store at
// its limits does; NATS away for longer than a few retries is the same
// loop) is published again until it is stored; the framework is never
// called a second time.
func TestUnstorableResultIsRetriedNotRerun(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	st, err := e.js.Stream(ctx, messages.ResultsStreamName(api.DefaultStreamName))
	require.NoError(t, err)
	open := st.CachedInfo().Config
	full := open
	full.MaxMsgs, full.Discard = 1, jetstream.DiscardNew
	_, err = e.js.UpdateStream(ctx, full)
	require.NoError(t, err)
	// Another pool's result takes the one place: every try is refused at
	// once (JetStream's "maximum messages exceeded").
	_, err = e.js.Publish(ctx, subjects.Result(testNS, "another-pool"), []byte(`{}`))
	require.NoError(t, err)
	sock := socketPath(t)
	calls, _ := countingEcho(t, sock, nil)
	results := e.results() // core NATS sees every try, stored or not
	cfg := e.config("w1", sock)
	e.startSidecar(cfg)
	began := time.Now()
	e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{InvocationID: "unstorable"}})
	// More tries than the 5 before a nak (the old code), and for longer
	// than two AckWaits: a dispatch given back, or left unacked, would have
	// come back and run again by then.
	for tries := 0; tries < 7 || time.Since(began) < 2*cfg.AckWait; tries++ {
		require.Equal(t, "unstorable", waitResult(t, results).InvocationID)
	}
	_, err = e.js.UpdateStream(ctx, open)
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m, err := st.GetLastMsgForSubject(ctx, subjects.Result(testNS, testPool))
		require.NoError(c, err, "the result is stored")
		var r messages.Result
		require.NoError(c, json.Unmarshal(m.Data, &r))
		assert.Equal(c, "unstorable", r.InvocationID)
	}, waitFor, tick)
	require.Eventually(t, func() bool {
		ci := e.consumerInfo("w1")
		return ci.NumAckPending == 0 && ci.NumPending == 0
	}, waitFor, tick, "the dispatch is acked")
	require.EqualValues(t, 1, calls.Load(), "framework calls")
}

// TestLaterAttemptOfHeldExecutionNotRun: a worker declared lost while it
// ran an invocation (frozen, cut from NATS) and given it back as a new
// attempt does not run it again, whether the first attempt is still
// running or finished; the first attempt's result is the one published.
func TestLaterAttemptOfHeldExecutionNotRun(t *testing.T) {
	for _, tc := range []struct {
		name     string
		finished bool // the first attempt finished before the second came
	}{{"running", false}, {"finished", true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			sock := socketPath(t)
			gate := make(chan struct{})
			calls, _ := countingEcho(t, sock, gate)
			results := e.results()
			cfg := e.config("w1", sock)
			cfg.Concurrency = 2
			e.startSidecar(cfg)
			e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{InvocationID: "held"}, Attempt: 1})
			require.Eventually(t, func() bool { return calls.Load() == 1 }, waitFor, tick, "first attempt started")
			if tc.finished {
				close(gate)
				r := waitResult(t, results)
				require.Equal(t, 1, r.Attempt)
			}
			e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{InvocationID: "held"}, Attempt: 2})
			require.Eventually(t, func() bool {
				ci := e.consumerInfo("w1")
				return ci.Delivered.Consumer == 2 && ci.NumAckPending <= 1 && ci.NumPending == 0
			}, waitFor, tick, "second attempt delivered")
			if !tc.finished {
				close(gate)
				r := waitResult(t, results)
				require.Equal(t, 1, r.Attempt)
			}
			require.Eventually(t, func() bool {
				ci := e.consumerInfo("w1")
				return ci.NumAckPending == 0 && ci.NumPending == 0
			}, waitFor, tick, "both dispatches acked")
			require.EqualValues(t, 1, calls.Load(), "framework calls")
		})
	}
}

// TestFrameworkRefusalHandsBackUnrun: a dispatch taken while the
// framework was thought ready, whose connection the framework refuses,
// is not failed: the worker turns not ready at once, and the dispatch runs
// (once, same attempt) when the framework serves again.
func TestFrameworkRefusalHandsBackUnrun(t *testing.T) {
	e := newEnv(t)
	sock := socketPath(t)
	_, stop := countingEcho(t, sock, nil)
	events, results := e.events(), e.results()
	cfg := e.config("w1", sock)
	cfg.ProbeInterval = time.Hour // only the refusal tells the sidecar
	e.startSidecar(cfg)
	waitEvent(t, events, "ready", func(ev messages.Event) bool { return ev.Ready })
	stop()
	e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{InvocationID: "refused"}})
	waitEvent(t, events, "unready heartbeat", func(ev messages.Event) bool { return ev.Type == messages.EventHeartbeat && !ev.Ready })
	calls, _ := countingEcho(t, sock, nil)
	r := waitResult(t, results)
	require.Equal(t, "refused", r.InvocationID)
	require.Equal(t, messages.StateSucceeded, r.State, "first result: %+v", r.Result)
	require.Equal(t, 1, r.Attempt)
	require.EqualValues(t, 1, calls.Load())
}

// TestStaleDispatchNotStarted: a dispatch that reaches the sidecar past
// its deadline (the worker was frozen or cut off with it; the activator
// has given the attempt to another worker) is not run; a fresh one is.
func TestStaleDispatchNotStarted(t *testing.T) {
	e := newEnv(t)
	sock := socketPath(t)
	calls, _ := countingEcho(t, sock, nil)
	results := e.results()
	e.startSidecar(e.config("w1", sock))
	stale := messages.Invocation{InvocationID: "stale", TimeoutSeconds: 1}
	e.dispatch("w1", messages.Dispatch{Invocation: stale, Attempt: 1, DispatchedAt: time.Now().Add(-2 * time.Second)})
	e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{InvocationID: "fresh", TimeoutSeconds: 1}, Attempt: 1, DispatchedAt: time.Now()})
	r := waitResult(t, results)
	require.Equal(t, "fresh", r.InvocationID, "the stale dispatch published no result")
	require.Eventually(t, func() bool {
		ci := e.consumerInfo("w1")
		return ci.NumAckPending == 0 && ci.NumPending == 0
	}, waitFor, tick, "both dispatches settled (the stale one termed)")
	require.EqualValues(t, 1, calls.Load(), "framework calls: the fresh dispatch only")
}

// TestRestartPublishesJournaledOutcome: the framework answered, the result
// could not be stored (the results stream is gone), and the sidecar was
// SIGKILLed. The restarted sidecar (same state directory, as an emptyDir
// gives it) stores that outcome and does not call the framework again
// when the unacked dispatch comes back.
func TestRestartPublishesJournaledOutcome(t *testing.T) {
	sidecarBin, _ := binaries(t)
	e := newEnv(t)
	sock := socketPath(t)
	calls, _ := countingEcho(t, sock, nil)
	e.workerConsumer("w1", time.Second)
	resultsStream := messages.ResultsStreamName(api.DefaultStreamName)
	require.NoError(t, e.js.DeleteStream(context.Background(), resultsStream))
	stateDir := t.TempDir()
	start := e.sidecarProcess(sidecarBin, "w1", sock, api.EnvWorkerStateDir+"="+stateDir)
	first := start()
	e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{InvocationID: "journaled", Payload: []byte(`{"n":1}`)}})
	require.Eventually(t, func() bool {
		ents, _ := os.ReadDir(stateDir)
		return calls.Load() == 1 && len(ents) == 1
	}, waitFor, tick, "the framework answered and the outcome is journaled")
	_ = first.Process.Kill()
	_ = first.Wait()

	_, err := e.js.CreateStream(context.Background(), jetstream.StreamConfig{Name: resultsStream, Subjects: subjects.ResultStreamSubjects()})
	require.NoError(t, err)
	start()
	var stored messages.Result
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		st, err := e.js.Stream(context.Background(), resultsStream)
		require.NoError(c, err)
		m, err := st.GetMsg(context.Background(), 1)
		require.NoError(c, err, "the result is stored")
		require.NoError(c, json.Unmarshal(m.Data, &stored))
	}, waitFor, tick)
	require.Equal(t, "journaled", stored.InvocationID)
	require.Equal(t, messages.StateSucceeded, stored.State, stored.Error)
	require.Contains(t, string(stored.Response.Body), `"invocationID":"journaled"`, "the framework's answer (an echo of its request)")
	require.Eventually(t, func() bool {
		ci := e.consumerInfo("w1")
		ents, _ := os.ReadDir(stateDir)
		return ci.NumAckPending == 0 && ci.NumPending == 0 && len(ents) == 0
	}, waitFor, tick, "the redelivered dispatch acked without a run, the journal emptied")
	require.EqualValues(t, 1, calls.Load(), "framework calls")
}
