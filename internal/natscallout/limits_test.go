package natscallout

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/clock"

	"github.com/runplane/runplane/internal/natstls"
)

// TestWorkerLimitsOnRealServer: nats-server enforces the limits of the
// callout's user JWT on the worker's connection: a subscription beyond
// its bound (the configured one plus one per unit of concurrency) is
// refused while the connection stays, and a message beyond the payload
// bound is refused — by the client, told the bound at connect, and by the
// server for a client that ignores it.
func TestWorkerLimitsOnRealServer(t *testing.T) {
	const (
		subs        = 4
		concurrency = 2
		payload     = 8 << 10
	)
	srv, a := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	alice := Identity{Name: "team-a/echo-1", Namespace: "team-a", Pool: "echo", Worker: "echo-1",
		Expires: time.Now().Add(time.Hour), Concurrency: concurrency}
	internal, _, _ := serveCallout(t, ctx, srv, a, &Responder{
		MaxTTL: time.Hour, Clock: clock.RealClock{},
		Auth:   tokens{"alice": alice},
		Limits: Limits{Subscriptions: subs, Payload: payload},
	}, ServeOptions{})
	results, err := internal.SubscribeSync("rs.result.team-a.echo")
	require.NoError(t, err)
	require.NoError(t, internal.Flush())

	t.Run("subscriptions", func(t *testing.T) {
		errs := make(chan error, 4)
		worker, err := dial(srv.ClientURL(), a.TLSOption(), nats.Token("alice"), nats.NoReconnect(),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
		require.NoError(t, err)
		defer worker.Close()
		var held []*nats.Subscription
		for range subs + concurrency {
			s, err := worker.SubscribeSync("rs.cancel.team-a.echo.echo-1")
			require.NoError(t, err)
			held = append(held, s)
		}
		require.NoError(t, worker.Flush())
		_, err = worker.SubscribeSync("rs.cancel.team-a.echo.echo-1")
		require.NoError(t, err) // refused asynchronously: the error below is the verdict
		require.NoError(t, worker.Flush())
		select {
		case err := <-errs:
			require.ErrorIs(t, err, nats.ErrMaxSubscriptionsExceeded, "the first error is for the subscription beyond the bound")
		case <-time.After(5 * time.Second):
			t.Fatal("a subscription beyond the bound was accepted")
		}

		// The connection stays, and every subscription within the bound works.
		require.True(t, worker.IsConnected())
		require.NoError(t, internal.Publish("rs.cancel.team-a.echo.echo-1", []byte("work")))
		for i, s := range held {
			msg, err := s.NextMsg(5 * time.Second)
			require.NoError(t, err, "subscription %d", i)
			assert.Equal(t, "work", string(msg.Data))
		}
		// Every delivery above came after the server handled the refused
		// subscription: an error for any other would be here by now.
		select {
		case err := <-errs:
			t.Fatalf("a second error: %v", err)
		default:
		}
	})

	t.Run("payload", func(t *testing.T) {
		worker, err := dial(srv.ClientURL(), a.TLSOption(), nats.Token("alice"), nats.NoReconnect())
		require.NoError(t, err)
		defer worker.Close()
		// The server announces the user's bound in the INFO after connect,
		// which the sidecar sizes its messages by.
		require.Eventually(t, func() bool { return worker.MaxPayload() == payload }, 5*time.Second, 10*time.Millisecond,
			"the client was told the server's max_payload, not the user's")

		for _, tc := range []struct {
			name    string
			size    int
			wantErr error
		}{
			{name: "at the bound", size: payload},
			{name: "beyond the bound", size: payload + 1, wantErr: nats.ErrMaxPayload},
		} {
			t.Run(tc.name, func(t *testing.T) {
				err := worker.Publish("rs.result.team-a.echo", bytes.Repeat([]byte("r"), tc.size))
				if tc.wantErr != nil {
					require.ErrorIs(t, err, tc.wantErr)
					return
				}
				require.NoError(t, err)
				msg, err := results.NextMsg(5 * time.Second)
				require.NoError(t, err)
				assert.Len(t, msg.Data, tc.size)
			})
		}
	})

	t.Run("payload from a client that ignores the bound", func(t *testing.T) {
		// TLS first, as every client of runplane's NATS.
		ca, err := os.ReadFile(a.Client.CAFile)
		require.NoError(t, err)
		roots, err := natstls.ParseCAs(ca, a.Client.CAFile)
		require.NoError(t, err)
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", srv.Addr().String(),
			&tls.Config{RootCAs: roots, ServerName: a.Client.ServerName})
		require.NoError(t, err)
		defer conn.Close()
		require.NoError(t, conn.SetDeadline(time.Now().Add(20*time.Second)))
		r := bufio.NewReader(conn)
		// readUntil reads protocol lines up to the first with prefix,
		// answering the server's PINGs on the way.
		readUntil := func(prefix string) string {
			t.Helper()
			for {
				line, err := r.ReadString('\n')
				require.NoError(t, err, "waiting for %q", prefix)
				line = strings.TrimRight(line, "\r\n")
				switch {
				case strings.HasPrefix(line, prefix):
					return line
				case line == "PING":
					_, err = conn.Write([]byte("PONG\r\n"))
					require.NoError(t, err)
				case strings.HasPrefix(line, "-ERR"):
					t.Fatalf("waiting for %q: %s", prefix, line)
				}
			}
		}
		readUntil("INFO ")
		_, err = fmt.Fprintf(conn, "CONNECT {\"auth_token\":\"alice\",\"verbose\":false,\"pedantic\":false,\"protocol\":1}\r\nPING\r\n")
		require.NoError(t, err)
		readUntil("PONG")
		// The server may answer and close before the body is all written
		// (TLS reports that write as failed): its answer is the verdict.
		_, _ = fmt.Fprintf(conn, "PUB result.team-a.echo %d\r\n%s\r\n", payload+1, bytes.Repeat([]byte("r"), payload+1))

		// The answer comes at once; a server that took the message says nothing.
		require.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
		line, err := r.ReadString('\n')
		for err == nil && !strings.HasPrefix(line, "-ERR") {
			line, err = r.ReadString('\n')
		}
		require.NoError(t, err, "the server took a message beyond the user's payload bound")
		assert.Equal(t, "-ERR 'Maximum Payload Violation'", strings.TrimRight(line, "\r\n"))
		_, err = results.NextMsg(500 * time.Millisecond)
		require.ErrorIs(t, err, nats.ErrTimeout, "nothing was delivered")
	})
}
