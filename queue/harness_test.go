package queue_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/queue/activator"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/natstls"
	"github.com/runplane/runplane/internal/pki"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/queuetest"
	"github.com/runplane/runplane/queue/stream"
	"github.com/runplane/runplane/sidecar/sidecartest"
	"github.com/runplane/runplane/test/natsauth"
	"github.com/runplane/runplane/test/scrape"
)

const testPool = "echo"

type env struct {
	t        testing.TB
	ns       *server.Server
	storeDir string
	port     int
	base     string
	// metricsURL is the queue's /metrics (its own listener, TLS).
	metricsURL string
	nc         *nats.Conn
	js         jetstream.JetStream
	cfg        queue.Config
	subj       messages.Subjects
	// natsTLS is how clients verify the NATS (zero: plain).
	natsTLS natstls.Client
	log     *sidecartest.Log
	stop    func()

	workersMu sync.Mutex
	workers   map[string]*sidecartest.Worker

	// tracers of the workers' sidecars and frameworks (nil: none).
	sidecarTP, frameworkTP trace.TracerProvider
}

// startNATS restarts the test's NATS on its store dir and port.
func startNATS(t testing.TB, dir string, port int) *server.Server {
	return natsauth.JetStream(t, func(o *server.Options) { o.StoreDir, o.Port = dir, port })
}

func (e *env) natsURL() string { return e.ns.ClientURL() }

// newEnv starts an embedded NATS and the queue service in-process.
func newEnv(t testing.TB, mutate func(*queue.Config)) *env {
	return newEnvTLS(t, false, mutate)
}

// newEnvTLS is newEnv, with useTLS on a NATS that serves verified TLS
// first as runplane's does (internal/natstls): the queue, the test's
// connection and the workers on it dial TLS (benchmarks compare).
func newEnvTLS(t testing.TB, useTLS bool, mutate func(*queue.Config)) *env {
	return newEnvNATS(t, natsOptions{tls: useTLS}, mutate)
}

// natsOptions choose how the test's NATS runs.
type natsOptions struct {
	tls bool
	// syncAlways: JetStream fsyncs every write before acknowledging it
	// (sync_interval always, natssync.Default, the chart's); otherwise
	// JetStream's default, a sync every 2 minutes.
	syncAlways bool
}

// newEnvNATS is newEnv on a NATS run as no says.
func newEnvNATS(t testing.TB, no natsOptions, mutate func(*queue.Config)) *env {
	t.Helper()
	useTLS := no.tls
	e := &env{t: t, storeDir: t.TempDir(), log: sidecartest.NewLog()}
	var client natstls.Client
	e.ns = natsauth.JetStream(t, func(o *server.Options) {
		o.StoreDir, o.SyncAlways = e.storeDir, no.syncAlways
		if !useTLS {
			return
		}
		const name = "nats.bench"
		b, err := pki.Renew(nil, pki.Options{Name: "bench-nats", DNSNames: []string{name}})
		require.NoError(t, err)
		cert, err := b.TLSCertificate()
		require.NoError(t, err)
		o.TLSConfig, o.TLSHandshakeFirst = &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12}, true
		client = natstls.Client{CA: b.CABundle, ServerName: name}
	})
	e.natsTLS = client
	e.port = e.ns.Addr().(*net.TCPAddr).Port
	tlsOpts, err := client.Options()
	require.NoError(t, err)
	nc, err := nats.Connect(e.natsURL(), append(tlsOpts, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	e.nc = nc
	e.js, _ = jetstream.New(nc)
	e.cfg = queue.Config{
		NATS: queue.NATS{URL: e.natsURL(), Client: client}, InsecureDisableCallerAuth: true,
		Listen:        "127.0.0.1:0",
		MetricsListen: "127.0.0.1:0",
		StaticPools:   []string{testPool, "other"},
		Stream:        stream.Config{DuplicateWindow: metav1.Duration{Duration: time.Second}, RecordTTL: metav1.Duration{Duration: time.Hour}},
		Decisions:     activator.Decisions{Workers: activator.Workers{HeartbeatTimeout: metav1.Duration{Duration: time.Second}}, Backoff: 100 * time.Millisecond},
		Tick:          50 * time.Millisecond,
	}
	if mutate != nil {
		mutate(&e.cfg)
	}
	e.subj = messages.Subjects{Prefix: e.cfg.Stream.WithDefaults().Prefix}
	e.startQueue()
	return e
}

func (e *env) startQueue() {
	q := queuetest.Run(e.t, e.cfg) // a restart listens on new ports
	e.base, e.metricsURL = q.Base, q.MetricsURL
	e.stop = func() { require.NoError(e.t, q.Stop()) }
	if !e.cfg.DisableActivator {
		e.waitActivator()
	}
}

// waitActivator waits until the activator's consumers are up: before
// traffic.
func (e *env) waitActivator() {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		sc := e.cfg.Stream.WithDefaults()
		for n, s := range map[string]string{"activator-invoke": sc.Stream, "activator-results": sc.ResultsStream} {
			if _, err := e.js.Consumer(context.Background(), s, n); err != nil {
				return false
			}
		}
		return true
	}, 20*time.Second, 10*time.Millisecond, "activator consumers")
}

// worker runs a real sidecar in front of h (nil: echo) as worker name of
// testPool in namespace default.
func (e *env) worker(name string, conc int, h framework.HandlerFunc) *sidecartest.Worker {
	e.t.Helper()
	return e.tenantWorker("default", testPool, name, conc, h)
}

// tenantWorker runs a real sidecar in front of h (nil: echo) as worker
// name of pool ns/poolName; every execution goes to e.log.
func (e *env) tenantWorker(ns, poolName, name string, conc int, h framework.HandlerFunc) *sidecartest.Worker {
	e.t.Helper()
	_, bench := e.t.(*testing.B) // a benchmark's figures carry no proxy (sidecartest.Config.Direct)
	w := sidecartest.Run(e.t, e.workerConfig(sidecartest.Config{Namespace: ns, Pool: poolName, Name: name, Concurrency: conc, Handler: h, Direct: bench}))
	e.workersMu.Lock()
	if e.workers == nil {
		e.workers = map[string]*sidecartest.Worker{}
	}
	e.workers[name] = w
	e.workersMu.Unlock()
	return w
}

// workerConfig is c on this env's NATS and stream, logging to e.log.
func (e *env) workerConfig(c sidecartest.Config) sidecartest.Config {
	sc := e.cfg.Stream.WithDefaults()
	c.NATSURL, c.TLS, c.SubjectPrefix, c.StreamName, c.Log = e.natsURL(), e.natsTLS, sc.Prefix, sc.Stream, e.log
	c.SidecarTracer, c.FrameworkTracer = e.sidecarTP, e.frameworkTP
	if testing.Verbose() {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return c
}

// waitWorkerReady waits until the pool status the activator publishes
// shows worker name of testPool ready.
func (e *env) waitWorkerReady(name string) {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		for _, w := range e.poolStatus().Workers {
			if w.Name == name && w.Ready {
				return true
			}
		}
		return false
	}, 20*time.Second, 20*time.Millisecond, "worker %s ready", name)
}

type resp struct {
	code   int
	header http.Header
	body   map[string]any
	raw    []byte
}

func (e *env) do(method, path string, body any) resp {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	default:
		bb, _ := json.Marshal(b)
		rd = bytes.NewReader(bb)
	}
	req, _ := http.NewRequest(method, e.base+path, rd)
	req.Header.Set("Content-Type", "application/json")
	r, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err, "%s %s: %v", method, path, err)
	defer r.Body.Close()
	raw, _ := io.ReadAll(r.Body)
	out := resp{code: r.StatusCode, header: r.Header, raw: raw}
	_ = json.Unmarshal(raw, &out.body)
	require.NotNil(e.t, out.body, "%s %s: %d non-JSON body %q", method, path, r.StatusCode, raw)
	return out
}

func (e *env) invoke(body map[string]any) resp {
	return e.do("POST", "/v1/namespaces/default/pools/"+testPool+"/invocations", body)
}

func (e *env) record(id string) messages.Record {
	e.t.Helper()
	r := e.do("GET", "/v1/namespaces/default/invocations/"+id, nil)
	var rec messages.Record
	_ = json.Unmarshal(r.raw, &rec)
	return rec
}

// stored is the Record of id as the KV bucket holds it, internal fields
// included (what no answer shows).
func (e *env) stored(id string) messages.Record {
	e.t.Helper()
	kv, err := e.js.KeyValue(context.Background(), e.cfg.Stream.WithDefaults().RecordsBucket)
	require.NoError(e.t, err)
	entry, err := kv.Get(context.Background(), stream.Key("default", id))
	require.NoError(e.t, err)
	var rec messages.Record
	require.NoError(e.t, json.Unmarshal(entry.Value(), &rec))
	return rec
}

func (e *env) waitState(id string, want messages.State, within time.Duration) messages.Record {
	e.t.Helper()
	var rec messages.Record
	require.EventuallyWithT(e.t, func(c *assert.CollectT) {
		rec = e.record(id)
		assert.Equal(c, want, rec.State, "invocation %s (record %+v)", id, rec)
	}, within, 20*time.Millisecond)
	return rec
}

// poolStatus is the pool status the activator last published (zero if none).
func (e *env) poolStatus() messages.PoolStatus {
	e.t.Helper()
	return e.poolStatusOf("default", testPool)
}

// poolStatusOf is the pool status of ns/name the activator last published
// (zero if none).
func (e *env) poolStatusOf(ns, name string) messages.PoolStatus {
	e.t.Helper()
	var info struct {
		Status *messages.PoolStatus `json:"status"`
	}
	require.NoError(e.t, json.Unmarshal(e.do("GET", "/v1/namespaces/"+ns+"/pools/"+name, nil).raw, &info))
	if info.Status == nil {
		return messages.PoolStatus{}
	}
	return *info.Status
}

// quiet is the barrier before asserting that nothing more ran: it waits
// until the activator's consumers and those of the named workers have
// nothing pending or unacked, and the pool status the activator published
// shows nothing queued or in flight. A wrong redelivery would show in one
// of them.
func (e *env) quiet(workers ...string) {
	e.t.Helper()
	ctx := context.Background()
	sc := e.cfg.Stream.WithDefaults()
	consumers := map[string]string{"activator-invoke": sc.Stream, "activator-results": sc.ResultsStream}
	for _, w := range workers {
		consumers[messages.ConsumerName("default", testPool, w)] = sc.Stream
	}
	require.EventuallyWithT(e.t, func(c *assert.CollectT) {
		for n, name := range consumers {
			con, err := e.js.Consumer(ctx, name, n)
			if !assert.NoError(c, err, n) {
				return
			}
			info, err := con.Info(ctx)
			if assert.NoError(c, err, n) {
				assert.Zero(c, info.NumPending, "%s pending", n)
				assert.Zero(c, info.NumAckPending, "%s unacked", n)
			}
		}
		s := e.poolStatus()
		assert.Zero(c, s.Backlog, "backlog")
		assert.Zero(c, s.InFlight, "in flight")
	}, 10*time.Second, 20*time.Millisecond)
}

// watchStates collects every state an invocation's Record passes through.
func (e *env) watchStates(id string) func() []messages.State {
	e.t.Helper()
	kv, err := e.js.KeyValue(context.Background(), e.cfg.Stream.WithDefaults().RecordsBucket)
	require.NoError(e.t, err)
	w, err := kv.Watch(context.Background(), stream.Key("default", id))
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = w.Stop() })
	ch := make(chan messages.State, 64)
	go func() {
		for en := range w.Updates() {
			if en == nil || en.Operation() != jetstream.KeyValuePut {
				continue
			}
			if r, err := stream.Decode(en.Value()); err == nil {
				ch <- r.State
			}
		}
	}()
	return func() []messages.State {
		var out []messages.State
		for {
			select {
			case s := <-ch:
				if len(out) == 0 || out[len(out)-1] != s {
					out = append(out, s)
				}
			case <-time.After(200 * time.Millisecond):
				return out
			}
		}
	}
}

// gate is a handler that blocks until released (or cancelled).
type gate struct {
	release   chan struct{}
	started   chan string
	cancelled chan string
}

func newGate() *gate {
	return &gate{release: make(chan struct{}), started: make(chan string, 16), cancelled: make(chan string, 16)}
}

// next returns the next invocation the gate's worker started.
func (g *gate) next(t testing.TB) string {
	t.Helper()
	select {
	case id := <-g.started:
		return id
	case <-time.After(10 * time.Second):
		require.FailNow(t, "no invocation started within 10s")
		return ""
	}
}

func (g *gate) handler(ctx context.Context, req framework.Request) (framework.Response, error) {
	g.started <- req.InvocationID
	select {
	case <-g.release:
		return sidecartest.Echo(ctx, req)
	case <-ctx.Done():
		g.cancelled <- req.InvocationID
		return framework.Response{}, ctx.Err()
	}
}

func httpGet(url string) (string, error) {
	r, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	return string(b), err
}

// metrics reads the queue's /metrics (served to anyone here: no Kubernetes
// to authenticate a scraper).
func (e *env) metrics() (string, error) {
	code, body, err := scrape.Get(e.metricsURL, "")
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("GET %s: %d %s", e.metricsURL, code, body)
	}
	return body, err
}

func httpClient() *http.Client { return &http.Client{Timeout: 5 * time.Second} }

func stringsReader(s string) io.Reader { return bytes.NewBufferString(s) }
