package cluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"syscall"
)

// The API server for Pods on real nodes. The kubelet gives every container
// KUBERNETES_SERVICE_HOST/PORT, the ClusterIP of the "kubernetes" Service
// (10.96.0.1:443); without kube-proxy nothing answers there. Each real node
// does kube-proxy's part for that one Service: its Pods route
// kubernetesServiceIP to the host over the bridge (cniConfig), the bridge
// carries that address, and a listener bound to the bridge alone forwards
// the TCP stream to the API server. The stream stays TLS end to end: the
// API server's certificate names 10.96.0.1, so in-cluster clients verify it
// with the CA the kube-root-ca.crt ConfigMap holds, as in any cluster.
//
// The address lives on the node's bridge and goes with it; the listener is
// bound to the bridge (SO_BINDTODEVICE), so several clusters' real nodes on
// one host (parallel test processes) each serve their own Pods. While a
// node runs, the host's own connections to 10.96.0.1 stay on the host.

// kubernetesServiceIP is the "kubernetes" Service's ClusterIP: the first
// address of the API server's --service-cluster-ip-range.
const kubernetesServiceIP = "10.96.0.1"

// serveKubernetesService puts kubernetesServiceIP on the node's bridge and
// forwards connections to it on port 443 to apiHost (the admin
// kubeconfig's https://127.0.0.1:PORT) until the listener is closed.
func serveKubernetesService(n *RealNode, apiHost string) (net.Listener, error) {
	u, err := url.Parse(apiHost)
	if err != nil {
		return nil, fmt.Errorf("real node %s: API server address %q: %w", n.Name, apiHost, err)
	}
	if err := run("ip", "addr", "add", kubernetesServiceIP+"/32", "dev", n.bridge); err != nil {
		return nil, err
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptString(int(fd), syscall.SOL_SOCKET, syscall.SO_BINDTODEVICE, n.bridge)
		}); err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp4", net.JoinHostPort(kubernetesServiceIP, "443"))
	if err != nil {
		return nil, fmt.Errorf("real node %s: serving the kubernetes Service: %w", n.Name, err)
	}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return // closed with the node
			}
			go forward(conn, u.Host)
		}
	}()
	return ln, nil
}

// forward splices one connection to addr, both directions, until either
// side closes. Hand-written: a TCP splice of a few lines, for which no
// library in the module fits (httputil.ReverseProxy would end the TLS that
// clients must verify against the API server's certificate).
func forward(in net.Conn, addr string) {
	defer in.Close()
	out, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	defer out.Close()
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		// Half-close so the other direction drains, then ends.
		if tcp, ok := dst.(*net.TCPConn); ok {
			_ = tcp.CloseWrite()
		}
	}
	go pipe(out, in)
	go pipe(in, out)
	wg.Wait()
}
