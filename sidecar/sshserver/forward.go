package sshserver

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/ssh"
)

// Wire payloads of forwarding (RFC 4254 section 7).
type (
	directTCPIPMsg struct {
		Host     string
		Port     uint32
		OrigHost string
		OrigPort uint32
	}
	tcpipForwardMsg struct {
		Addr string
		Port uint32
	}
	tcpipForwardReply struct{ Port uint32 }
	forwardedTCPIPMsg struct {
		Addr     string
		Port     uint32
		OrigAddr string
		OrigPort uint32
	}
)

const dialTimeout = 10 * time.Second

// localAddrs reports the Pod's own addresses: loopback and every address of
// its network interfaces. Local forwarding may reach these only, so the
// sidecar is not a pivot into the cluster network.
func localAddrs() (map[string]bool, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list interface addresses: %w", err)
	}
	own := map[string]bool{}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			own[ipn.IP.String()] = true
		}
	}
	return own, nil
}

// forwardTarget resolves host and returns an address of this Pod to dial,
// or an error naming why the destination is not allowed. Dialing the
// checked IP (not the name) closes the DNS-rebinding gap.
func forwardTarget(ctx context.Context, host string, port uint32) (string, error) {
	if port == 0 || port > 65535 {
		return "", fmt.Errorf("port %d out of range 1-65535", port)
	}
	var ips []net.IP
	if ip := net.ParseIP(host); ip != nil {
		ips = []net.IP{ip}
	} else {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupIPAddr(rctx, host)
		if err != nil {
			return "", fmt.Errorf("resolve %s: %w", host, err)
		}
		for _, a := range addrs {
			ips = append(ips, a.IP)
		}
	}
	own, err := localAddrs()
	if err != nil {
		return "", err
	}
	for _, ip := range ips {
		if ip.IsLoopback() || own[ip.String()] {
			return net.JoinHostPort(ip.String(), strconv.Itoa(int(port))), nil
		}
	}
	return "", fmt.Errorf("destination %s is not this Pod (only loopback and the Pod's own addresses may be forwarded to)", host)
}

func (c *conn) handleDirectTCPIP(ctx context.Context, nch ssh.NewChannel) {
	m := c.srv.metrics
	var msg directTCPIPMsg
	if err := ssh.Unmarshal(nch.ExtraData(), &msg); err != nil {
		m.forwards.WithLabelValues("local", "rejected").Inc()
		_ = nch.Reject(ssh.ConnectionFailed, "malformed direct-tcpip request")
		return
	}
	if option, why := c.grants.denyOpen(msg.Host, msg.Port); option != "" {
		m.forwards.WithLabelValues("local", "rejected").Inc()
		m.optionDenials.WithLabelValues(option).Inc()
		c.log.Info("local forward refused", "host", msg.Host, "port", msg.Port, "reason", why)
		_ = nch.Reject(ssh.Prohibited, why)
		return
	}
	target, err := forwardTarget(ctx, msg.Host, msg.Port)
	if err != nil {
		m.forwards.WithLabelValues("local", "rejected").Inc()
		c.log.Info("local forward refused", "host", msg.Host, "port", msg.Port, "reason", err.Error())
		_ = nch.Reject(ssh.Prohibited, err.Error())
		return
	}
	d := net.Dialer{Timeout: dialTimeout}
	tc, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		m.forwards.WithLabelValues("local", "failed").Inc()
		_ = nch.Reject(ssh.ConnectionFailed, fmt.Sprintf("connect %s: %v", target, err))
		return
	}
	ch, reqs, err := nch.Accept()
	if err != nil {
		tc.Close()
		return
	}
	go ssh.DiscardRequests(reqs)
	m.forwards.WithLabelValues("local", "ok").Inc()
	c.log.Debug("local forward", "target", target)
	pipe(ch, tc.(*net.TCPConn), m.forwardBytes.WithLabelValues("local"))
}

// pipe copies both ways, passing half-closes through, and returns when both
// directions are done.
func pipe(ch ssh.Channel, tc *net.TCPConn, bytes prometheus.Counter) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		n, _ := io.Copy(tc, ch)
		bytes.Add(float64(n))
		_ = tc.CloseWrite()
	}()
	go func() {
		defer wg.Done()
		n, _ := io.Copy(ch, tc)
		bytes.Add(float64(n))
		_ = ch.CloseWrite()
	}()
	wg.Wait()
	ch.Close()
	tc.Close()
}

func (c *conn) handleGlobalRequests(ctx context.Context, reqs <-chan *ssh.Request) {
	for req := range reqs {
		switch req.Type {
		case "tcpip-forward":
			ok, reply := c.remoteForward(ctx, req.Payload)
			if req.WantReply {
				_ = req.Reply(ok, reply)
			}
		case "cancel-tcpip-forward":
			var msg tcpipForwardMsg
			ok := ssh.Unmarshal(req.Payload, &msg) == nil && c.cancelForward(net.JoinHostPort(msg.Addr, strconv.Itoa(int(msg.Port))))
			if req.WantReply {
				_ = req.Reply(ok, nil)
			}
		default:
			// keepalive@openssh.com and unknown requests: a failure reply is
			// what OpenSSH's own server answers.
			if req.WantReply {
				_ = req.Reply(false, nil)
			}
		}
	}
}

// remoteForward serves ssh -R when enabled: it listens in the Pod and opens
// a forwarded-tcpip channel to the client per accepted connection.
func (c *conn) remoteForward(ctx context.Context, payload []byte) (bool, []byte) {
	m := c.srv.metrics
	if !c.grants.portForwarding {
		m.forwards.WithLabelValues("remote", "rejected").Inc()
		m.optionDenials.WithLabelValues("port-forwarding").Inc()
		c.log.Info("remote forward refused", "reason", "authorized_keys no-port-forwarding or restrict")
		return false, nil
	}
	if !c.srv.cfg.AllowRemoteForward {
		m.forwards.WithLabelValues("remote", "rejected").Inc()
		c.log.Info("remote forward refused", "reason", "disabled (--allow-remote-forward)")
		return false, nil
	}
	var msg tcpipForwardMsg
	if err := ssh.Unmarshal(payload, &msg); err != nil || msg.Port > 65535 {
		m.forwards.WithLabelValues("remote", "rejected").Inc()
		return false, nil
	}
	bind := msg.Addr
	if bind == "localhost" {
		bind = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(bind, strconv.Itoa(int(msg.Port))))
	if err != nil {
		m.forwards.WithLabelValues("remote", "failed").Inc()
		c.log.Info("remote forward failed", "err", err)
		return false, nil
	}
	port := uint32(ln.Addr().(*net.TCPAddr).Port)
	// The key is what the client will name in cancel-tcpip-forward.
	key := net.JoinHostPort(msg.Addr, strconv.Itoa(int(msg.Port)))
	c.mu.Lock()
	if c.listeners == nil {
		c.listeners = map[string]net.Listener{}
	}
	c.listeners[key] = ln
	c.mu.Unlock()
	m.forwards.WithLabelValues("remote", "ok").Inc()
	c.log.Info("remote forward", "bind", ln.Addr().String())

	go func() {
		for {
			tc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				ra := tc.RemoteAddr().(*net.TCPAddr)
				ch, reqs, err := c.sc.OpenChannel("forwarded-tcpip", ssh.Marshal(&forwardedTCPIPMsg{
					Addr: msg.Addr, Port: port, OrigAddr: ra.IP.String(), OrigPort: uint32(ra.Port),
				}))
				if err != nil {
					tc.Close()
					return
				}
				go ssh.DiscardRequests(reqs)
				pipe(ch, tc.(*net.TCPConn), m.forwardBytes.WithLabelValues("remote"))
			}()
		}
	}()
	if msg.Port == 0 {
		return true, ssh.Marshal(&tcpipForwardReply{Port: port})
	}
	return true, nil
}

func (c *conn) cancelForward(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ln, ok := c.listeners[key]
	if ok {
		ln.Close()
		delete(c.listeners, key)
	}
	return ok
}

func (c *conn) closeListeners() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, ln := range c.listeners {
		ln.Close()
		delete(c.listeners, k)
	}
}
