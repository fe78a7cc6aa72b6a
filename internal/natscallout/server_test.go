package natscallout

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/clock"
)

// startServer runs a nats-server in config mode, with JetStream, whose
// only configured user is runplane's own; every other client goes through
// the callout.
func startServer(t *testing.T, issuerPub string) *server.Server {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(conf, fmt.Appendf(nil, `
listen: "127.0.0.1:-1"
jetstream { store_dir: %q }
accounts { RUNPLANE { jetstream: enabled, users: [ { user: runplane, password: internal } ] } }
authorization { timeout: 10, auth_callout { issuer: %q, account: RUNPLANE, auth_users: [ runplane ] } }
`, filepath.Join(dir, "js"), issuerPub), 0o600))
	opts, err := server.ProcessConfigFile(conf)
	require.NoError(t, err)
	opts.NoSigs = true
	srv, err := server.NewServer(opts)
	require.NoError(t, err)
	go srv.Start()
	require.True(t, srv.ReadyForConnections(10*time.Second), "nats-server did not start")
	t.Cleanup(srv.Shutdown)
	return srv
}

// serveCallout runs the responder on the internal user's connection and
// returns it once the server routes requests to it.
func serveCallout(t *testing.T, ctx context.Context, srv *server.Server, r *Responder) (*nats.Conn, *Metrics, <-chan error) {
	t.Helper()
	internal, err := nats.Connect(srv.ClientURL(), nats.UserInfo("runplane", "internal"))
	require.NoError(t, err)
	t.Cleanup(internal.Close)
	m := NewMetrics(nil)
	served := make(chan error, 1)
	go func() {
		served <- Serve(ctx, internal, r, m, slog.New(slog.NewTextHandler(io.Discard, nil)), ServeOptions{})
	}()
	// Serve subscribes asynchronously; the subscription showing on the
	// server is the barrier before clients connect.
	require.Eventually(t, func() bool { return srv.NumSubscriptions() > 0 }, 5*time.Second, 10*time.Millisecond)
	return internal, m, served
}

func newIssuer(t *testing.T) (nkeys.KeyPair, string) {
	t.Helper()
	issuer, err := nkeys.CreateAccount()
	require.NoError(t, err)
	pub, err := issuer.PublicKey()
	require.NoError(t, err)
	return issuer, pub
}

// TestCalloutOnRealServer connects clients through a real nats-server:
// a known worker token gets exactly its subjects, the server enforces them,
// and anything else is refused at connect.
func TestCalloutOnRealServer(t *testing.T) {
	issuer, issuerPub := newIssuer(t)
	srv := startServer(t, issuerPub)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	internal, m, served := serveCallout(t, ctx, srv, &Responder{
		Issuer: issuer, Account: "RUNPLANE", Permit: workerPermit, MaxTTL: time.Hour,
		Auth: tokens{"alice": {Name: "team-a/echo-1", Namespace: "team-a", Pool: "echo", Worker: "echo-1",
			Expires: time.Now().Add(time.Hour)}},
		Clock: clock.RealClock{},
	})

	t.Run("refused credentials", func(t *testing.T) {
		for _, opt := range []nats.Option{nats.Token("mallory"), nats.Token(""), nats.UserInfo("runplane", "wrong")} {
			// A generous connect timeout: the refusal, not a loaded machine, is the verdict.
			_, err := dial(srv.ClientURL(), opt, nats.NoReconnect(), nats.Timeout(10*time.Second))
			require.Error(t, err)
			assert.Contains(t, strings.ToLower(err.Error()), "authorization violation")
		}
		assert.GreaterOrEqual(t, testutil.ToFloat64(m.Answers.WithLabelValues("refused", ReasonOther)), 2.0)
	})

	t.Run("worker gets exactly its subjects", func(t *testing.T) {
		violations := make(chan error, 4)
		worker, err := dial(srv.ClientURL(), nats.Token("alice"), nats.NoReconnect(),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
		require.NoError(t, err)
		defer worker.Close()
		assert.Equal(t, 1.0, testutil.ToFloat64(m.Answers.WithLabelValues("admitted", ReasonReviewed)))

		// Its own dispatch subject: the internal user's message arrives.
		own, err := worker.SubscribeSync("dispatch.team-a.echo.echo-1")
		require.NoError(t, err)
		require.NoError(t, worker.Flush())
		require.NoError(t, internal.Publish("dispatch.team-a.echo.echo-1", []byte("work")))
		msg, err := own.NextMsg(5 * time.Second)
		require.NoError(t, err)
		assert.Equal(t, "work", string(msg.Data))

		// Its result subject: the internal user receives what it publishes.
		results, err := internal.SubscribeSync("result.team-a.echo")
		require.NoError(t, err)
		require.NoError(t, internal.Flush())
		require.NoError(t, worker.Publish("result.team-a.echo", []byte("done")))
		msg, err = results.NextMsg(5 * time.Second)
		require.NoError(t, err)
		assert.Equal(t, "done", string(msg.Data))

		// Another tenant's dispatches and results: the server says no.
		_, err = worker.SubscribeSync("dispatch.team-b.echo.>")
		require.NoError(t, err) // the violation arrives asynchronously
		require.NoError(t, worker.Flush())
		require.ErrorContains(t, <-violations, `Permissions Violation for Subscription to "dispatch.team-b.echo.>"`)
		require.NoError(t, worker.Publish("result.team-b.echo", []byte("forged")))
		require.NoError(t, worker.Flush())
		require.ErrorContains(t, <-violations, `Permissions Violation for Publish to "result.team-b.echo"`)
	})

	cancel()
	require.NoError(t, <-served)
}

// dial is nats.Connect, again when the connect lost a protocol race:
// while the callout answers, nats-server may send its first PING before
// the PONG the client waits for, and nats.go then fails the connect with
// "expected 'PONG', got 'PING'" (seen about once in 20 runs on a loaded
// machine). That connect may never reach the callout; the verdict the
// tests want is the callout's, so they try again.
func dial(url string, opts ...nats.Option) (*nats.Conn, error) {
	for attempt := 0; ; attempt++ {
		nc, err := nats.Connect(url, opts...)
		if err == nil || attempt == 4 || !strings.Contains(err.Error(), "expected 'PONG', got 'PING'") {
			return nc, err
		}
	}
}
