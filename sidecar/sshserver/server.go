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
	"github.com/runplane/runplane/internal/buildinfo"
	"github.com/runplane/runplane/internal/metricsauth"
	"github.com/runplane/runplane/internal/refusal"
	"golang.org/x/crypto/ssh"
	"k8s.io/utils/clock"
)

// Defaults for Config fields left zero.
const (
	DefaultListen           = ":2222"
	DefaultKeysPollInterval = 2 * time.Second
	DefaultIdleTimeout      = 30 * time.Minute
	// DefaultLoginGraceTime is sshd's LoginGraceTime default.
	DefaultLoginGraceTime = 30 * time.Second
	// DefaultMaxUnauthenticated bounds the handshakes of all clients
	// together: well above one source's share, so several sources are
	// needed to fill it, and each costs only a goroutine until
	// LoginGraceTime closes it.
	DefaultMaxUnauthenticated = 32
	// DefaultMaxUnauthenticatedPerSource bounds one client address's
	// handshakes (sshd's PerSourceMaxStartups): a client opening and
	// abandoning a few connections at once is normal, ten is not.
	DefaultMaxUnauthenticatedPerSource = 3
	// DefaultMaxChannels bounds the channels open at once on a connection.
	// It counts sessions and forwards together (sshd's MaxSessions 10
	// counts sessions only): a browser behind ssh -L alone keeps six or
	// more connections open, plus a WebSocket per Jupyter kernel.
	DefaultMaxChannels = 32
)

// Config configures the SSH server.
type Config struct {
	// Listen is the SSH listen address (DefaultListen if empty).
	Listen string
	// AuthorizedKeys is the OpenSSH authorized_keys file; required.
	AuthorizedKeys string
	// HostKey is the host key file, created (ed25519) if missing; required.
	HostKey string
	// MetricsListen serves Prometheus /metrics when non-empty, on a
	// loopback address only: the server runs in a tenant's container, where
	// nothing can authenticate a scraper (internal/metricsauth.Loopback).
	MetricsListen string
	// IdleTimeout closes a connection with no traffic in either direction
	// for this long. Zero means DefaultIdleTimeout; negative disables it.
	IdleTimeout time.Duration
	// KeysPollInterval is how often AuthorizedKeys is checked for changes.
	KeysPollInterval time.Duration
	// AllowRemoteForward permits tcpip-forward (ssh -R). Off by default:
	// it would let a client open listeners inside the Pod.
	AllowRemoteForward bool
	// AllowRoot permits running as uid 0. Refusing root by default keeps a
	// misconfigured standalone server from handing out root shells; in a
	// Pod the webhook allows it, since the server runs as the main
	// container's user, whom the Pod's owner chose.
	AllowRoot bool
	// Shell runs sessions; empty picks $SHELL, then /bin/bash, then /bin/sh.
	Shell string
	// MaxChannels bounds the channels (sessions and forwards) open at once
	// on one connection; more are rejected with ResourceShortage. Zero means
	// DefaultMaxChannels.
	MaxChannels int
	// MaxUnauthenticated bounds the connections accepted but not yet
	// authenticated; beyond it a new connection is closed before the
	// handshake. Zero means DefaultMaxUnauthenticated.
	MaxUnauthenticated int
	// MaxUnauthenticatedPerSource bounds those of one client address, so
	// one client cannot take every slot and lock all keys out; beyond it
	// that address's new connection is closed before the handshake. Zero
	// means DefaultMaxUnauthenticatedPerSource.
	MaxUnauthenticatedPerSource int
	// LoginGraceTime closes a connection that has not authenticated within
	// it. Zero means DefaultLoginGraceTime.
	LoginGraceTime time.Duration
	// Logger receives structured session logs; slog.Default() if nil.
	Logger *slog.Logger
	// Clock times the login grace period; clock.RealClock if nil.
	Clock clock.WithDelayedExecution
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
	if c.MaxChannels < 0 {
		return fmt.Errorf("max-channels: must be at least 1, got %d", c.MaxChannels)
	}
	if c.MaxUnauthenticated < 0 {
		return fmt.Errorf("max-unauthenticated: must be at least 1, got %d", c.MaxUnauthenticated)
	}
	if c.MaxUnauthenticatedPerSource < 0 {
		return fmt.Errorf("max-unauthenticated-per-source: must be at least 1, got %d", c.MaxUnauthenticatedPerSource)
	}
	if c.LoginGraceTime < 0 {
		return fmt.Errorf("login-grace-time: must be positive, got %s", c.LoginGraceTime)
	}
	if c.MetricsListen != "" {
		if err := metricsauth.Loopback(c.MetricsListen); err != nil {
			return fmt.Errorf("metrics-listen: %w", err)
		}
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
	if c.MaxChannels == 0 {
		c.MaxChannels = DefaultMaxChannels
	}
	if c.MaxUnauthenticated == 0 {
		c.MaxUnauthenticated = DefaultMaxUnauthenticated
	}
	if c.MaxUnauthenticatedPerSource == 0 {
		c.MaxUnauthenticatedPerSource = DefaultMaxUnauthenticatedPerSource
	}
	if c.LoginGraceTime == 0 {
		c.LoginGraceTime = DefaultLoginGraceTime
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
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
	// unauth counts connections in the handshake (MaxUnauthenticated).
	unauth *slots
	// unauthFull is set while the limit refuses connections, so the log
	// says so once per episode, not once per refused connection.
	unauthFull atomic.Bool
	// unauthBySource counts them per client address
	// (MaxUnauthenticatedPerSource).
	unauthBySource *perSource
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
	s := &Server{cfg: cfg, log: cfg.Logger, metrics: m, hostKey: signer,
		unauth: newSlots(cfg.MaxUnauthenticated), unauthBySource: newPerSource(cfg.MaxUnauthenticatedPerSource)}
	s.keys = NewKeySet(cfg.AuthorizedKeys, cfg.Logger)
	if _, err := s.keys.Reload(); err != nil {
		return nil, err
	}
	s.recordKeys()

	s.ssh = &ssh.ServerConfig{
		ServerVersion: "SSH-2.0-runplane",
		// Public keys only: no PasswordCallback or KeyboardInteractiveCallback,
		// so the server never offers those methods.
		PublicKeyCallback: s.authorizeKey,
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
		s.recordKeys()
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
		release, ok := s.admit(nc)
		if !ok {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.handleConn(ctx, nc, release)
		}()
	}
}

// admit takes an unauthenticated-connection slot of nc's source address
// and one of all sources, or closes nc before the handshake when either
// is taken (sshd's PerSourceMaxStartups and MaxStartups, without the
// random early drop). The source's share is checked first, so one client
// flooding is refused by its own limit and never fills the shared one.
// handshake returns the slots with release.
func (s *Server) admit(nc net.Conn) (release func(), ok bool) {
	src := sourceOf(nc.RemoteAddr())
	if ok, first := s.unauthBySource.tryAcquire(src); !ok {
		nc.Close()
		s.metrics.unauthPerSourceRefused.Inc()
		if first {
			s.log.Warn("unauthenticated connections from one source at the limit; closing its new connections before the handshake",
				"max", s.cfg.MaxUnauthenticatedPerSource, "source", src)
		}
		return nil, false
	}
	if _, ok := s.unauth.tryAcquire(); !ok {
		s.unauthBySource.release(src)
		nc.Close()
		s.metrics.unauthRefused.Inc()
		if !s.unauthFull.Swap(true) {
			s.log.Warn("unauthenticated connection limit reached; closing new connections before the handshake",
				"max", s.cfg.MaxUnauthenticated, "remote", nc.RemoteAddr().String())
		}
		return nil, false
	}
	s.metrics.unauthActive.Inc()
	return func() { s.releaseUnauth(src) }, true
}

// releaseUnauth returns the unauthenticated-connection slots of src.
func (s *Server) releaseUnauth(src string) {
	s.unauthBySource.release(src)
	if s.unauth.release() < s.cfg.MaxUnauthenticated && s.unauthFull.Swap(false) {
		s.log.Info("unauthenticated connections below the limit again", "max", s.cfg.MaxUnauthenticated)
	}
	s.metrics.unauthActive.Dec()
}

// sourceOf is the client address a per-source limit counts: the IP alone
// (each connection has its own port), IPv4-mapped IPv6 as IPv4.
func sourceOf(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		if v4 := ta.IP.To4(); v4 != nil {
			return v4.String()
		}
		return ta.IP.String()
	}
	if h, _, err := net.SplitHostPort(a.String()); err == nil {
		return h
	}
	return a.String()
}

// recordKeys publishes the key set's size and refused lines as metrics.
func (s *Server) recordKeys() {
	s.metrics.authorizedKeys.Set(float64(s.keys.Len()))
	for reason, n := range s.keys.RefusedByReason() {
		s.metrics.refusedLines.WithLabelValues(reason).Set(float64(n))
	}
}

// authorizeKey is the PublicKeyCallback: the key must be on a usable
// authorized_keys line whose from= admits the client; that line's options
// travel in the returned Permissions to the channel handlers.
func (s *Server) authorizeKey(md ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
	fp := ssh.FingerprintSHA256(key)
	ip := md.RemoteAddr().String()
	if h, _, err := net.SplitHostPort(ip); err == nil {
		ip = h
	}
	line, err := s.keys.Authorize(key, ip)
	if err != nil {
		if ref, ok := errors.AsType[*refusal.Error](err); ok {
			s.metrics.keyRefusals.WithLabelValues(ref.Reason).Inc()
			s.log.Info("key refused by authorized_keys", "remote", md.RemoteAddr().String(), "key", fp,
				"reason", ref.Reason, "detail", ref.Error())
		}
		return nil, err
	}
	return line.Options.permissions(fp, line.Line), nil
}

func (s *Server) handleConn(ctx context.Context, nc net.Conn, release func()) {
	id := s.connIDs.Add(1)
	log := s.log.With("conn", id, "remote", nc.RemoteAddr().String())
	ic := newIdleConn(nc)
	defer ic.Close()

	sc, chans, reqs, err := s.handshake(ic, release)
	if err != nil {
		result := "handshake_error"
		var ae *ssh.ServerAuthError
		switch {
		case errors.Is(err, errLoginGrace):
			result = "login_timeout"
		case errors.As(err, &ae):
			result = "auth_failed"
		}
		s.metrics.connections.WithLabelValues(result).Inc()
		log.Info("connection refused", "reason", result)
		return
	}
	defer sc.Close()
	g, err := grantsFrom(sc.Permissions)
	if err != nil {
		// Cannot happen with authorizeKey's Permissions; fail closed anyway.
		s.metrics.connections.WithLabelValues("handshake_error").Inc()
		log.Error("undecodable key permissions; closing", "err", err)
		return
	}
	s.metrics.connections.WithLabelValues("ok").Inc()
	s.metrics.activeConns.Inc()
	defer s.metrics.activeConns.Dec()

	log = log.With("user", sc.User())
	start := time.Now()
	log.Info("connected", "key", sc.Permissions.Extensions[extFingerprint],
		"authorizedKeysLine", sc.Permissions.Extensions[extAuthorizedLine], "client", string(sc.ClientVersion()),
		"pty", g.pty, "portForwarding", g.portForwarding, "forcedCommand", g.forceCommand != nil,
		"permitOpen", len(g.permitOpen))

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

	c := &conn{srv: s, sc: sc, log: log, grants: g}
	go c.handleGlobalRequests(ctx, reqs)
	var wg sync.WaitGroup
	chanSlots := newSlots(s.cfg.MaxChannels)
	for nch := range chans {
		var handle func(context.Context, ssh.NewChannel)
		switch nch.ChannelType() {
		case "session":
			handle = c.handleSession
		case "direct-tcpip":
			handle = c.handleDirectTCPIP
		default:
			s.metrics.chansRejected.WithLabelValues("unknown_type").Inc()
			_ = nch.Reject(ssh.UnknownChannelType, "unsupported channel type "+nch.ChannelType())
			continue
		}
		if _, ok := chanSlots.tryAcquire(); !ok {
			s.metrics.chansRejected.WithLabelValues("limit").Inc()
			log.Info("channel rejected", "type", nch.ChannelType(), "reason", "limit", "max", s.cfg.MaxChannels)
			_ = nch.Reject(ssh.ResourceShortage, fmt.Sprintf("too many channels open on this connection (max %d)", s.cfg.MaxChannels))
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer chanSlots.release()
			handle(ctx, nch)
		}()
	}
	cancel()
	c.closeListeners()
	wg.Wait()
	log.Info("disconnected", "duration", time.Since(start).Round(time.Millisecond).String())
}

// conn is one authenticated client connection.
type conn struct {
	srv    *Server
	sc     *ssh.ServerConn
	log    *slog.Logger
	grants grants

	mu        sync.Mutex
	listeners map[string]net.Listener // remote forwards by "host:port"
}

// errLoginGrace reports a client that did not authenticate in time.
var errLoginGrace = errors.New("login grace time exceeded")

// handshake runs the SSH handshake and authentication, holding the
// unauthenticated-connection slots admit took (returned by release), and closes the connection if it takes
// longer than LoginGraceTime (sshd's LoginGraceTime). The timer is on the
// injected clock; closing the connection unblocks any read or write.
func (s *Server) handshake(nc net.Conn, release func()) (*ssh.ServerConn, <-chan ssh.NewChannel, <-chan *ssh.Request, error) {
	defer release()
	var expired atomic.Bool
	t := s.cfg.Clock.AfterFunc(s.cfg.LoginGraceTime, func() {
		expired.Store(true)
		nc.Close()
	})
	sc, chans, reqs, err := ssh.NewServerConn(nc, s.ssh)
	stopped := t.Stop()
	if err == nil && !stopped && expired.Load() {
		// Authenticated just as the timer closed the connection.
		sc.Close()
		err = errLoginGrace
	}
	if err != nil && expired.Load() {
		return nil, nil, nil, fmt.Errorf("%w (%s): %w", errLoginGrace, s.cfg.LoginGraceTime, err)
	}
	return sc, chans, reqs, err
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
	reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}), buildinfo.Collector())
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
