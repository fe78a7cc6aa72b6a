package sidecar

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/test/natsauth"
)

// A draining sidecar's last flush waits nats.go's 10s on a live
// connection and 2s on one that has lost its server: the deregistration
// it holds goes out if the server comes back within that, and the Pod is
// not held past its drain by an outage.
func TestShutdownFlushTimeout(t *testing.T) {
	e := newEnv(t)
	nc := natsauth.Connect(t, e.srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	assert.Equal(t, 10*time.Second, shutdownFlushTimeout(nc), "connected")
	e.srv.Shutdown()
	require.Eventually(t, nc.IsReconnecting, 10*time.Second, 10*time.Millisecond, "the client saw its server go")
	assert.Equal(t, 2*time.Second, shutdownFlushTimeout(nc), "reconnecting")
}
