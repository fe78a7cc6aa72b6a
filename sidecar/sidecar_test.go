package sidecar

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"
)

func TestDispatchResultReplyEvents(t *testing.T) {
	e := newEnv(t)
	sock := socketPath(t)
	serveFramework(t, sock, framework.Echo(framework.EchoOptions{}))
	events, results := e.events(), e.results()
	reply := make(chan *nats.Msg, 1)
	inbox := nats.NewInbox()
	sub, err := e.nc.ChanSubscribe(inbox, reply)
	require.NoError(t, err)
	defer sub.Unsubscribe()

	e.startSidecar(e.config("w1", sock))
	reg := waitEvent(t, events, "registered", func(ev messages.Event) bool { return ev.Type == messages.EventRegistered })
	assert.Equal(t, "w1", reg.Worker)
	assert.Equal(t, "default", reg.Namespace)
	assert.Equal(t, 1, reg.Concurrency)
	waitEvent(t, events, "ready heartbeat", func(ev messages.Event) bool { return ev.Type == messages.EventHeartbeat && ev.Ready })

	e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{
		InvocationID: "inv-1", Mode: messages.ModeSync, ReplyTo: inbox,
		ContentType: "application/json", Payload: json.RawMessage(`{"prompt":"robot"}`),
		Headers: map[string]string{"x-request-id": "abc"}, Attributes: map[string]string{"path": "/generate"},
	}})

	res := waitResult(t, results)
	assert.Empty(t, res.MsgID, "a result carries no Nats-Msg-Id (another worker could pre-claim it)")
	require.Equal(t, messages.StateSucceeded, res.State)
	require.NotNil(t, res.Response)
	assert.Equal(t, "w1", res.Worker)
	assert.Equal(t, 1, res.Attempt)
	assert.False(t, res.StartedAt.IsZero(), "startedAt")
	assert.False(t, res.FinishedAt.Before(res.StartedAt), "finishedAt before startedAt")
	var echoed framework.Request
	require.NoError(t, json.Unmarshal(res.Response.Body, &echoed), "echo body")
	assert.Equal(t, framework.Version, echoed.Version)
	assert.Equal(t, "inv-1", echoed.InvocationID)
	assert.Equal(t, testPool, echoed.ServerlessRequestID)
	assert.Equal(t, "w1", echoed.WorkerName)
	assert.Equal(t, "default", echoed.WorkerNamespace)
	assert.Equal(t, "sync", echoed.Mode)
	assert.JSONEq(t, `{"prompt":"robot"}`, string(echoed.Payload))
	assert.Equal(t, "abc", echoed.Headers["x-request-id"])
	assert.Equal(t, "/generate", echoed.Attributes["path"])
	assert.False(t, echoed.DispatchedAt.IsZero(), "dispatchedAt")
	select {
	case m := <-reply:
		var r messages.Result
		require.NoError(t, json.Unmarshal(m.Data, &r), "sync reply")
		assert.Equal(t, "inv-1", r.InvocationID)
		assert.Equal(t, messages.StateSucceeded, r.State)
	case <-time.After(5 * time.Second):
		require.Fail(t, "no sync reply")
	}
	waitEvent(t, events, "started", func(ev messages.Event) bool {
		return ev.Type == messages.EventStarted && ev.InvocationID == "inv-1" && ev.Attempt == 1
	})
	waitEvent(t, events, "finished", func(ev messages.Event) bool {
		return ev.Type == messages.EventFinished && ev.InvocationID == "inv-1" && ev.State == messages.StateSucceeded
	})
	require.Eventually(t, func() bool {
		ci := e.consumerInfo("w1")
		return ci.NumAckPending == 0 && ci.NumPending == 0 && ci.Delivered.Consumer == 1
	}, waitFor, tick, "dispatch acked")
	if ci := e.consumerInfo("w1"); ci.Config.MaxAckPending != 1 || ci.Config.InactiveThreshold == 0 || ci.Config.Durable != "default_echo_w1" {
		t.Errorf("consumer config = %+v, want durable default_echo_w1, MaxAckPending 1, InactiveThreshold set", ci.Config)
	}
}

func TestResultStates(t *testing.T) {
	e := newEnv(t)
	sock := socketPath(t)
	serveFramework(t, sock, framework.Echo(framework.EchoOptions{}))
	results := e.results()
	e.startSidecar(e.config("w1", sock))
	tests := []struct {
		name    string
		attrs   map[string]string
		timeout int
		state   messages.State
		errText string
	}{
		{name: "echo", state: messages.StateSucceeded},
		{name: "framework error envelope", attrs: map[string]string{framework.EchoAttrFail: "model exploded"}, state: messages.StateFailed, errText: "model exploded"},
		{name: "timeout", attrs: map[string]string{framework.EchoAttrSleep: "10s"}, timeout: 1, state: messages.StateTimedOut, errText: "invocation timed out after 1s"},
		{name: "bad attribute answered by framework", attrs: map[string]string{framework.EchoAttrSleep: "soon"}, state: messages.StateFailed,
			errText: `attribute echo.sleep: "soon" is not a duration (e.g. 2s): time: invalid duration "soon"`},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := "inv-" + string(rune('a'+i))
			start := time.Now()
			e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{InvocationID: id, Attributes: tt.attrs, TimeoutSeconds: tt.timeout}})
			res := waitResult(t, results)
			assert.Equal(t, id, res.InvocationID)
			assert.Equal(t, tt.state, res.State)
			assert.Equal(t, tt.errText, res.Error)
			if tt.state == messages.StateTimedOut {
				assert.Less(t, time.Since(start), 5*time.Second, "timed_out result, want about the 1s timeout")
			}
		})
	}
}

func TestConcurrencyLimit(t *testing.T) {
	e := newEnv(t)
	sock := socketPath(t)
	var cur, peak atomic.Int32
	echo := framework.Echo(framework.EchoOptions{})
	serveFramework(t, sock, func(ctx context.Context, r framework.Request) (framework.Response, error) {
		n := cur.Add(1)
		defer cur.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(300 * time.Millisecond)
		return echo(ctx, r)
	})
	events, results := e.events(), e.results()
	cfg := e.config("w1", sock)
	cfg.Concurrency = 2
	e.startSidecar(cfg)
	waitEvent(t, events, "registered", func(ev messages.Event) bool { return ev.Type == messages.EventRegistered && ev.Concurrency == 2 })
	const n = 6
	for i := range n {
		e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{InvocationID: "c" + string(rune('0'+i))}})
	}
	seen := map[string]bool{}
	for range n {
		r := waitResult(t, results)
		assert.Equal(t, messages.StateSucceeded, r.State, "result %s (%s)", r.InvocationID, r.Error)
		seen[r.InvocationID] = true
	}
	assert.Len(t, seen, n, "results for distinct invocations")
	assert.Equal(t, int32(2), peak.Load(), "peak concurrent framework calls")
	// Heartbeats never report more in flight than the concurrency.
	for {
		select {
		case ev := <-events:
			assert.LessOrEqual(t, ev.InFlight, 2, "event %s reports inFlight above the concurrency", ev.Type)
			continue
		default:
		}
		break
	}
}

func TestLongInvocationIsNotRedelivered(t *testing.T) {
	e := newEnv(t)
	sock := socketPath(t)
	var calls atomic.Int32
	echo := framework.Echo(framework.EchoOptions{Sleep: 2 * time.Second})
	serveFramework(t, sock, func(ctx context.Context, r framework.Request) (framework.Response, error) {
		calls.Add(1)
		return echo(ctx, r)
	})
	results := e.results()
	cfg := e.config("w1", sock)
	cfg.Concurrency = 2 // room for a redelivery to be run, were it sent
	cfg.AckWait = 400 * time.Millisecond
	e.startSidecar(cfg)
	e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{InvocationID: "long"}})
	res := waitResult(t, results)
	require.Equal(t, messages.StateSucceeded, res.State, res.Error)
	assert.Equal(t, int32(1), calls.Load(), "framework calls")
	ci := e.consumerInfo("w1")
	// In-progress acks keep a 2s call within a 400ms ack wait.
	assert.Zero(t, ci.NumRedelivered, "redelivered")
	assert.Equal(t, uint64(1), ci.Delivered.Consumer, "delivered")
}

func TestCancel(t *testing.T) {
	e := newEnv(t)
	sock := socketPath(t)
	entered, ctxEnded := make(chan struct{}, 1), make(chan struct{}, 1)
	serveFramework(t, sock, func(ctx context.Context, r framework.Request) (framework.Response, error) {
		entered <- struct{}{}
		<-ctx.Done()
		ctxEnded <- struct{}{}
		return framework.Response{}, ctx.Err()
	})
	events, results := e.events(), e.results()
	e.startSidecar(e.config("w1", sock))
	for _, c := range []struct {
		id      string
		attempt int // of the Cancel; 0 = any
	}{{"cx", 1}, {"cy", 0}} {
		e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{InvocationID: c.id}})
		waitEvent(t, events, "started "+c.id, func(ev messages.Event) bool { return ev.Type == messages.EventStarted && ev.InvocationID == c.id })
		// A cancel for another invocation (or attempt) must not touch it.
		for _, other := range []messages.Cancel{{InvocationID: "other"}, {InvocationID: c.id, Attempt: 7}, {InvocationID: c.id[:1]}} {
			data, _ := json.Marshal(other)
			require.NoError(t, e.nc.Publish(subjects.Cancel(testNS, testPool, "w1"), data))
		}
		data, _ := json.Marshal(messages.Cancel{InvocationID: c.id, Attempt: c.attempt})
		require.NoError(t, e.nc.Publish(subjects.Cancel(testNS, testPool, "w1"), data))
		res := waitResult(t, results)
		require.Equal(t, c.id, res.InvocationID)
		require.Equal(t, messages.StateCancelled, res.State, res.Error)
		// The started event can beat the HTTP request to the framework; a
		// cancel that lands first ends the call before the framework sees
		// it. A call the framework did see must have its context cancelled.
		select {
		case <-entered:
		case <-time.After(time.Second):
			continue
		}
		select {
		case <-ctxEnded:
		case <-time.After(5 * time.Second):
			t.Fatal("framework call's context was not cancelled")
		}
	}
}

func TestFrameworkCrashFails(t *testing.T) {
	_, echoBin := binaries(t)
	e := newEnv(t)
	sock := socketPath(t)
	fw := exec.Command(echoBin, "-socket", sock)
	fw.Stderr = os.Stderr
	require.NoError(t, fw.Start())
	fwDone := make(chan error, 1)
	go func() { fwDone <- fw.Wait() }()
	t.Cleanup(func() { _ = fw.Process.Kill() })
	events, results := e.events(), e.results()
	e.startSidecar(e.config("w1", sock))
	waitEvent(t, events, "ready", func(ev messages.Event) bool { return ev.Ready })
	e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{InvocationID: "boom", Attributes: map[string]string{framework.EchoAttrCrash: "true"}}})
	res := waitResult(t, results)
	require.Equal(t, messages.StateFailed, res.State)
	require.NotEmpty(t, res.Error)
	select {
	case <-fwDone:
	case <-time.After(5 * time.Second):
		t.Fatal("framework-echo did not exit")
	}
	waitEvent(t, events, "unready heartbeat after the crash", func(ev messages.Event) bool { return ev.Type == messages.EventHeartbeat && !ev.Ready })
	require.Eventually(t, func() bool { return e.consumerInfo("w1").NumAckPending == 0 }, waitFor, tick, "crashed dispatch acked")
}

func TestDuplicateDeliveryRunsOnce(t *testing.T) {
	e := newEnv(t)
	sock := socketPath(t)
	var calls atomic.Int32
	echo := framework.Echo(framework.EchoOptions{})
	serveFramework(t, sock, func(ctx context.Context, r framework.Request) (framework.Response, error) {
		calls.Add(1)
		return echo(ctx, r)
	})
	results := e.results()
	e.startSidecar(e.config("w1", sock))
	d := messages.Dispatch{Invocation: messages.Invocation{InvocationID: "dup", Pool: testPool}, Worker: "w1", Attempt: 1}
	data, _ := json.Marshal(d)
	ctx := context.Background()
	// Two stream messages with the same dispatch: what a republish outside
	// the stream's duplicate window looks like.
	for range 2 {
		_, err := e.js.Publish(ctx, subjects.Dispatch(testNS, testPool, "w1"), data)
		require.NoError(t, err)
	}
	r := waitResult(t, results)
	require.Equal(t, "dup", r.InvocationID)
	require.Equal(t, messages.StateSucceeded, r.State)
	require.Eventually(t, func() bool {
		ci := e.consumerInfo("w1")
		return ci.Delivered.Consumer == 2 && ci.NumAckPending == 0
	}, waitFor, tick, "both deliveries acked")
	assert.Equal(t, int32(1), calls.Load(), "framework runs of the dispatch")
	// Barrier: a later dispatch through the same consumer (one in flight at
	// a time). A result of the duplicate would have come before its result.
	e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{InvocationID: "after"}})
	r = waitResult(t, results)
	assert.Equal(t, "after", r.InvocationID, "no second result for the duplicate")
}

func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestReadinessFollowsFramework(t *testing.T) {
	e := newEnv(t)
	sock := socketPath(t)
	events := e.events()
	s := e.startSidecar(e.config("w1", sock))
	base := "http://" + s.Addr()
	assert.Equal(t, http.StatusOK, get(t, base+"/livez"), "/livez before the framework exists")
	waitEvent(t, events, "registered", func(ev messages.Event) bool { return ev.Type == messages.EventRegistered })
	assert.Equal(t, http.StatusServiceUnavailable, get(t, base+"/readyz"), "/readyz without a framework")
	stop := serveFramework(t, sock, framework.Echo(framework.EchoOptions{}))
	require.Eventually(t, func() bool { return get(t, base+"/readyz") == http.StatusOK }, waitFor, tick, "/readyz 200 once the framework serves")
	waitEvent(t, events, "ready heartbeat", func(ev messages.Event) bool { return ev.Type == messages.EventHeartbeat && ev.Ready })
	stop()
	require.Eventually(t, func() bool { return get(t, base+"/readyz") == http.StatusServiceUnavailable }, waitFor, tick, "/readyz 503 once the framework is gone")
	waitEvent(t, events, "unready heartbeat", func(ev messages.Event) bool { return ev.Type == messages.EventHeartbeat && !ev.Ready })
	// Metrics only on the loopback listener (issue #30): the probe port is
	// reachable from every Pod of the cluster.
	assert.Equal(t, http.StatusNotFound, get(t, base+"/metrics"), "/metrics on the probe port")
	assert.Equal(t, http.StatusOK, get(t, "http://"+s.MetricsAddr()+"/metrics"), "/metrics on loopback")
}

func TestReadinessNeedsNATS(t *testing.T) {
	sock := socketPath(t)
	serveFramework(t, sock, framework.Echo(framework.EchoOptions{}))
	e := &env{t: t}
	cfg := Config{Pool: testPool, WorkerName: "w1", WorkerNamespace: "default", FrameworkSocket: sock, Concurrency: 1,
		NATSURL: "nats://127.0.0.1:1", HTTPAddr: "127.0.0.1:0", ProbeInterval: 50 * time.Millisecond}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s := e.startSidecar(cfg)
	base := "http://" + s.Addr()
	require.Eventually(t, func() bool { return get(t, base+"/livez") == http.StatusOK }, waitFor, tick, "/livez")
	// /readyz checks the framework live, so no wait is needed; the body
	// says the 503 comes from NATS alone, not from the healthy framework.
	resp, err := http.Get(base + "/readyz")
	require.NoError(t, err)
	var st struct{ Framework, NATS string }
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "/readyz with NATS unreachable")
	assert.Equal(t, "ok", st.Framework)
	assert.NotEqual(t, "connected", st.NATS)
	assert.NoError(t, s.stop(), "stop before registering")
}

// TestSIGTERMDrain runs the built binaries: SIGTERM lets the running
// invocation finish, takes no new work, hands back at once what reaches it
// unstarted (nothing is left in its consumer), deregisters and exits 0.
func TestSIGTERMDrain(t *testing.T) {
	sidecarBin, echoBin := binaries(t)
	e := newEnv(t)
	sock := socketPath(t)
	fw := exec.Command(echoBin, "-socket", sock, "-sleep", "1500ms")
	require.NoError(t, fw.Start())
	t.Cleanup(func() { _ = fw.Process.Kill(); _ = fw.Wait() })
	events, results := e.events(), e.results()
	e.workerConsumer("w1", 30*time.Second) // the queue's callout would have

	sc := exec.Command(sidecarBin, "-heartbeat-interval", "200ms", "-probe-interval", "50ms", "-fetch-wait", "200ms", "-shutdown-grace", "10s")
	sc.Env = append(os.Environ(),
		api.EnvPool+"="+testPool, api.EnvWorkerName+"=w1", api.EnvWorkerNamespace+"=default",
		api.EnvFrameworkSocket+"="+sock, api.EnvNATSURL+"="+e.srv.ClientURL(), api.EnvConcurrency+"=2",
		api.EnvSidecarHTTPAddr+"=127.0.0.1:0", api.EnvSidecarMetricsAddr+"=127.0.0.1:0", api.EnvNATSTokenFile+"="+tokenFile(t))
	sc.Stderr = os.Stderr
	require.NoError(t, sc.Start())
	scDone := make(chan error, 1)
	go func() { scDone <- sc.Wait() }()
	t.Cleanup(func() { _ = sc.Process.Kill() })

	waitEvent(t, events, "ready", func(ev messages.Event) bool { return ev.Ready })
	e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{InvocationID: "inflight"}})
	waitEvent(t, events, "started", func(ev messages.Event) bool { return ev.Type == messages.EventStarted })
	require.NoError(t, sc.Process.Signal(syscall.SIGTERM))
	waitEvent(t, events, "draining heartbeat", func(ev messages.Event) bool { return ev.Draining && !ev.Ready })
	e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{InvocationID: "late"}})

	// The late dispatch is handed back at once, while "inflight" still runs.
	hb := waitEvent(t, events, "handed back", func(ev messages.Event) bool { return ev.Type == messages.EventHandedBack })
	assert.Equal(t, "late", hb.InvocationID)
	assert.Equal(t, 1, hb.InFlight, "handed back before the running invocation finished")
	res := waitResult(t, results)
	assert.Equal(t, "inflight", res.InvocationID)
	assert.Equal(t, messages.StateSucceeded, res.State, res.Error)
	waitEvent(t, events, "deregistered", func(ev messages.Event) bool { return ev.Type == messages.EventDeregistered })
	select {
	case err := <-scDone:
		assert.NoError(t, err, "sidecar exit")
	case <-time.After(15 * time.Second):
		t.Fatal("sidecar did not exit after SIGTERM")
	}
	select {
	case r := <-results:
		t.Errorf("work taken after SIGTERM: %+v", r.Result)
	default:
	}
	// Nothing is left in the durable consumer for a restarted sidecar of
	// this Pod to run: the late dispatch was termed when handed back.
	ci := e.consumerInfo("w1")
	assert.Zero(t, ci.NumPending+uint64(ci.NumAckPending), "nothing left in the consumer")
}

// TestPythonFramework runs the sidecar against the Python reference
// framework, so both sides of the contract are checked together.
func TestPythonFramework(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	e := newEnv(t)
	sock := socketPath(t)
	fw := exec.Command(py, "../framework/python/echo.py")
	fw.Env = append(os.Environ(), api.EnvFrameworkSocket+"="+sock)
	require.NoError(t, fw.Start())
	t.Cleanup(func() { _ = fw.Process.Kill(); _ = fw.Wait() })
	events, results := e.events(), e.results()
	e.startSidecar(e.config("py", sock))
	waitEvent(t, events, "ready", func(ev messages.Event) bool { return ev.Ready })
	for _, tt := range []struct {
		id    string
		attrs map[string]string
		state messages.State
	}{{"py-ok", nil, messages.StateSucceeded}, {"py-fail", map[string]string{"echo.fail": "nope"}, messages.StateFailed}} {
		e.dispatch("py", messages.Dispatch{Invocation: messages.Invocation{InvocationID: tt.id, Attributes: tt.attrs, Payload: json.RawMessage(`[1,2]`)}})
		res := waitResult(t, results)
		require.Equal(t, tt.id, res.InvocationID)
		require.Equal(t, tt.state, res.State)
		require.NotNil(t, res.Response)
		if tt.state == messages.StateSucceeded {
			var echoed framework.Request
			require.NoError(t, json.Unmarshal(res.Response.Body, &echoed), "python echo body")
			assert.Equal(t, "py", echoed.WorkerName)
			assert.JSONEq(t, "[1,2]", string(echoed.Payload))
		}
	}
}

// pythonFastAPIRaises is a FastAPI app under the SDK's wrap_asgi whose
// route raises: FastAPI answers a bare 500 and re-raises the exception.
const pythonFastAPIRaises = `
import uvicorn, fastapi, runplane_framework as rf
api = fastapi.FastAPI()

@api.post("/predict")
async def predict() -> None:
    raise ValueError("prompt too long for this model")

uvicorn.run(rf.wrap_asgi(api, default_path="/predict"), uds=rf.config_from_env().socket_path, log_level="critical")
`

// TestPythonFastAPIExceptionReachesCaller: an exception in a FastAPI app
// under wrap_asgi fails the invocation with the exception's type and
// message, as a plain handler's does, not with the framework socket's path
// and a bare HTTP 500.
func TestPythonFastAPIExceptionReachesCaller(t *testing.T) {
	py := "/usr/bin/python3" // Debian's: hack/install-deps.sh installs uvicorn and FastAPI for it
	if exec.Command(py, "-c", "import uvicorn, fastapi").Run() != nil {
		t.Skip("Debian python3 with uvicorn and FastAPI not installed")
	}
	e := newEnv(t)
	sock := socketPath(t)
	fw := exec.Command(py, "-c", pythonFastAPIRaises)
	fw.Env = append(os.Environ(), api.EnvFrameworkSocket+"="+sock, "PYTHONPATH=../framework/python")
	require.NoError(t, fw.Start())
	t.Cleanup(func() { _ = fw.Process.Kill(); _ = fw.Wait() })
	events, results := e.events(), e.results()
	e.startSidecar(e.config("fa", sock))
	waitEvent(t, events, "ready", func(ev messages.Event) bool { return ev.Ready })
	e.dispatch("fa", messages.Dispatch{Invocation: messages.Invocation{InvocationID: "fa-raise", Payload: json.RawMessage(`{}`)}})
	res := waitResult(t, results)
	require.Equal(t, messages.StateFailed, res.State)
	assert.Contains(t, res.Error, "ValueError: prompt too long for this model")
	assert.NotContains(t, res.Error, sock, "the caller sees the app's exception, not the worker's socket")
}

// tokenFile is a NATS token file for a sidecar binary: the test server has
// no auth and ignores it, but the sidecar refuses to start without one.
func tokenFile(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(p, []byte("unused"), 0o600))
	return p
}

// TestMetricsPortTakenStillWorks: the Pod's loopback is the tenant's too; a
// container holding the metrics port costs the metrics, not the worker.
func TestMetricsPortTakenStillWorks(t *testing.T) {
	e := newEnv(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { taken.Close() })
	cfg := e.config("w1", socketPath(t))
	cfg.MetricsAddr = taken.Addr().String()
	s := e.startSidecar(cfg)
	assert.Empty(t, s.MetricsAddr())
	assert.Equal(t, http.StatusOK, get(t, "http://"+s.Addr()+"/livez"))
}
