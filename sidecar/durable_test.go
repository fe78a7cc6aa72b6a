package sidecar

import (
	"context"
	"encoding/json"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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
// (here: no results stream, as with a full store or NATS away for longer
// than a few retries) is published again until it is stored; the
// framework is never called a second time.
func TestUnstorableResultIsRetriedNotRerun(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	resultsStream := messages.ResultsStreamName(api.DefaultStreamName)
	require.NoError(t, e.js.DeleteStream(ctx, resultsStream))
	sock := socketPath(t)
	calls, _ := countingEcho(t, sock, nil)
	results := e.results() // core NATS sees every try, stored or not
	// The store answers each try at once with an error, as a full one does
	// (without an answer each try waited out the publish timeout: 5 s a
	// try, 42 s for this test).
	var full atomic.Bool
	full.Store(true)
	sub, err := e.nc.Subscribe(subjects.Result(testNS, testPool), func(m *nats.Msg) {
		if full.Load() {
			assert.NoError(t, m.Respond([]byte(`{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}`)))
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, e.nc.Flush())
	e.startSidecar(e.config("w1", sock))
	e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{InvocationID: "unstorable"}})
	for range 7 { // more tries than the 5 before a nak
		require.Equal(t, "unstorable", waitResult(t, results).InvocationID)
	}
	full.Store(false)
	_, err = e.js.CreateStream(ctx, jetstream.StreamConfig{Name: resultsStream, Subjects: subjects.ResultStreamSubjects()})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err := e.js.Stream(ctx, resultsStream)
		return err == nil && st.CachedInfo() != nil && func() bool {
			info, err := st.Info(ctx)
			return err == nil && info.State.Msgs == 1
		}()
	}, waitFor, tick, "the result is stored")
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
