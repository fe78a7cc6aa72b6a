// Package queuetest runs the queue service in-process on an embedded
// nats-server, for the tests that need "NATS + queue" (queue,
// queue/kubetest, the e2e suites): one place that starts the server, runs
// queue.Run and waits for its listeners. A NATS in runplane's operator mode
// with the auth callout comes from test/natsauth (pass its URL, trust file
// and TLS in the queue.Config), a plain JetStream one from
// natsauth.JetStream. The workers are sidecar/sidecartest's.
package queuetest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/stream"
	"github.com/runplane/runplane/test/natsauth"
)

// CalloutNATS runs a nats-server in runplane's operator mode
// (test/natsauth) for the queue's default stream: the queue's user is its
// only one, every other client goes through the queue's auth callout (pass
// the server's URL, Auth.TrustFile and Auth.Client in the queue.Config).
func CalloutNATS(t testing.TB, extra natsauth.Extra) (*server.Server, natsauth.Auth) {
	t.Helper()
	dir := t.TempDir()
	a, err := natsauth.Write(filepath.Join(dir, "auth"))
	require.NoError(t, err)
	srv, err := natsauth.StartWith(filepath.Join(dir, "nats"), "127.0.0.1", a, queue.WorkerExports(stream.Config{}), extra)
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	return srv, a
}

// Queue is a queue service running in-process.
type Queue struct {
	// Base is the ingress's URL (http://host:port).
	Base string
	// MetricsURL is /metrics on the metrics listener (TLS); "" when the
	// Config had no MetricsListen.
	MetricsURL string
	stop       func() error
	// expect is an error Run may end with (Expect).
	expect error
}

// Expect lets Run end with an error that is target (errors.Is) rather
// than none: a replica the test makes fail.
func (q *Queue) Expect(target error) { q.expect = target }

// Run runs queue.Run(cfg) until the test ends (or Stop) and returns once
// its ingress (unless cfg.DisableIngress) and metrics listener (when
// cfg.MetricsListen is set) listen. cfg.Listen defaults to a free loopback port, cfg.Logger to
// none (stderr with -v) and cfg.Registry to one of this queue's own (tests
// run several replicas in one process and count each one's series; the
// binary's is controller-runtime's); cfg.OnListen and cfg.OnMetricsListen
// are Run's.
func Run(t testing.TB, cfg queue.Config) *Queue {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		if testing.Verbose() {
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
	}
	addr, metricsAddr := make(chan string, 1), make(chan string, 1)
	cfg.OnListen = func(a string) { addr <- a }
	cfg.OnMetricsListen = func(a string) { metricsAddr <- a }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- queue.Run(ctx, cfg) }()
	var once sync.Once
	var runErr error
	q := &Queue{stop: func() error { once.Do(func() { cancel(); runErr = <-done }); return runErr }}
	t.Cleanup(func() {
		if err := q.Stop(); q.expect == nil || !errors.Is(err, q.expect) {
			assert.NoError(t, err, "queue.Run")
		}
	})
	timeout := time.After(30 * time.Second)
	for (!cfg.DisableIngress && q.Base == "") || (cfg.MetricsListen != "" && q.MetricsURL == "") {
		select {
		case a := <-addr:
			q.Base = "http://" + a
		case a := <-metricsAddr:
			q.MetricsURL = "https://" + a + "/metrics"
		case err := <-done:
			done <- err // for Stop, in the cleanup
			require.FailNow(t, "queue.Run returned", "%v", err)
		case <-timeout:
			require.FailNow(t, "the queue did not listen within 30s")
		}
	}
	return q
}

// Stop stops the queue service and returns queue.Run's error.
func (q *Queue) Stop() error { return q.stop() }
