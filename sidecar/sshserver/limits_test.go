package sshserver

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestSlots(t *testing.T) {
	s := newSlots(2)
	n, ok := s.tryAcquire()
	assert.True(t, ok)
	assert.Equal(t, 1, n)
	_, ok = s.tryAcquire()
	assert.True(t, ok)
	n, ok = s.tryAcquire()
	assert.False(t, ok, "third slot of two")
	assert.Equal(t, 2, n)
	assert.Equal(t, 1, s.release())
	_, ok = s.tryAcquire()
	assert.True(t, ok, "slot after a release")
	assert.Equal(t, 1, s.release())
	assert.Equal(t, 0, s.release())
	assert.Equal(t, 0, s.release(), "release never goes negative")
}

func TestPerSource(t *testing.T) {
	p := newPerSource(2)
	for _, step := range []struct {
		key         string
		ok, first   bool
		wantSources int
	}{
		{"a", true, false, 1},
		{"a", true, false, 1},
		{"a", false, true, 1},  // the first refusal of an episode
		{"a", false, false, 1}, // the rest of it
		{"b", true, false, 2},  // another key has its own share
	} {
		ok, first := p.tryAcquire(step.key)
		assert.Equal(t, step.ok, ok, step.key)
		assert.Equal(t, step.first, first, step.key)
		assert.Equal(t, step.wantSources, p.sources())
	}
	p.release("a")
	ok, first := p.tryAcquire("a")
	assert.True(t, ok, "a slot after a release")
	assert.False(t, first)
	ok, first = p.tryAcquire("a")
	assert.False(t, ok)
	assert.True(t, first, "a new episode after dropping below the limit")
	for range 2 {
		p.release("a")
	}
	p.release("b")
	assert.Zero(t, p.sources(), "keys without slots are forgotten")
	p.release("c") // unknown: nothing to return
	assert.Zero(t, p.sources())
}

// TestLoginGraceOnInjectedClock runs the server in process on a fake clock:
// a silent connection is closed exactly when the clock passes the grace
// time, and an authenticated one is not.
func TestLoginGraceOnInjectedClock(t *testing.T) {
	dir := t.TempDir()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	signer, err := ssh.NewSignerFromKey(priv)
	require.NoError(t, err)
	keys := filepath.Join(dir, "authorized_keys")
	require.NoError(t, os.WriteFile(keys, ssh.MarshalAuthorizedKey(signer.PublicKey()), 0o600))
	clk := clocktesting.NewFakeClock(time.Now())
	reg := prometheus.NewRegistry()
	srv, err := New(Config{AuthorizedKeys: keys, HostKey: filepath.Join(dir, "hk"), AllowRoot: true,
		LoginGraceTime: time.Minute, Clock: clk, Logger: discardLogger(), Shell: "/bin/sh"}, reg)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-served)
	})

	// An authenticated connection stops its timer.
	c, err := ssh.Dial("tcp", ln.Addr().String(), &ssh.ClientConfig{User: "dev", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.FixedHostKey(srv.HostKey()), Timeout: 10 * time.Second})
	require.NoError(t, err)
	defer c.Close()
	require.Eventually(t, func() bool { return !clk.HasWaiters() }, 10*time.Second, 10*time.Millisecond,
		"login timer still armed after authentication")

	nc, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer nc.Close()
	require.Eventually(t, clk.HasWaiters, 10*time.Second, 10*time.Millisecond, "login timer armed")
	assert.Equal(t, 1.0, testutil.ToFloat64(srv.metrics.unauthActive))
	clk.Step(time.Minute - time.Nanosecond)
	assert.True(t, clk.HasWaiters(), "fired before the grace time")
	clk.Step(time.Nanosecond)

	require.NoError(t, nc.SetReadDeadline(time.Now().Add(10*time.Second)))
	got, err := io.ReadAll(nc)
	require.NoError(t, err, "connection not closed at the grace time")
	assert.Contains(t, string(got), "SSH-2.0-runplane")
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(srv.metrics.connections.WithLabelValues("login_timeout")) == 1
	}, 10*time.Second, 10*time.Millisecond, "login_timeout counted")
	assert.Equal(t, 0.0, testutil.ToFloat64(srv.metrics.unauthActive))

	// The authenticated connection lives on past the grace time.
	sess, err := c.NewSession()
	require.NoError(t, err)
	out, err := sess.Output("echo alive")
	require.NoError(t, err)
	assert.Equal(t, "alive\n", string(out))
}
