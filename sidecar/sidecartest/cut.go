package sidecartest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// cut forwards TCP to target until it is cut: then every connection and
// the listener close at once, as a Pod's network goes with the Pod. It is
// how Worker.Kill makes a sidecar vanish without a goodbye (no result, no
// heartbeat, no deregistration) while the sidecar's code stays the real
// one. Hand-written: a few lines of io.Copy, and the project carries no
// TCP proxy library.
type cut struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	done  bool
}

func newCut(target string) (*cut, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the worker's NATS connections: %w", err)
	}
	c := &cut{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go c.serve()
	return c, nil
}

func (c *cut) addr() string { return c.ln.Addr().String() }

func (c *cut) serve() {
	for {
		in, err := c.ln.Accept()
		if err != nil {
			return // cut
		}
		out, err := net.Dial("tcp", c.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		if !c.track(in, out) {
			return
		}
		go c.pipe(out, in)
		go c.pipe(in, out)
	}
}

// track remembers a pair of connections, closing them when already cut.
func (c *cut) track(conns ...net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		for _, x := range conns {
			_ = x.Close()
		}
		return false
	}
	for _, x := range conns {
		c.conns[x] = struct{}{}
	}
	return true
}

func (c *cut) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	// One side ended: end both, as a broken TCP connection does.
	_ = dst.Close()
	_ = src.Close()
	c.mu.Lock()
	delete(c.conns, dst)
	delete(c.conns, src)
	c.mu.Unlock()
}

// close cuts every connection and refuses new ones.
func (c *cut) close() error {
	c.mu.Lock()
	c.done = true
	conns := c.conns
	c.conns = map[net.Conn]struct{}{}
	c.mu.Unlock()
	err := c.ln.Close()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	for x := range conns {
		_ = x.Close()
	}
	return err
}
