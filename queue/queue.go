// Package queue wires the queue service: it connects to NATS, opens the
// JetStream stream and buckets (queue/stream), learns the pools from
// Deployments (queue/pool), serves the HTTP ingress (queue/ingress) and runs
// the activator (queue/activator) under a controller-runtime manager
// (leader election for the activator when asked). Run is what
// cmd/runplane-queue and `make dev` call.
package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/runplane/runplane/internal/callerauth"
	"github.com/runplane/runplane/internal/metricsauth"
	"github.com/runplane/runplane/internal/natscallout"
	"github.com/runplane/runplane/internal/natsconn"
	"github.com/runplane/runplane/internal/natstls"
	"github.com/runplane/runplane/internal/natsvarz"
	"github.com/runplane/runplane/queue/activator"
	"github.com/runplane/runplane/queue/callback"
	"github.com/runplane/runplane/queue/ingress"
	"github.com/runplane/runplane/queue/pool"
	"github.com/runplane/runplane/queue/shard"
	"github.com/runplane/runplane/queue/stream"
)

// Config configures the queue service.
type Config struct {
	// NATS is the connection to NATS (URL required).
	NATS NATS
	// NATSTLSKeeper, with NATS.TrustFile, keeps the bundled NATS's
	// certificate on every replica (natstls.Keeper): renewed in its
	// Secret, and each server serving another one asked to reload, through
	// the queue's system account user. Nil: the certificate is someone
	// else's (an external NATS).
	NATSTLSKeeper *natstls.Keeper
	// Callbacks turns on completion callbacks (queue/callback) with a
	// MasterKey (tests) or CallbackKeyFile: their settings, the
	// configuration file's section included; the queue sets Store,
	// Namespaces, Logger and Registerer (callbacks.go).
	Callbacks callback.Config
	// CallbackKeyFile holds the master signing key, hex (at least 32
	// bytes): a Secret in runplane's own namespace, from which every
	// namespace's key is derived. Neither it nor Callbacks.MasterKey:
	// callbacks are off (a callbackURL is a 400).
	CallbackKeyFile string
	// Namespaces tells the namespaces' UIDs (tests); default: the API
	// server (get namespaces) with RESTConfig, else none.
	Namespaces callback.Namespaces
	// Stream configures the JetStream resources (prefix, stream, replicas,
	// max age, duplicate window, buckets, record TTL).
	Stream stream.Config
	// Listen is the ingress address (default DefaultListen; "127.0.0.1:0"
	// picks a free port, reported through OnListen).
	Listen   string
	OnListen func(addr string)
	// Registry receives every metric of the queue and is what /metrics
	// serves. Nil (the binary): controller-runtime's, which the manager's
	// series are in too. Tests running several replicas in one process give
	// each its own (prometheus.NewRegistry()).
	Registry Registry
	// MetricsListen serves /metrics (the ingress's, the activator's, the
	// callout's and the manager's series) on a listener of its own, never
	// the ingress's, over TLS with a self-signed certificate, to scrapers
	// the API server authenticates and RBAC allows get on /metrics
	// (internal/metricsauth). "": not served; "127.0.0.1:0" picks a free
	// port, reported through OnMetricsListen. Without RESTConfig nothing can
	// authenticate a scraper: served to anyone only with
	// InsecureDisableCallerAuth, refused otherwise.
	MetricsListen   string
	OnMetricsListen func(addr string)
	// MetricsCert is where /metrics's certificate comes from: a CA kept in
	// a Secret, which scrapers verify (the chart's ServiceMonitor), or none:
	// a self-signed one made at start.
	MetricsCert metricsauth.ServingCert
	// RESTConfig enables Kubernetes: pools from Deployments, workers from
	// Pods, scaling, leader election. Nil: StaticPools are used and nothing
	// is scaled.
	RESTConfig *rest.Config
	// Namespace scopes the Deployments and Pods watched ("" = all).
	Namespace string
	// StaticPools are the known pools when RESTConfig is nil, each
	// "<namespace>/<pool>" ("<pool>" alone: namespace "default").
	StaticPools []string
	// StaticPolicies gives some of them another policy than the default
	// (by pool.StaticKey; tests).
	StaticPolicies map[string]pool.Policy
	// LeaderElection is who runs the activator (zero: this process), its
	// Leases in LeaseNamespace (default api.DefaultNamespace), this replica
	// in them Identity (default: host name and a random suffix).
	LeaderElection shard.LeaderElection
	LeaseNamespace string
	Identity       string
	// InsecureDisableCallerAuth serves the ingress to anyone who reaches it,
	// with no token: INSECURE, only for benchmarks and tests of the
	// unauthenticated baseline. By default every /v1 request and the seed
	// alias need a bearer token that the apiserver authenticates
	// (TokenReview) and RBAC authorizes (SubjectAccessReview on
	// serverless.runplane.io pools; internal/callerauth), which needs
	// RESTConfig.
	InsecureDisableCallerAuth bool
	// CallerAuth tunes the caches and limits of those reviews and their
	// own Kubernetes client (Rates.KubeQPS, KubeBurst), apart from the
	// callout's and the activator's: a flood of callers cannot starve
	// worker admission.
	CallerAuth callerauth.Options
	// CallerAuthorizer decides in place of those reviews (tests: callers
	// without an apiserver); it wins over InsecureDisableCallerAuth.
	CallerAuthorizer ingress.Authorizer
	// DisableIngress / DisableActivator run only one half.
	DisableIngress, DisableActivator bool
	// Decisions are the activator's settings (activator.Config.Decisions,
	// passed as they are): the workers section (heartbeat timeout and the
	// workers' interval it is checked against, silent hold, attempts) and
	// the fairness limits, which the ingress applies too: each pool's and
	// each namespace's backlog (429 beyond) and in-flight invocations.
	// Zero values take the activator's defaults.
	activator.Decisions
	DefaultTTLSeconds int
	MaxBodyBytes      int64
	// IngressHTTP bounds what a connection to the ingress may hold
	// (timeouts, unauthenticated connections; ingress.HTTPLimits).
	IngressHTTP ingress.HTTPLimits
	// MaxPayloadBytes bounds a payload and a response body (default 64
	// MiB; ingress.Config.MaxPayloadBytes).
	MaxPayloadBytes int64
	// Tick is the activator's period of checks (activator.Config.Tick).
	Tick time.Duration
	// Scaler replaces the Kubernetes scaler (benchmarks; with StaticPools).
	Scaler activator.Scaler
	Logger *slog.Logger

	// TracerProvider records the ingress's and the activator's spans
	// (nil: none; trace context is still propagated). See README "Traces".
	TracerProvider trace.TracerProvider
}

// Run serves until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	// controller-runtime's Runnables log through the context.
	ctx = logr.NewContext(ctx, logr.FromSlogHandler(log.Handler()))
	if cfg.NATS.URL == "" {
		return errors.New("queue: NATS URL is required")
	}
	// Refused before anything starts, defaulted as the activator will.
	workers := cfg.Workers
	workers.Default()
	if err := workers.Validate(); err != nil {
		return fmt.Errorf("queue: workers: %w", err)
	}
	if ptr.Deref(cfg.LeaderElection.LeaderElect, false) && cfg.RESTConfig == nil {
		return errors.New("queue: leader election needs a Kubernetes config")
	}
	cfg.LeaderElection.Default()
	if err := cfg.LeaderElection.Validate("leaderElection"); err != nil {
		return fmt.Errorf("queue: %w", err)
	}
	cfg.Stream.ActivatorShards = cfg.LeaderElection.Shards
	cfg.Identity = identity(cfg)
	if cfg.NATS.TrustFile != "" && cfg.RESTConfig == nil {
		return errors.New("queue: the NATS auth callout needs a Kubernetes config")
	}
	trust, err := loadTrust(cfg.NATS.TrustFile)
	if err != nil {
		return err
	}
	if cfg.NATSTLSKeeper != nil && trust == nil {
		return errors.New("queue: keeping the NATS certificate needs the NATS trust (the servers reload through the system account)")
	}
	tlsOpts, err := cfg.NATS.Client.Options()
	if err != nil {
		return fmt.Errorf("queue: %w", err)
	}
	cfg.Listen = cmp.Or(cfg.Listen, DefaultListen)
	opts := append(natsconn.Options("runplane-queue", 250*time.Millisecond, log), tlsOpts...)
	auth, err := natsAuthOptions(trust)
	if err != nil {
		return err
	}
	opts = append(opts, auth...)
	nc, err := nats.Connect(cfg.NATS.URL, opts...)
	if err != nil {
		return fmt.Errorf("connect to NATS %s: %w", cfg.NATS.URL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	var st *stream.Store
	if err := retryJetStream(ctx, log, "JetStream resources", func(ctx context.Context) (err error) {
		st, err = stream.Open(ctx, js, cfg.Stream)
		return err
	}); err != nil {
		return err
	}
	for _, skipped := range st.MigrationSkipped {
		log.Error("an old result could not be moved to the results stream; its invocation times out or is redelivered", "result", skipped)
	}

	var kube kubernetes.Interface
	var pools pool.Source
	// With Kubernetes, the manager's cache holds what the queue watches:
	// the pools' Deployments, and their ReplicaSets and Pods once an
	// activator runs (pool.CacheOptions).
	var mgr manager.Manager
	var podCache activator.Cache
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if cfg.RESTConfig != nil {
		kube, err = kubernetes.NewForConfig(cfg.RESTConfig)
		if err != nil {
			return fmt.Errorf("kubernetes client: %w", err)
		}
		if mgr, err = NewManager(cfg); err != nil {
			return err
		}
		podCache = mgr.GetCache()
		if pools, err = pool.NewInformer(ctx, mgr.GetCache(), log.With("component", "pools")); err != nil {
			return fmt.Errorf("queue: %w", err)
		}
	} else {
		sp := pool.Static{}
		for _, p := range cfg.StaticPools {
			ns, name, ok := strings.Cut(p, "/")
			if !ok {
				ns, name = ingress.DefaultNamespace, p
			}
			sp[pool.StaticKey(ns, name)] = pool.DefaultPolicy()
		}
		for k, pol := range cfg.StaticPolicies {
			sp[k] = pol
		}
		pools = sp
	}

	reg, unregister, err := registry(cfg)
	if err != nil {
		return err
	}
	defer unregister()
	if err := reg.Register(st.Collector(2 * time.Second)); err != nil {
		return fmt.Errorf("queue: metrics: %w", err)
	}
	// Metrics first: a queue that cannot serve them to scrapers safely does
	// not start. The manager's own metrics listener is off.
	var metrics []manager.Runnable
	if cfg.MetricsListen != "" {
		if metrics, err = metricsServer(ctx, cfg, kube, reg, log); err != nil {
			return err
		}
	}
	var runnables []manager.Runnable
	callbacks, err := callbackConfig(cfg)
	if err != nil {
		return err
	}
	nss, err := namespaceSource(cfg.Namespaces, cfg.RESTConfig)
	if err != nil {
		return err
	}
	if callbacks != nil && !cfg.DisableActivator {
		d, err := newDeliverer(cfg.Callbacks, callbacks, nss, st, reg, log)
		if err != nil {
			return err
		}
		runnables = append(runnables, d)
	}
	var revoke func(ns, pool, worker string)
	if trust != nil {
		calloutCfg := cfg.NATS.Callout
		calloutCfg.Default()
		calloutKube, err := limitedClient(cfg.RESTConfig, calloutCfg.KubeQPS, calloutCfg.KubeBurst)
		if err != nil {
			return err
		}
		resolver, closeResolver, err := openResolver(ctx, log, cfg.NATS.URL, tlsOpts, trust, cfg.Stream)
		if err != nil {
			return err
		}
		defer closeResolver()
		// The NATS servers' own health, read over the system account (nats-server
		// serves no Prometheus metrics): the NATSServerDown and certificate alerts.
		if err := reg.Register(&natsvarz.Collector{Sys: resolver.Conn, Wait: 500 * time.Millisecond, Expect: cfg.NATS.Servers, Log: log.With("component", "nats-varz")}); err != nil {
			return fmt.Errorf("queue: metrics: %w", err)
		}
		if k := cfg.NATSTLSKeeper; k != nil {
			k.Sys = resolver.Conn
			k.Log = cmp.Or(k.Log, log.With("component", "nats-tls"))
			runnables = append(runnables, k)
		}
		// Pushing RUNPLANE's account (openResolver) makes the servers enable its
		// JetStream again: for a moment its API has no responders.
		var revocations *natscallout.KVRevocations
		if err := retryJetStream(ctx, log, "the revocations bucket", func(ctx context.Context) (err error) {
			revocations, err = natscallout.OpenRevocations(ctx, js, cfg.Stream.WithDefaults().Replicas)
			return err
		}); err != nil {
			return err
		}
		accounts := natscallout.NewWorkerAccounts(trust, resolver, revocations, nil)
		revoke = newRevoker(accounts, reg, log).revokeFunc(ctx)
		calloutCfg.MaxPayload = cmp.Or(calloutCfg.MaxPayload, workerMaxPayload(cfg.Stream))
		co, err := newCallout(calloutCfg, nc, calloutKube, trust, accounts,
			st, st.Objects, st.Chunks, WorkerLayout(cfg.Stream.WithDefaults()), reg, log)
		if err != nil {
			return err
		}
		runnables = append(runnables, co)
	}
	if !cfg.DisableIngress {
		var gate ingress.Authorizer
		switch {
		case cfg.CallerAuthorizer != nil:
			gate = cfg.CallerAuthorizer
		case cfg.InsecureDisableCallerAuth:
			log.Warn("ingress caller authentication is OFF: anyone who reaches the ingress may invoke, read and cancel (insecure; benchmarks and tests only)")
		case kube == nil:
			return errors.New("queue: caller authentication needs a Kubernetes config (InsecureDisableCallerAuth turns it off: insecure)")
		default:
			ca := cfg.CallerAuth
			ca.Rates.Default()
			ca.Registerer = reg
			callerKube, err := limitedClient(cfg.RESTConfig, ca.KubeQPS, ca.KubeBurst)
			if err != nil {
				return err
			}
			g, err := callerauth.New(callerKube, ca)
			if err != nil {
				return fmt.Errorf("queue: %w", err)
			}
			gate = g
		}
		srv, err := ingress.New(ctx, ingress.Config{Store: st, NC: nc, Pools: pools, Auth: gate, InsecureNoAuth: gate == nil && cfg.InsecureDisableCallerAuth, Limits: cfg.Limits,
			DefaultTTLSeconds: cfg.DefaultTTLSeconds, MaxTTLSeconds: maxTTLSeconds(cfg.Stream), MaxBodyBytes: cfg.MaxBodyBytes, MaxPayloadBytes: cfg.MaxPayloadBytes, Logger: log, Registerer: reg,
			Callbacks: callbacks, Namespaces: nss, HTTP: cfg.IngressHTTP, TracerProvider: cfg.TracerProvider})
		if err != nil {
			return err
		}
		defer srv.Close()
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
		}
		if cfg.OnListen != nil {
			cfg.OnListen(ln.Addr().String())
		}
		log.Info("ingress listening", "addr", ln.Addr().String())
		// Served on every replica; the manager stops it after the activator.
		hs, hln := srv.HTTPServer(ln)
		runnables = append(runnables, &manager.Server{Name: "ingress", Listener: hln, ShutdownTimeout: ptr.To(5 * time.Second), Server: hs})
	}
	if !cfg.DisableActivator {
		act, err := activatorRunnable(cfg, activator.Config{Store: st, NC: nc, Pools: pools, Kube: kube, Cache: podCache,
			Decisions: cfg.Decisions, Tick: cfg.Tick, Scaler: cfg.Scaler, Revoke: revoke, Logger: log, Registerer: reg, TracerProvider: cfg.TracerProvider}, log)
		if err != nil {
			return err
		}
		runnables = append(runnables, act)
	}
	if len(runnables) == 0 {
		return errors.New("queue: both ingress and activator are disabled")
	}
	if metrics != nil {
		runnables = append(runnables, metrics...)
	}
	// Everything below returns only once the activator has stopped, before
	// nc closes (deferred above).
	if mgr == nil {
		return runAll(ctx, runnables)
	}
	for _, r := range runnables {
		if err := mgr.Add(r); err != nil {
			return fmt.Errorf("queue: add runnable: %w", err)
		}
	}
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("queue: %w", err)
	}
	return nil
}

// maxTTLSeconds bounds ttlSeconds: a day, and less than the Records live
// and the stream keeps a message (an invocation queued longer would lose its
// Record or its message).
func maxTTLSeconds(c stream.Config) int {
	c = c.WithDefaults()
	m := 86400
	for _, d := range []time.Duration{c.RecordTTL.Duration, c.MaxAge.Duration} {
		if d > 0 {
			m = min(m, max(int(d.Seconds())-60, 1))
		}
	}
	return m
}

// retryJetStream calls open every second, each call given 10 seconds, until
// it succeeds or ctx ends: a queue starts before (or while) the NATS servers
// elect a JetStream leader or enable an account's JetStream.
func retryJetStream(ctx context.Context, log *slog.Logger, what string, open func(context.Context) error) error {
	var last error
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if last = open(octx); last != nil {
			log.Warn("opening "+what+"; retrying", "err", last)
		}
		return last == nil, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("open %s: %w (last: %w)", what, err, last)
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", what, err)
	}
	return nil
}
