package natsconn_test

import (
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/natsconn"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/stream"
	"github.com/runplane/runplane/test/natsauth"
)

// TestFrozenServerIsLeft: a client connected to a server that stops
// answering without closing anything (SIGSTOP, a hung node) gives it up
// as stale within 15 s (the chaos row freezes a server for 20 s) and goes
// on with another server of the cluster. With nats.go's defaults (a ping every
// 2 minutes) it waited out the whole freeze.
func TestFrozenServerIsLeft(t *testing.T) {
	a, servers := natsauth.Cluster(t, queue.WorkerExports(stream.Config{}), 2)
	asQueue, err := a.QueueOption()
	require.NoError(t, err)

	// A responder on the server that stays up.
	resp, err := nats.Connect(servers[1].ClientURL(), asQueue)
	require.NoError(t, err)
	t.Cleanup(resp.Close)
	_, err = resp.Subscribe("frozen.echo", func(m *nats.Msg) { _ = m.Respond(m.Data) })
	require.NoError(t, err)
	require.NoError(t, resp.Flush())

	p := startProxy(t, servers[0].Addr().String())
	proxyURL := "nats://" + p.addr()
	disconnected := make(chan error, 1)
	reconnected := make(chan string, 1)
	opts := append(natsconn.Options("frozen-test", 250*time.Millisecond, slog.New(slog.NewTextHandler(t.Output(), nil))), asQueue,
		nats.DontRandomize(), // the proxied server first
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			select {
			case disconnected <- err:
			default:
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			select {
			case reconnected <- nc.ConnectedUrl():
			default:
			}
		}))
	nc, err := nats.Connect(proxyURL+","+servers[1].ClientURL(), opts...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	require.Eventually(t, nc.IsConnected, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, proxyURL, nc.ConnectedUrl())
	// The responder's interest reaches the proxied server over the route
	// a moment after its Flush (a whole-tree run once got "no responders"):
	// the first answer through the proxy is the barrier.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := nc.Request("frozen.echo", []byte("before"), 5*time.Second)
		assert.NoError(c, err)
	}, 10*time.Second, 50*time.Millisecond, "through the proxy before the freeze")

	p.freeze()
	frozen := time.Now()
	select {
	case err := <-disconnected:
		require.ErrorIs(t, err, nats.ErrStaleConnection)
		t.Logf("frozen server left after %v", time.Since(frozen).Round(100*time.Millisecond))
	case <-time.After(15 * time.Second):
		t.Fatal("the client still waits on the frozen server after 15 s")
	}
	select {
	case url := <-reconnected:
		require.NotEqual(t, proxyURL, url, "reconnected to the frozen server")
	case <-time.After(10 * time.Second):
		t.Fatal("no reconnect to the live server within 10 s")
	}
	msg, err := nc.Request("frozen.echo", []byte("after"), 5*time.Second)
	require.NoError(t, err, "through the live server after the freeze")
	require.Equal(t, "after", string(msg.Data))
}

// proxy forwards TCP to one server until freeze; from then on it forwards
// nothing either way and closes nothing — what a client sees of a
// SIGSTOPped server. Hand-written: a few lines, and the freeze is the point.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	frozen chan struct{}
	once   sync.Once
	closed chan struct{}
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{ln: ln, target: target, frozen: make(chan struct{}), closed: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Go(p.serve)
	t.Cleanup(func() {
		close(p.closed)
		_ = ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) freeze() { p.once.Do(func() { close(p.frozen) }) }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go p.pipe(c, s)
		go p.pipe(s, c)
	}
}

// pipe copies src to dst while not frozen; once frozen, what it reads is
// held until the proxy closes.
func (p *proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case <-p.frozen:
				<-p.closed
				return
			default:
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			_ = dst.Close()
			return
		}
	}
}
