package kit

import (
	"fmt"
	"net"
)

// FreePort is a TCP port on host that was free a moment ago, for a process
// that takes a port number rather than a listener (etcd, nats-server, a
// child binary); another process may take it before that one listens, so
// code that can pass a net.Listener itself should.
func FreePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("finding a free port on %s: %w", host, err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("freeing port %d: %w", port, err)
	}
	return port, nil
}
