package natscallout

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

// blocking authenticates "slow-*" tokens only once released (or its
// context ends), and the rest from ids at once.
type blocking struct {
	ids      tokens
	inFlight atomic.Int32
	release  chan struct{}
}

func (b *blocking) Authenticate(ctx context.Context, token string) (Identity, error) {
	if !strings.HasPrefix(token, "slow-") {
		return b.ids.Authenticate(ctx, token)
	}
	b.inFlight.Add(1)
	defer b.inFlight.Add(-1)
	select {
	case <-b.release:
	case <-ctx.Done():
		return Identity{}, ctx.Err()
	}
	return Identity{}, refuse(ReasonInvalidToken, "slow and wrong")
}

// TestServeBoundsWorkAndServesCachedClients: with every worker held by a
// slow review, a new request is refused at once (busy, not a timeout),
// while a client whose token is cached connects without a worker.
func TestServeBoundsWorkAndServesCachedClients(t *testing.T) {
	srv, a := startServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	auth := &blocking{release: make(chan struct{}), ids: tokens{"alice": {Name: "team-a/echo-1", Namespace: "team-a", Pool: "echo",
		Worker: "echo-1", Expires: time.Now().Add(time.Hour)}}}
	r := &Responder{MaxTTL: time.Hour, Auth: NewCached(auth, CacheOptions{}), Clock: clock.RealClock{}}
	_, m, served := serveCallout(t, ctx, srv, a, r, ServeOptions{Workers: 2, AnswerTimeout: 10 * time.Second})

	connect := func(tok string) error {
		nc, err := dial(srv.ClientURL(), a.TLSOption(), nats.Token(tok), nats.NoReconnect(), nats.Timeout(10*time.Second))
		if err == nil {
			nc.Close()
		}
		return err
	}
	require.NoError(t, connect("alice"), "reviewed once")
	assert.Equal(t, 1.0, testutil.ToFloat64(m.Answers.WithLabelValues("admitted", ReasonReviewed)))

	var slow sync.WaitGroup
	for _, tok := range []string{"slow-1", "slow-2"} {
		slow.Add(1)
		go func() { defer slow.Done(); _ = connect(tok) }()
	}
	require.Eventually(t, func() bool { return auth.inFlight.Load() == 2 }, 10*time.Second, 10*time.Millisecond, "both workers busy")

	err := connect("slow-3")
	require.Error(t, err)
	assert.Contains(t, strings.ToLower(err.Error()), "authorization violation")
	assert.Equal(t, 1.0, testutil.ToFloat64(m.Answers.WithLabelValues("refused", ReasonBusy)))
	assert.Equal(t, int32(2), auth.inFlight.Load(), "the busy refusal did not wait for a worker")

	require.NoError(t, connect("alice"), "a cached client connects while every worker is busy")
	assert.Equal(t, 1.0, testutil.ToFloat64(m.Answers.WithLabelValues("admitted", ReasonCached)))

	close(auth.release)
	slow.Wait()
	cancel()
	require.NoError(t, <-served)
}

// TestServeBoundsReviewsPerHost: one client address that spent its budget
// is refused at once (rate_limited, no review), while another address is
// reviewed and admitted; the budget refills with time.
func TestServeBoundsReviewsPerHost(t *testing.T) {
	srv, a := startServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	auth := &countingTokens{ids: tokens{"alice": {Name: "team-a/echo-1", Namespace: "team-a", Pool: "echo",
		Worker: "echo-1", Expires: time.Now().Add(time.Hour)}}}
	r := &Responder{MaxTTL: time.Hour, Auth: auth, Clock: clock.RealClock{}}
	clk := clocktesting.NewFakePassiveClock(time.Unix(1_700_000_000, 0))
	_, m, served := serveCallout(t, ctx, srv, a, r, ServeOptions{PerHostQPS: 1, PerHostBurst: 2, Clock: clk})
	connect := func(from, tok string) error {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		nc, err := dial(srv.ClientURL(), a.TLSOption(), nats.Token(tok), nats.NoReconnect(), nats.Timeout(10*time.Second), nats.SetCustomDialer(d))
		if err == nil {
			nc.Close()
		}
		return err
	}

	for range 3 {
		require.Error(t, connect("127.0.0.2", "forged"))
	}
	assert.Equal(t, int32(2), auth.calls.Load(), "the burst of 2 is reviewed")
	// The refusal is counted after it is sent, so the client may see it first.
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.Answers.WithLabelValues("refused", ReasonRateLimited)) == 1 },
		10*time.Second, 10*time.Millisecond, "one rate_limited refusal")
	require.NoError(t, connect("127.0.0.3", "alice"), "another address is reviewed")
	clk.SetTime(clk.Now().Add(time.Second))
	require.Error(t, connect("127.0.0.2", "forged"))
	assert.Equal(t, int32(4), auth.calls.Load(), "the budget refilled")
	cancel()
	require.NoError(t, <-served)
}

type countingTokens struct {
	ids   tokens
	calls atomic.Int32
}

func (c *countingTokens) Authenticate(ctx context.Context, token string) (Identity, error) {
	c.calls.Add(1)
	return c.ids.Authenticate(ctx, token)
}
