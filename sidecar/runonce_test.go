package sidecar

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/httpjson"
	"github.com/runplane/runplane/internal/messages"
)

// journalEmpty reports whether the sidecar's journal holds no entry.
func journalEmpty(dir string) bool {
	ents, err := os.ReadDir(dir)
	return err == nil && len(ents) == 0
}

// settled waits until worker's consumer has nothing pending or unacked and
// the journal in stateDir is empty.
func (e *env) settled(t *testing.T, worker, stateDir string, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool {
		ci := e.consumerInfo(worker)
		return ci.NumAckPending == 0 && ci.NumPending == 0 && journalEmpty(stateDir)
	}, within, tick, "the dispatch acked and the journal emptied")
}

// TestTwoRestartsWithinAckWaitRunOnce: the framework answered, the result
// could not be stored, the sidecar was SIGKILLed; the restarted sidecar
// stored the journaled outcome and was SIGKILLed again before the ack wait
// was over. The third sidecar must not run the call again: the journal
// entry is removed only once the dispatch is acked, which the first
// restart does at once.
func TestTwoRestartsWithinAckWaitRunOnce(t *testing.T) {
	sidecarBin, _ := binaries(t)
	e := newEnv(t)
	ctx := context.Background()
	sock := socketPath(t)
	calls, _ := countingEcho(t, sock, nil)
	e.workerConsumer("w1", 10*time.Second)
	resultsStream := messages.ResultsStreamName(api.DefaultStreamName)
	require.NoError(t, e.js.DeleteStream(ctx, resultsStream))
	stateDir := t.TempDir()
	start := e.sidecarProcess(sidecarBin, "w1", sock, api.EnvWorkerStateDir+"="+stateDir)
	kill := func(c *exec.Cmd) { _ = c.Process.Kill(); _ = c.Wait() }

	first := start()
	e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{InvocationID: "twice"}})
	require.Eventually(t, func() bool {
		ents, _ := os.ReadDir(stateDir)
		if calls.Load() != 1 || len(ents) != 1 {
			return false
		}
		b, err := os.ReadFile(filepath.Join(stateDir, ents[0].Name()))
		return err == nil && strings.Contains(string(b), `"state":"succeeded"`)
	}, waitFor, tick, "the framework answered and the answer is journaled")
	kill(first)

	_, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: resultsStream, Subjects: subjects.ResultStreamSubjects()})
	require.NoError(t, err)
	second := start()
	require.Eventually(t, func() bool {
		st, err := e.js.Stream(ctx, resultsStream)
		if err != nil {
			return false
		}
		info, err := st.Info(ctx)
		return err == nil && info.State.Msgs >= 1
	}, waitFor, tick, "the journaled result is stored")
	kill(second)

	start()
	e.settled(t, "w1", stateDir, 30*time.Second) // past the ack wait: a redelivery would have run
	require.EqualValues(t, 1, calls.Load(), "framework calls")
}

// TestSIGKILLRightAfterAnswerRunOnce: the sidecar dies as the framework
// answers (the answer never reaches it). The restarted sidecar re-attaches
// to the call, which the framework remembers, and delivers that answer;
// nothing waits for the ack wait and the framework runs once.
func TestSIGKILLRightAfterAnswerRunOnce(t *testing.T) {
	sidecarBin, _ := binaries(t)
	e := newEnv(t)
	sock := socketPath(t)
	var calls atomic.Int32
	var victim atomic.Pointer[exec.Cmd]
	echo := framework.Echo(framework.EchoOptions{})
	serveFramework(t, sock, func(ctx context.Context, r framework.Request) (framework.Response, error) {
		calls.Add(1)
		if c := victim.Swap(nil); c != nil {
			_ = c.Process.Kill() // answered, but nobody is left to read it
		}
		return echo(ctx, r)
	})
	results := e.results()
	e.workerConsumer("w1", 30*time.Second) // longer than this test waits
	stateDir := t.TempDir()
	start := e.sidecarProcess(sidecarBin, "w1", sock, api.EnvWorkerStateDir+"="+stateDir)
	first := start()
	victim.Store(first)
	e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{InvocationID: "answered"}})
	require.Eventually(t, func() bool { return calls.Load() == 1 }, waitFor, tick)
	_ = first.Wait()

	start()
	r := waitResult(t, results)
	require.Equal(t, "answered", r.InvocationID)
	require.Equal(t, messages.StateSucceeded, r.State, r.Error)
	require.Contains(t, string(r.Response.Body), `"invocationID":"answered"`, "the framework's answer")
	e.settled(t, "w1", stateDir, waitFor)
	require.EqualValues(t, 1, calls.Load(), "framework calls")
}

// midCall is a framework for TestSIGKILLMidCallRunOnce: it counts the
// calls it started and holds each until release.
type midCall struct {
	calls   func() int
	release func()
}

// TestSIGKILLMidCallRunOnce: the sidecar is SIGKILLed while the framework
// runs a call. With either helper (idempotent invoke) the restarted
// sidecar re-attaches and delivers the call's answer; with a plain-contract
// framework the call ends failed, naming the restart, and is not run
// again. Either way at once, not after the ack wait.
func TestSIGKILLMidCallRunOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		serve func(t *testing.T, sock string) midCall
		check func(t *testing.T, r gotResult)
	}{
		{"go helper", serveGoMidCall, succeededWithAnswer},
		{"python helper", servePythonMidCall, succeededWithAnswer},
		{"plain contract", servePlainMidCall, func(t *testing.T, r gotResult) {
			require.Equal(t, messages.StateFailed, r.State)
			require.Contains(t, r.Error, "sidecar restarted while the framework ran this call")
			require.Contains(t, r.Error, "not run again")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sidecarBin, _ := binaries(t)
			e := newEnv(t)
			sock := socketPath(t)
			fw := tc.serve(t, sock)
			results := e.results()
			e.workerConsumer("w1", 30*time.Second) // longer than this test waits
			stateDir := t.TempDir()
			start := e.sidecarProcess(sidecarBin, "w1", sock, api.EnvWorkerStateDir+"="+stateDir)
			first := start()
			e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{InvocationID: "midcall"}})
			require.Eventually(t, func() bool { return fw.calls() == 1 }, waitFor, tick, "the framework started the call")
			_ = first.Process.Kill()
			_ = first.Wait()
			start()
			fw.release()
			r := waitResult(t, results)
			require.Equal(t, "midcall", r.InvocationID)
			tc.check(t, r)
			e.settled(t, "w1", stateDir, waitFor)
			require.Equal(t, 1, fw.calls(), "framework calls")
		})
	}
}

func succeededWithAnswer(t *testing.T, r gotResult) {
	t.Helper()
	require.Equal(t, messages.StateSucceeded, r.State, r.Error)
	require.Contains(t, string(r.Response.Body), `"ran":"midcall"`, "the framework's answer")
}

func serveGoMidCall(t *testing.T, sock string) midCall {
	var calls atomic.Int32
	gate := make(chan struct{})
	serveFramework(t, sock, func(ctx context.Context, r framework.Request) (framework.Response, error) {
		calls.Add(1)
		select {
		case <-gate:
		case <-ctx.Done():
			return framework.Response{}, ctx.Err()
		}
		return framework.Response{Body: json.RawMessage(`{"ran":"` + r.InvocationID + `"}`)}, nil
	})
	return midCall{calls: func() int { return int(calls.Load()) }, release: func() { close(gate) }}
}

// servePlainMidCall serves the plain contract by hand: no capability on
// its health answer, and a call ends with its connection.
func servePlainMidCall(t *testing.T, sock string) midCall {
	var calls atomic.Int32
	gate := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		httpjson.Write(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("POST /invoke", func(w http.ResponseWriter, r *http.Request) {
		var req framework.Request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			httpjson.Write(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		calls.Add(1)
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
		httpjson.Write(w, http.StatusOK, framework.Response{StatusCode: 200, Body: json.RawMessage(`{"ran":"` + req.InvocationID + `"}`)})
	})
	ln, err := framework.ListenUnix(sock)
	require.NoError(t, err)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return midCall{calls: func() int { return int(calls.Load()) }, release: func() { close(gate) }}
}

// pythonMidCall is the Python helper's framework for the mid-call case:
// each start is a line in the log, and a call waits for the gate file.
const pythonMidCall = `
import os
import runplane_framework as rf

LOG, GATE = os.environ["RUNONCE_LOG"], os.environ["RUNONCE_GATE"]

def handler(req: rf.Request) -> rf.Response:
    with open(LOG, "a") as f:
        f.write(req.invocationID + "\n")
    while not os.path.exists(GATE):
        if req.cancelled.wait(0.02):
            return rf.Response(error="cancelled")
    return rf.Response(body={"ran": req.invocationID})

rf.serve(handler)
`

func servePythonMidCall(t *testing.T, sock string) midCall {
	py, err := exec.LookPath("/usr/bin/python3")
	if err != nil {
		t.Skip("/usr/bin/python3 not installed")
	}
	dir := t.TempDir()
	script, logFile, gate := filepath.Join(dir, "midcall.py"), filepath.Join(dir, "starts"), filepath.Join(dir, "gate")
	require.NoError(t, os.WriteFile(script, []byte(pythonMidCall), 0o600))
	sdk, err := filepath.Abs("../framework/python")
	require.NoError(t, err)
	fw := exec.Command(py, script)
	fw.Env = append(os.Environ(), api.EnvFrameworkSocket+"="+sock, "PYTHONPATH="+sdk, "RUNONCE_LOG="+logFile, "RUNONCE_GATE="+gate)
	fw.Stdout, fw.Stderr = os.Stderr, os.Stderr
	require.NoError(t, fw.Start())
	t.Cleanup(func() { _ = fw.Process.Kill(); _ = fw.Wait() })
	calls := func() int {
		b, _ := os.ReadFile(logFile)
		return strings.Count(string(b), "\n")
	}
	release := func() { require.NoError(t, os.WriteFile(gate, nil, 0o600)) }
	return midCall{calls: calls, release: release}
}

// TestJournalPhases: one entry per dispatch, replaced as it goes from
// started to answered, without the payload.
func TestJournalPhases(t *testing.T) {
	o := outcomes{dir: t.TempDir()}
	d := messages.Dispatch{Invocation: messages.Invocation{InvocationID: "j", Payload: []byte(`{"big":1}`)}, Attempt: 2}
	require.NoError(t, o.save(outcome{ID: "x", Phase: phaseStarted, Reply: "$JS.ACK.a", Dispatch: d}, true))
	require.NoError(t, o.save(outcome{ID: "x", Phase: phaseAnswered, Reply: "$JS.ACK.a", Dispatch: d, Result: messages.Result{State: messages.StateSucceeded}}, true))
	got, errs := o.load()
	require.Empty(t, errs)
	require.Len(t, got, 1, "one entry per dispatch, replaced in place")
	assert.Equal(t, phaseAnswered, got[0].Phase)
	assert.True(t, got[0].answered())
	assert.Equal(t, "$JS.ACK.a", got[0].Reply)
	assert.Nil(t, got[0].Dispatch.Payload, "the payload is not journaled")
	require.NoError(t, o.remove("x"))
	got, _ = o.load()
	assert.Empty(t, got)
	assert.True(t, outcome{}.answered(), "an entry of an older sidecar (no phase) holds an answer")
}

// TestRestartHandsBackUnstartedAtOnce: a dispatch the previous sidecar
// took but never started (journaled as received) is delivered again as
// soon as the sidecar restarts, not after the consumer's ack wait: work
// with a timeout shorter than the ack wait still runs, once.
func TestRestartHandsBackUnstartedAtOnce(t *testing.T) {
	e := newEnv(t)
	sock := socketPath(t)
	calls, _ := countingEcho(t, sock, nil)
	results := e.results()
	cfg := e.config("w1", sock)
	cfg.AckWait = time.Minute
	cfg.StateDir = t.TempDir()
	e.workerConsumer("w1", cfg.AckWait)
	d := messages.Dispatch{Invocation: messages.Invocation{InvocationID: "unstarted", TimeoutSeconds: 20}}
	e.dispatch("w1", d)

	// The previous sidecar: took the dispatch, journaled it, died.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cons, err := e.js.Consumer(ctx, api.DefaultStreamName, messages.ConsumerName(testNS, testPool, "w1"))
	require.NoError(t, err)
	msg, err := cons.Next()
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(msg.Data(), &d))
	id := messages.DispatchMsgID(testNS, d.InvocationID, d.Attempt)
	entry, err := json.Marshal(map[string]any{"id": id, "phase": "received", "reply": msg.Reply(), "dispatch": d})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(outcomes{dir: cfg.StateDir}.path(id), entry, 0o600))

	e.startSidecar(cfg)
	r := waitResult(t, results) // 20 s, a third of the ack wait
	require.Equal(t, "unstarted", r.InvocationID)
	require.Equal(t, messages.StateSucceeded, r.State, r.Error)
	e.settled(t, "w1", cfg.StateDir, waitFor)
	require.EqualValues(t, 1, calls.Load(), "framework calls")
}

// TestUnjournaledStartIsNotMade: a sidecar that cannot journal a call as
// started (its state directory gone, a full disk) does not start it but
// hands it back: the entry on disk, if any, still says received, and a
// restart would hand it back and start it a second time beside the first.
func TestUnjournaledStartIsNotMade(t *testing.T) {
	e := newEnv(t)
	sock := socketPath(t)
	calls, _ := countingEcho(t, sock, nil)
	cfg := e.config("w1", sock)
	cfg.StateDir = t.TempDir()
	e.workerConsumer("w1", time.Minute)
	e.startSidecar(cfg)
	require.NoError(t, os.RemoveAll(cfg.StateDir))

	e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{InvocationID: "unjournaled"}})
	require.Eventually(t, func() bool {
		return e.consumerInfo("w1").Delivered.Consumer >= 3
	}, waitFor, tick, "the dispatch handed back and delivered again")
	assert.EqualValues(t, 0, calls.Load(), "framework calls of a start that was not journaled")
}
