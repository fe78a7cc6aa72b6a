package sshserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/crypto/ssh"
)

// Defaults for Config fields left zero.
const (
	DefaultListen           = ":2222"
	DefaultKeysPollInterval = 2 * time.Second
	DefaultIdleTimeout      = 30 * time.Minute
	handshakeTimeout        = 30 * time.Second
	extFingerprint          = "runplane-key-fp"
)

// Config configures the SSH sidecar.
type Config struct {
	// Listen is the SSH listen address (DefaultListen if empty).
	Listen string
	// AuthorizedKeys is the OpenSSH authorized_keys file; required.
	AuthorizedKeys string
	// HostKey is the host key file, created (ed25519) if missing; required.
	HostKey string
	// MetricsListen serves Prometheus /metrics when non-empty.
	MetricsListen string
	// IdleTimeout closes a connection with no traffic in either direction
	// for this long. Zero means DefaultIdleTimeout; negative disables it.
	IdleTimeout time.Duration
	// KeysPollInterval is how often AuthorizedKeys is checked for changes.
	KeysPollInterval time.Duration
	// AllowRemoteForward permits tcpip-forward (ssh -R). Off by default:
	// it would let a client open listeners inside the Pod.
	AllowRemoteForward bool
	// AllowRoot permits running as uid 0. The webhook sets runAsNonRoot;
	// refusing root by default keeps a misconfigured Pod from handing out
	// root shells.
	AllowRoot bool
	// Shell runs sessions; empty picks $SHELL, then /bin/bash, then /bin/sh.
	Shell string
	// Logger receives structured session logs; slog.Default() if nil.
	Logger *slog.Logger
}

func (c *Config) validate() error {
	if c.AuthorizedKeys == "" {
		return errors.New("authorized-keys: a file path is required")
	}
	if c.HostKey == "" {
		return errors.New("host-key: a file path is required")
	}
	if c.KeysPollInterval < 0 {
		return fmt.Errorf("keys-poll-interval: must be positive, got %s", c.KeysPollInterval)
	}
	return nil
}

func (c *Config) defaults() {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.KeysPollInterval == 0 {
		c.KeysPollInterval = DefaultKeysPollInterval
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Shell == "" {
		c.Shell = defaultShell()
	}
}

func defaultShell() string {
	if s := os.Getenv("SHELL"); s != "" {
		return s
	}
	if _, err := os.Stat("/bin/bash"); err == nil {
		return "/bin/bash"
	}
	return "/bin/sh"
}

// Server is an SSH server. Create it with New and run it with Serve.
type Server struct {
	cfg     Config
	log     *slog.Logger
	keys    *KeySet
	metrics *metrics
	ssh     *ssh.ServerConfig
	hostKey ssh.Signer
	connIDs atomic.Uint64
}

// New validates cfg, loads (or creates) the host key and reads the
// authorized keys once. Metrics are registered on reg.
func New(cfg Config, reg prometheus.Registerer) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	if !cfg.AllowRoot && os.Geteuid() == 0 {
		return nil, errors.New("refusing to run as root (uid 0): run as a non-root user or pass --allow-root")
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	signer, err := LoadOrCreateHostKey(cfg.HostKey)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, metrics: m, hostKey: signer}
	s.keys = NewKeySet(cfg.AuthorizedKeys, cfg.Logger)
	if _, err := s.keys.Reload(); err != nil {
		return nil, err
	}
	m.authorizedKeys.Set(float64(s.keys.Len()))

	s.ssh = &ssh.ServerConfig{
		ServerVersion: "SSH-2.0-runplane",
		// Public keys only: no PasswordCallback or KeyboardInteractiveCallback,
		// so the server never offers those methods.
		PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if !s.keys.Allowed(key) {
				return nil, errors.New("key not in authorized_keys")
			}
			return &ssh.Permissions{Extensions: map[string]string{extFingerprint: ssh.FingerprintSHA256(key)}}, nil
		},
		AuthLogCallback: func(md ssh.ConnMetadata, method string, err error) {
			if method == "none" {
				return // every client probes "none" first; it is not an attempt
			}
			result := "ok"
			if err != nil {
				result = "rejected"
			}
			m.authAttempts.WithLabelValues(method, result).Inc()
			if err != nil {
				s.log.Info("auth rejected", "remote", md.RemoteAddr().String(), "user", md.User(), "method", method)
			}
		},
	}
	s.ssh.AddHostKey(signer)
	return s, nil
}

// HostKey returns the server's public host key.
func (s *Server) HostKey() ssh.PublicKey { return s.hostKey.PublicKey() }

// Serve accepts connections on ln until ctx ends, then closes ln and every
// open connection. It also polls the authorized keys file.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.keys.Watch(ctx, s.cfg.KeysPollInterval, func(n int, err error) {
		s.metrics.authorizedKeys.Set(float64(n))
		if err != nil {
			s.metrics.keyReloads.WithLabelValues("error").Inc()
			s.log.Error("authorized keys unreadable; refusing all keys", "err", err)
			return
		}
		s.metrics.keyReloads.WithLabelValues("ok").Inc()
		s.log.Info("authorized keys reloaded", "keys", n)
	})
	go func() {
		<-ctx.Done()
		ln.Close()
	}()

	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("accept on %s: %w", ln.Addr(), err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.handleConn(ctx, nc)
		}()
	}
}

func (s *Server) handleConn(ctx context.Context, nc net.Conn) {
	id := s.connIDs.Add(1)
	log := s.log.With("conn", id, "remote", nc.RemoteAddr().String())
	ic := newIdleConn(nc)
	defer ic.Close()

	_ = nc.SetDeadline(time.Now().Add(handshakeTimeout))
	sc, chans, reqs, err := ssh.NewServerConn(ic, s.ssh)
	if err != nil {
		result := "handshake_error"
		var ae *ssh.ServerAuthError
		if errors.As(err, &ae) {
			result = "auth_failed"
		}
		s.metrics.connections.WithLabelValues(result).Inc()
		log.Info("connection refused", "reason", result)
		return
	}
	_ = nc.SetDeadline(time.Time{})
	defer sc.Close()
	s.metrics.connections.WithLabelValues("ok").Inc()
	s.metrics.activeConns.Inc()
	defer s.metrics.activeConns.Dec()

	log = log.With("user", sc.User())
	start := time.Now()
	log.Info("connected", "key", sc.Permissions.Extensions[extFingerprint], "client", string(sc.ClientVersion()))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-ctx.Done()
		sc.Close()
	}()
	if s.cfg.IdleTimeout > 0 {
		go func() {
			if ic.closeWhenIdle(ctx, s.cfg.IdleTimeout) {
				s.metrics.idleClosed.Inc()
				log.Info("idle timeout", "after", s.cfg.IdleTimeout.String())
			}
		}()
	}

	c := &conn{srv: s, sc: sc, log: log}
	go c.handleGlobalRequests(ctx, reqs)
	var wg sync.WaitGroup
	for nch := range chans {
		switch nch.ChannelType() {
		case "session":
			wg.Add(1)
			go func() { defer wg.Done(); c.handleSession(ctx, nch) }()
		case "direct-tcpip":
			wg.Add(1)
			go func() { defer wg.Done(); c.handleDirectTCPIP(ctx, nch) }()
		default:
			_ = nch.Reject(ssh.UnknownChannelType, "unsupported channel type "+nch.ChannelType())
		}
	}
	cancel()
	c.closeListeners()
	wg.Wait()
	log.Info("disconnected", "duration", time.Since(start).Round(time.Millisecond).String())
}

// conn is one authenticated client connection.
type conn struct {
	srv *Server
	sc  *ssh.ServerConn
	log *slog.Logger

	mu        sync.Mutex
	listeners map[string]net.Listener // remote forwards by "host:port"
}

// idleConn records when bytes last moved, so the idle timeout sees both
// directions (output from a busy shell counts as activity).
type idleConn struct {
	net.Conn
	last atomic.Int64
}

func newIdleConn(c net.Conn) *idleConn {
	ic := &idleConn{Conn: c}
	ic.touch()
	return ic
}

func (c *idleConn) touch() { c.last.Store(time.Now().UnixNano()) }

func (c *idleConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.touch()
	}
	return n, err
}

func (c *idleConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.touch()
	}
	return n, err
}

// closeWhenIdle closes the connection once it has been idle for timeout and
// reports whether it did; it returns false when ctx ends first.
func (c *idleConn) closeWhenIdle(ctx context.Context, timeout time.Duration) bool {
	tick := min(max(timeout/10, 50*time.Millisecond), 30*time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			if time.Since(time.Unix(0, c.last.Load())) >= timeout {
				c.Close()
				return true
			}
		}
	}
}

// Run serves SSH on cfg.Listen (and metrics on cfg.MetricsListen) until ctx
// ends.
func Run(ctx context.Context, cfg Config) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	srv, err := New(cfg, reg)
	if err != nil {
		return err
	}
	cfg = srv.cfg
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	if cfg.MetricsListen != "" {
		mln, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			ln.Close()
			return fmt.Errorf("listen metrics %s: %w", cfg.MetricsListen, err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			<-ctx.Done()
			hs.Close()
		}()
		go func() {
			if err := hs.Serve(mln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("metrics server: %w", err)
				cancel()
			}
		}()
		cfg.Logger.Info("metrics listening", "addr", mln.Addr().String())
	}
	if _, err := os.Stat(cfg.Shell); err != nil {
		// A distroless image has no shell: SFTP and port forwarding still
		// work, shell and exec sessions are refused.
		cfg.Logger.Warn("no shell: shell and exec sessions will be refused", "shell", cfg.Shell, "err", err)
	}
	cfg.Logger.Info("listening", "addr", ln.Addr().String(),
		"hostKey", ssh.FingerprintSHA256(srv.HostKey()), "authorizedKeys", srv.keys.Len(),
		"remoteForward", cfg.AllowRemoteForward, "idleTimeout", cfg.IdleTimeout.String())
	if err := srv.Serve(ctx, ln); err != nil {
		return err
	}
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}
