package kit

import (
	"errors"
	"fmt"
	"net"
)

// FreePorts is n distinct TCP ports on host that were free a moment ago,
// for processes that take a port number rather than a listener (etcd,
// nats-server, a child binary): each listener is held until all n are
// chosen, so none is handed out twice, then closed. Another process may
// take a port before its user listens, so code that can pass a
// net.Listener itself should.
func FreePorts(host string, n int) (_ []int, err error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			err = errors.Join(err, l.Close())
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("finding %d free ports on %s: %w", n, host, err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// FreePort is one port of FreePorts.
func FreePort(host string) (int, error) {
	ports, err := FreePorts(host, 1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}
