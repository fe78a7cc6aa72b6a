package sidecar

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/runplane/runplane/test/runplanebin"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/natstls"
	"github.com/runplane/runplane/internal/pki"
	"github.com/runplane/runplane/test/natsauth"
)

const (
	testPool = "echo"
	testNS   = "default"
)

var subjects = messages.Subjects{Prefix: api.DefaultSubjectPrefix}

// env is one test's NATS server, stream and client connection.
type env struct {
	t   testing.TB
	srv *server.Server
	nc  *nats.Conn
	js  jetstream.JetStream
	// tls is how clients verify srv (zero: no TLS).
	tls natstls.Client
}

func newEnv(t testing.TB) *env { return newEnvTLS(t, false) }

// newEnvTLS is newEnv, with useTLS on a NATS that serves verified TLS first
// as runplane's does (internal/natstls); sidecars from config verify it.
func newEnvTLS(t testing.TB, useTLS bool) *env {
	t.Helper()
	var client natstls.Client
	var serverTLS *tls.Config
	if useTLS {
		const name = "nats.test"
		b, err := pki.Renew(nil, pki.Options{Name: "test-nats", DNSNames: []string{name}})
		require.NoError(t, err)
		cert, err := b.TLSCertificate()
		require.NoError(t, err)
		serverTLS = &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12}
		client = natstls.Client{CA: b.CABundle, ServerName: name}
	}
	srv := natsauth.JetStream(t, func(o *server.Options) { o.TLSConfig, o.TLSHandshakeFirst = serverTLS, serverTLS != nil })
	tlsOpts, err := client.Options()
	require.NoError(t, err)
	nc := natsauth.Connect(t, srv.ClientURL(), tlsOpts...)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: api.DefaultStreamName, Subjects: subjects.StreamSubjects()})
	require.NoError(t, err, "create stream")
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: messages.ResultsStreamName(api.DefaultStreamName), Subjects: subjects.ResultStreamSubjects()})
	require.NoError(t, err, "create results stream")
	return &env{t: t, srv: srv, nc: nc, js: js, tls: client}
}

// socketPath is short enough for the 108-byte limit of unix socket paths.
func socketPath(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rpsc")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "framework.sock")
}

// serveFramework serves fn on sock until the returned stop is called (or
// the test ends).
func serveFramework(t testing.TB, sock string, fn framework.HandlerFunc) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	ln, err := framework.ListenUnix(sock)
	require.NoError(t, err)
	srv := &http.Server{Handler: framework.NewHandler(fn)}
	go func() { defer close(done); _ = srv.Serve(ln) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			srv.Close()
			<-done
		})
	}
	_ = ctx
	t.Cleanup(stop)
	return stop
}

func (e *env) config(worker, sock string) Config {
	return Config{
		Pool:              testPool,
		WorkerName:        worker,
		WorkerNamespace:   testNS,
		FrameworkSocket:   sock,
		Concurrency:       1,
		NATSURL:           e.srv.ClientURL(),
		NATSCA:            e.tls.CA,
		NATSServerName:    e.tls.ServerName,
		HTTPAddr:          "127.0.0.1:0",
		MetricsAddr:       "127.0.0.1:0",
		HeartbeatInterval: 200 * time.Millisecond,
		ProbeInterval:     50 * time.Millisecond,
		FetchWait:         200 * time.Millisecond,
		AckWait:           5 * time.Second,
		ShutdownGrace:     5 * time.Second,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// running is a sidecar started in-process.
type running struct {
	*Sidecar
	stop func() error // SIGTERM equivalent; returns Run's error
}

func (e *env) startSidecar(cfg Config) *running {
	e.t.Helper()
	s, err := New(cfg)
	require.NoError(e.t, err, "new sidecar")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-errc:
			case <-time.After(30 * time.Second):
				runErr = fmt.Errorf("sidecar did not stop")
			}
		})
		return runErr
	}
	e.t.Cleanup(func() { _ = stop() })
	return &running{Sidecar: s, stop: stop}
}

// events subscribes to the pool's metrics subject.
func (e *env) events() <-chan messages.Event {
	ch := make(chan messages.Event, 1024)
	sub, err := e.nc.Subscribe(subjects.Metrics(testNS, testPool)+".*", func(m *nats.Msg) {
		var ev messages.Event
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			e.t.Errorf("bad event %s: %v", m.Data, err)
			return
		}
		select {
		case ch <- ev:
		default:
		}
	})
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(e.t, e.nc.Flush())
	return ch
}

// results subscribes to the pool's result subject (core NATS sees what is
// published into the stream), keeping the Nats-Msg-Id.
type gotResult struct {
	messages.Result
	MsgID string
}

func (e *env) results() <-chan gotResult {
	ch := make(chan gotResult, 1024)
	sub, err := e.nc.Subscribe(subjects.Result(testNS, testPool), func(m *nats.Msg) {
		var r messages.Result
		if err := json.Unmarshal(m.Data, &r); err != nil {
			e.t.Errorf("bad result %s: %v", m.Data, err)
			return
		}
		ch <- gotResult{Result: r, MsgID: m.Header.Get(jetstream.MsgIDHeader)}
	})
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(e.t, e.nc.Flush())
	return ch
}

func (e *env) dispatch(worker string, d messages.Dispatch) {
	e.t.Helper()
	d.Pool, d.Worker = testPool, worker
	if d.Attempt == 0 {
		d.Attempt = 1
	}
	if d.Mode == "" {
		d.Mode = messages.ModeAsync
	}
	if d.DispatchedAt.IsZero() {
		d.DispatchedAt = time.Now().UTC()
	}
	data, err := json.Marshal(d)
	require.NoError(e.t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = e.js.Publish(ctx, subjects.Dispatch(testNS, testPool, worker), data, jetstream.WithMsgID(messages.DispatchMsgID(testNS, d.InvocationID, d.Attempt)))
	require.NoError(e.t, err, "publish dispatch")
}

func waitEvent(t *testing.T, ch <-chan messages.Event, what string, match func(messages.Event) bool) messages.Event {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case ev := <-ch:
			if match(ev) {
				return ev
			}
		case <-deadline:
			t.Fatalf("timed out waiting for event: %s", what)
		}
	}
}

func waitResult(t *testing.T, ch <-chan gotResult) gotResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("timed out waiting for a result")
	}
	return gotResult{}
}

// waitFor and tick bound every poll of this package's tests.
const (
	waitFor = 15 * time.Second
	tick    = 20 * time.Millisecond
)

// workerConsumer creates worker's dispatch consumer the way the queue does
// when its auth callout admits the worker: a sidecar with a NATS
// credential only binds to it.
func (e *env) workerConsumer(worker string, ackWait time.Duration) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := e.js.CreateOrUpdateConsumer(ctx, api.DefaultStreamName, jetstream.ConsumerConfig{
		Durable:       messages.ConsumerName(testNS, testPool, worker),
		FilterSubject: subjects.Dispatch(testNS, testPool, worker),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	require.NoError(e.t, err, "worker consumer")
}

func (e *env) consumerInfo(worker string) *jetstream.ConsumerInfo {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := e.js.Consumer(ctx, api.DefaultStreamName, messages.ConsumerName(testNS, testPool, worker))
	require.NoError(e.t, err, "consumer")
	info, err := c.Info(ctx)
	require.NoError(e.t, err)
	return info
}

var (
	buildOnce sync.Once
	scratch   string // where the binaries are built when make test did not (TestMain removes it)
	binDir    string
	buildErr  error
)

// binaries returns runplane-sidecar and framework-echo, resolved (make
// test's build) or built once per test binary.
func binaries(t testing.TB) (sidecarBin, echoBin string) {
	t.Helper()
	buildOnce.Do(func() {
		if scratch, buildErr = os.MkdirTemp("", "rpbin"); buildErr != nil {
			return
		}
		binDir, buildErr = runplanebin.Dir(context.Background(), scratch, "runplane-sidecar", "framework-echo")
	})
	require.NoError(t, buildErr)
	return filepath.Join(binDir, "runplane-sidecar"), filepath.Join(binDir, "framework-echo")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if scratch != "" {
		os.RemoveAll(scratch)
	}
	os.Exit(code)
}

// sidecarProcess returns a start function for the runplane-sidecar binary
// as worker of the test pool, configured by the env the webhook injects
// (plus extraEnv), with short probe, fetch and ack-wait periods. Each
// process is killed when the test ends.
func (e *env) sidecarProcess(bin, worker, sock string, extraEnv ...string) func() *exec.Cmd {
	t := e.t
	envv := append(os.Environ(),
		api.EnvPool+"="+testPool, api.EnvWorkerName+"="+worker, api.EnvWorkerNamespace+"="+testNS,
		api.EnvFrameworkSocket+"="+sock, api.EnvNATSURL+"="+e.srv.ClientURL(), api.EnvSidecarHTTPAddr+"=127.0.0.1:0", api.EnvSidecarMetricsAddr+"=127.0.0.1:0",
		api.EnvNATSTokenFile+"="+tokenFile(t))
	envv = append(envv, extraEnv...)
	return func() *exec.Cmd {
		c := exec.Command(bin, "-probe-interval", "50ms", "-fetch-wait", "200ms", "-ack-wait", "1s")
		c.Env = envv
		require.NoError(t, c.Start())
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
		return c
	}
}
