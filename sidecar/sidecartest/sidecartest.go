// Package sidecartest runs the real worker sidecar (package sidecar)
// in-process in front of a framework.HandlerFunc served on its own unix
// socket: one worker Pod, minus the Pod. It is the only worker of the
// tests and benchmarks that need one (queue, queue/kubetest, the e2e
// suites), so the protocol they exercise is the sidecar's own: durable
// consumer, in-progress acks, hand-back on drain, journaled outcomes,
// streamed chunks.
//
// Stop is SIGTERM (the sidecar drains and deregisters); Kill is a crashed
// Pod (its network and framework vanish, nothing more is heard of it).
package sidecartest

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/natstls"
	"github.com/runplane/runplane/sidecar"
)

// Config describes one worker.
type Config struct {
	// NATSURL is the NATS to connect to (one server: Kill cuts the
	// connections to it, and a client told of other servers of a cluster
	// could reach them directly); TLS is how its certificate is verified
	// (zero: plain NATS).
	NATSURL string
	TLS     natstls.Client
	// TokenFile is the worker's credential on a NATS with runplane's auth
	// callout (a Pod-bound token), with JSAPIPrefix api.WorkerJSAPIPrefix.
	// Empty: no credential, and the sidecar creates its own consumer.
	TokenFile   string
	JSAPIPrefix string
	// SubjectPrefix and StreamName default to the api defaults.
	SubjectPrefix, StreamName string

	Namespace string // default "default"
	Pool      string
	Name      string
	// Concurrency defaults to 1.
	Concurrency int
	// Heartbeat defaults to 100ms; ShutdownGrace, the drain's bound, to 5s;
	// AckWait is the sidecar's default when zero.
	Heartbeat, ShutdownGrace, AckWait time.Duration

	// Handler serves the invocations (default Echo); StreamHandler, when
	// set, serves them as a stream instead.
	Handler       framework.HandlerFunc
	StreamHandler framework.StreamFunc
	// Log, when set, records every execution of the framework.
	Log *Log
	// Direct connects straight to NATSURL: no cut in between, so Kill is
	// not available (benchmarks, whose figures should not carry a proxy).
	Direct bool
	// Logger is the sidecar's (default: discarded).
	Logger *slog.Logger
	// SidecarTracer and FrameworkTracer record the sidecar's and the
	// framework's spans (nil: none).
	SidecarTracer, FrameworkTracer trace.TracerProvider
}

// Worker is a running sidecar and its framework.
type Worker struct {
	*sidecar.Sidecar
	name string
	dir  string
	fw   *http.Server
	net  *cut // nil when Direct
	// crash ends the framework's running calls (its container is gone).
	crash context.CancelFunc
	// stop is SIGTERM to the sidecar; done closes when its Run returns.
	stop   context.CancelFunc
	done   chan struct{}
	runErr error
	once   sync.Once
}

// Start runs a worker and returns once the sidecar reports ready (its
// framework healthy, NATS connected, its consumer bound), or ctx ends.
func Start(ctx context.Context, cfg Config) (*Worker, error) {
	cfg.Namespace = cmp.Or(cfg.Namespace, "default")
	cfg.Concurrency = cmp.Or(cfg.Concurrency, 1)
	if cfg.Handler == nil {
		cfg.Handler = Echo
	}
	// Unix socket paths are limited to 108 bytes: not under t.TempDir().
	dir, err := os.MkdirTemp("", "rpw")
	if err != nil {
		return nil, fmt.Errorf("worker %s: socket directory: %w", cfg.Name, err)
	}
	w := &Worker{name: cfg.Name, dir: dir, done: make(chan struct{})}
	ok := false
	defer func() {
		if !ok {
			if w.stop != nil {
				w.stop()
				<-w.done
			}
			w.teardown()
		}
	}()
	if err := w.serveFramework(cfg); err != nil {
		return nil, err
	}
	natsURL := cfg.NATSURL
	if !cfg.Direct {
		// nats://host:port, or tls://host:port from a server with TLS.
		u, err := url.Parse(cfg.NATSURL)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("worker %s: NATS URL %q: want scheme://host:port (one server)", cfg.Name, cfg.NATSURL)
		}
		if w.net, err = newCut(u.Host); err != nil {
			return nil, err
		}
		u.Host = w.net.addr()
		natsURL = u.String()
	}
	ca := cfg.TLS.CA
	if cfg.TLS.CAFile != "" {
		if ca, err = os.ReadFile(cfg.TLS.CAFile); err != nil {
			return nil, fmt.Errorf("worker %s: NATS CA: %w", cfg.Name, err)
		}
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s, err := sidecar.New(sidecar.Config{
		Pool: cfg.Pool, WorkerName: cfg.Name, WorkerNamespace: cfg.Namespace, FrameworkSocket: filepath.Join(dir, "fw.sock"),
		Concurrency: cfg.Concurrency, NATSURL: natsURL, NATSCA: ca, NATSServerName: cfg.TLS.ServerName,
		NATSTokenFile: cfg.TokenFile, JSAPIPrefix: cfg.JSAPIPrefix,
		SubjectPrefix: cmp.Or(cfg.SubjectPrefix, api.DefaultSubjectPrefix), StreamName: cmp.Or(cfg.StreamName, api.DefaultStreamName),
		HTTPAddr: "127.0.0.1:0", HeartbeatInterval: cmp.Or(cfg.Heartbeat, 100*time.Millisecond), ProbeInterval: 50 * time.Millisecond,
		FetchWait: 200 * time.Millisecond, AckWait: cfg.AckWait, ShutdownGrace: cmp.Or(cfg.ShutdownGrace, 5*time.Second),
		Logger: logger.With("worker", cfg.Name), TracerProvider: cfg.SidecarTracer,
	})
	if err != nil {
		return nil, fmt.Errorf("worker %s: %w", cfg.Name, err)
	}
	w.Sidecar = s
	runCtx, stop := context.WithCancel(context.Background())
	w.stop = stop
	go func() { defer close(w.done); w.runErr = s.Run(runCtx) }()
	if err := w.waitReady(ctx); err != nil {
		return nil, err
	}
	ok = true
	return w, nil
}

// Run is Start for a test: the worker stops when the test ends.
func Run(t testing.TB, cfg Config) *Worker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, w.Close(), "worker %s", cfg.Name) })
	return w
}

// serveFramework serves cfg's handler, wrapped so that Kill ends its calls
// and Log sees each, on the worker's socket.
func (w *Worker) serveFramework(cfg Config) error {
	crashed, crash := context.WithCancel(context.Background())
	w.crash = crash
	// bind ends a call's context when the framework crashes.
	// A call that comes in after the crash (the sidecar had its dispatch
	// in hand) is not run: the framework is gone.
	bind := func(ctx context.Context, req framework.Request) (context.Context, func(), error) {
		if crashed.Err() != nil {
			return ctx, func() {}, fmt.Errorf("worker %s: the framework crashed", cfg.Name)
		}
		cfg.Log.add(req.InvocationID, cfg.Name)
		ctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(crashed, cancel)
		return ctx, func() { stop(); cancel() }, nil
	}
	var h http.Handler
	if cfg.StreamHandler != nil {
		h = framework.NewStreamHandler(func(ctx context.Context, req framework.Request, cw framework.ChunkWriter) error {
			ctx, end, err := bind(ctx, req)
			defer end()
			if err != nil {
				return err
			}
			return cfg.StreamHandler(ctx, req, cw)
		})
	} else {
		h = framework.NewHandler(func(ctx context.Context, req framework.Request) (framework.Response, error) {
			ctx, end, err := bind(ctx, req)
			defer end()
			if err != nil {
				return framework.Response{}, err
			}
			return cfg.Handler(ctx, req)
		}, framework.WithTracerProvider(cfg.FrameworkTracer))
	}
	ln, err := framework.ListenUnix(filepath.Join(w.dir, "fw.sock"))
	if err != nil {
		return fmt.Errorf("worker %s: %w", cfg.Name, err)
	}
	w.fw = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = w.fw.Serve(ln) }() // ends with Close
	return nil
}

// waitReady polls the sidecar's /readyz, the kubelet's readiness probe.
func (w *Worker) waitReady(ctx context.Context) error {
	client := &http.Client{Timeout: 2 * time.Second}
	err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		select {
		case <-w.done:
			return false, fmt.Errorf("the sidecar stopped before it was ready: %w", w.runErr)
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+w.Addr()+"/readyz", nil)
		if err != nil {
			return false, err
		}
		r, err := client.Do(req)
		if err != nil {
			return false, nil //nolint:nilerr // not listening yet: poll again
		}
		return r.StatusCode == http.StatusOK, r.Body.Close()
	})
	if err != nil {
		return fmt.Errorf("worker %s not ready: %w", w.name, err)
	}
	return nil
}

// Stop is SIGTERM: the sidecar stops taking work, lets its running
// invocations finish (within the shutdown grace), hands back what it had
// not started, deregisters and returns Run's error.
func (w *Worker) Stop() error {
	w.stop()
	<-w.done
	return w.runErr
}

// Kill makes the worker vanish as a crashed Pod does: its NATS connections
// are cut (no result, heartbeat or deregistration is heard of again) and
// its framework's calls end. The sidecar's remains wind down in the
// background; Close waits for them.
func (w *Worker) Kill() error {
	if w.net == nil {
		return fmt.Errorf("worker %s: a Direct worker cannot be killed", w.name)
	}
	if err := w.net.close(); err != nil {
		return fmt.Errorf("worker %s: cut its network: %w", w.name, err)
	}
	w.crash()
	if err := w.fw.Close(); err != nil {
		return fmt.Errorf("worker %s: stop its framework: %w", w.name, err)
	}
	w.stop()
	return nil
}

// Close ends the worker whatever its state, quickly: its framework's calls
// end (failed), the sidecar drains what is left and everything is released.
func (w *Worker) Close() error {
	w.crash()
	err := w.Stop()
	w.teardown()
	return err
}

// teardown releases the framework, the cut and the socket directory.
func (w *Worker) teardown() {
	w.once.Do(func() {
		if w.crash != nil {
			w.crash()
		}
		if w.fw != nil {
			_ = w.fw.Close()
		}
		if w.net != nil {
			_ = w.net.close()
		}
		_ = os.RemoveAll(w.dir)
	})
}
