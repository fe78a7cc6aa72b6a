// Package webhook is runplane's admission webhook server, a
// controller-runtime manager: it mutates labelled Pods (webhook/mutate),
// checks ephemeral containers and the ResourceClaims a Pod names
// (webhook/podclaims), validates claim annotations (webhook/pvc)
// behind controller-runtime's webhook server, defines runplane's
// ValidatingAdmissionPolicies (Policies), keeps its TLS material (internal/pki) and its webhook
// configuration objects, follows the GPU spec catalog, and serves
// Prometheus metrics and health endpoints. Run is the whole server;
// cmd/runplane-webhook and make dev call it.
package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/runplane/runplane/catalog"
	"github.com/runplane/runplane/internal/metricsauth"
	"github.com/runplane/runplane/internal/natstls"
	"github.com/runplane/runplane/internal/pki"
	"github.com/runplane/runplane/webhook/config"
	"github.com/runplane/runplane/webhook/mutate"
	"github.com/runplane/runplane/webhook/podclaims"
)

// Config configures Run: the settings of runplane-webhook's configuration
// file (webhook/config, embedded: defaulted and validated here, so make dev
// and tests get the binary's defaults) and the process's parts.
type Config struct {
	config.WebhookConfiguration
	// RESTConfig reaches the API server.
	RESTConfig *rest.Config
	// Listener, when set, is the HTTPS listener instead of one on Addr
	// (tests pass 127.0.0.1:0); Run serves on it and closes it.
	Listener net.Listener
	// HealthListener, when set, serves /healthz and /readyz instead of
	// HealthAddr. The HTTPS listener serves them too, and /metrics, only to
	// scrapers RBAC allows get on /metrics (internal/metricsauth): their
	// token never travels in clear.
	HealthListener net.Listener
	// Certs tunes the self-managed certificate (tests: validity and
	// renewal); its names are TLS.DNSNames and TLS.IPAddresses.
	Certs pki.Options
	// GPUPolicy, with Webhooks.Manage: the GPUs of the runplane-gpu policy
	// (default DefaultGPUPolicy()).
	GPUPolicy *GPUPolicy
	// TierGrantorGroups, with Webhooks.Manage: PolicyOptions.TierGrantorGroups.
	TierGrantorGroups []string
	Logger            *slog.Logger
}

func (c *Config) defaults() error {
	if c.RESTConfig == nil {
		return errors.New("webhook: RESTConfig must be set")
	}
	c.Default()
	if err := c.Validate(); err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	if c.GPUPolicy == nil {
		c.GPUPolicy = DefaultGPUPolicy()
		c.GPUPolicy.DeviceClasses = c.GPUDeviceClasses
	}
	// A Pod may name no claim of a class the policies count as a GPU's.
	c.GPUDeviceClasses = slices.Concat(c.GPUDeviceClasses, c.GPUPolicy.DeviceClasses)
	// Every tier GPU Pods may name is kept to GPU Pods, also under a
	// caller's own GPUPolicy.
	if len(c.GPUPolicy.WorkloadPriorityClasses) == 0 {
		c.GPUPolicy.WorkloadPriorityClasses = c.Injection.AllowedWorkloadPriorityClasses()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Run serves admission until ctx ends, then shuts its servers down
// gracefully. It fails early when TLS cannot be set up; it serves
// admission once the manager's caches (the catalog and NATS CA among
// them) have synced, and /readyz reports whether the certificate is
// trusted (caBundle in place) and the caches are synced.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.defaults(); err != nil {
		return err
	}
	log := cfg.Logger.With("component", "webhook")
	ln := cfg.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.Addr); err != nil {
			return fmt.Errorf("webhook: listening on %s: %w", cfg.Addr, err)
		}
	}
	// The manager's server closes ln when it stops; this closes it when
	// Run fails before that server ran.
	defer func() {
		if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			log.Error("closing the webhook listener", "err", err)
		}
	}()
	cfg.Addr = ln.Addr().String()
	kube, err := kubernetes.NewForConfig(cfg.RESTConfig)
	if err != nil {
		return fmt.Errorf("webhook: client: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	mgr, err := manager.New(cfg.RESTConfig, manager.Options{
		Logger: logr.FromSlogHandler(log.Handler()),
		Cache:  cacheOptions(cfg),
		// /metrics (controller-runtime's registry) and the health endpoints
		// are served on the HTTPS listener, and the health endpoints on
		// HealthAddr too (below).
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
		GracefulShutdownTimeout: ptr.To(shutdownGrace),
	})
	if err != nil {
		return fmt.Errorf("webhook: manager: %w", err)
	}
	for _, obj := range []client.Object{&corev1.PersistentVolumeClaim{}, &schedulingv1.PriorityClass{}, &corev1.Namespace{}} {
		// Started with the manager, not at the first admission.
		if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
			return fmt.Errorf("webhook: cache of %T: %w", obj, err)
		}
	}
	catalogInformer, err := mgr.GetCache().GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		return fmt.Errorf("webhook: cache of the catalog: %w", err)
	}
	store, err := catalog.Follow(catalogInformer, cfg.Namespace)
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	metrics, err := NewMetrics().registered()
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	objects := lookup{cache: mgr.GetCache(), api: mgr.GetAPIReader()}
	mutator := &mutate.Mutator{
		Config:          cfg.Injection,
		Catalog:         store.Catalog,
		PVCs:            objects,
		PriorityClasses: objects,
		Namespaces:      objects,
	}
	caSynced := func() bool { return true }
	if cfg.Injection.NATSServerName != "" {
		// The queue (or the chart, for an external NATS) publishes it.
		ca, err := followCA(ctx, mgr, cfg.Namespace)
		if err != nil {
			return fmt.Errorf("webhook: NATS CA: %w", err)
		}
		mutator.NATSCA = ca.Bundle
		caSynced = ca.HasSynced
	}
	var ready, cacheSynced atomic.Bool
	getCert, keepers, err := serving(ctx, kube, mgr.GetCache(), cfg, metrics, log, &ready)
	if err != nil {
		return err
	}

	checks := map[string]healthz.Checker{"certificate": func(*http.Request) error {
		if !ready.Load() {
			return errors.New("certificate or webhook configuration not in place yet")
		}
		return nil
	}, "cache": func(*http.Request) error {
		if !cacheSynced.Load() {
			return errors.New("claim, PriorityClass and Namespace caches not synced")
		}
		return nil
	}, "catalog": func(*http.Request) error {
		if !store.HasSynced() {
			return errors.New("catalog not synced")
		}
		return nil
	}, "nats-ca": func(*http.Request) error {
		if !caSynced() {
			return errors.New("NATS CA not synced")
		}
		return nil
	}}
	metricsHandler, err := metricsauth.Handler(cfg.RESTConfig, mgr.GetLogger(), ctrlmetrics.Registry)
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	// The HTTPS listener: admission, the health endpoints and /metrics.
	mux := healthMux(checks)
	mux.Handle("GET "+metricsauth.Path, metricsHandler)
	// controller-runtime's webhook server instruments every hook Register
	// adds (controller_runtime_webhook_*); it is served below on ln, not
	// started, because its Start opens a listener of its own — closing a
	// test's 127.0.0.1:0 listener to let it re-listen on the port lost the
	// port to another process once in 873 tests (make dev: "bind: address
	// already in use").
	srv := webhook.NewServer(webhook.Options{WebhookMux: mux})
	validator := &podValidator{claims: objects, gpuClasses: func() []string { return podclaims.Classes(cfg.GPUDeviceClasses, store.Catalog()) }, log: log}
	hs, err := hooks(mutator, validator, cfg.Namespace, metrics, log)
	if err != nil {
		return err
	}
	for path, h := range hs {
		srv.Register(path, h)
	}
	// Set once the cache has synced (a probe must not wait for it).
	synced := manager.RunnableFunc(func(ctx context.Context) error {
		cacheSynced.Store(mgr.GetCache().WaitForCacheSync(ctx))
		return nil
	})
	// Admission is served once the caches have synced (the manager starts
	// a webhook.Server before them): a Pod is never judged by an empty
	// catalog or a missing NATS CA.
	https := &manager.Server{
		Name:   "webhook",
		Server: &http.Server{Handler: srv.WebhookMux(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 90 * time.Second},
		// HTTP/2 first, as controller-runtime's webhook server offers it:
		// the API server then sends concurrent admission calls over one
		// connection instead of a TLS handshake each.
		Listener: tls.NewListener(ln, &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: getCert, NextProtos: []string{"h2", "http/1.1"}}),
		// Below the manager's grace, which every runnable must end
		// within: net/http's Shutdown waits up to 5 s for a connection
		// that has sent no request yet, and a bound equal to the grace
		// failed a stop on it (TestStorageGate, once in a whole run). An
		// admission call is answered in milliseconds.
		ShutdownTimeout: ptr.To(shutdownGrace - 2*time.Second),
	}
	runnables := append([]manager.Runnable{afterCaches{https}, synced}, keepers...)
	if cfg.HealthListener != nil || cfg.HealthAddr != "0" {
		runnables = append(runnables, &manager.Server{Name: "health", Listener: cfg.HealthListener,
			Server: &http.Server{Addr: cfg.HealthAddr, Handler: healthMux(checks), ReadHeaderTimeout: 10 * time.Second}})
	}
	for _, r := range runnables {
		if err := mgr.Add(r); err != nil {
			return fmt.Errorf("webhook: %w", err)
		}
	}
	log.Info("webhook serving", "addr", cfg.Addr, "namespace", cfg.Namespace)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	return nil
}

// shutdownGrace is how long the manager gives its runnables to end once
// Run's context is done.
const shutdownGrace = 5 * time.Second

// afterCaches is a Runnable the manager starts once its caches have
// synced (a "non-leader-election" one), whatever else r is.
type afterCaches struct{ manager.Runnable }

func (afterCaches) NeedLeaderElection() bool { return false }

// cacheOptions is what the manager's cache keeps, every object without its
// managed fields: what admission reads (lookup: PersistentVolumeClaims,
// PriorityClasses, Namespaces), the catalog ConfigMap alone, and of the
// webhook configurations only runplane's (RBAC grants list and watch of
// those names only).
func cacheOptions(cfg Config) ctrlcache.Options {
	ours := ctrlcache.ByObject{Field: fields.OneTermEqualSelector("metadata.name", cfg.Webhooks.Name)}
	return ctrlcache.Options{
		DefaultTransform: ctrlcache.TransformStripManagedFields(),
		ByObject: map[client.Object]ctrlcache.ByObject{
			&corev1.ConfigMap{}: catalog.CacheConfig(cfg.Namespace),
			&admissionregistrationv1.MutatingWebhookConfiguration{}:   ours,
			&admissionregistrationv1.ValidatingWebhookConfiguration{}: ours,
		},
	}
}

// followCA follows the NATS CA ConfigMap through a second cache of the
// manager's: a cache keeps one informer per kind, the manager's keeps the
// catalog ConfigMap, and RBAC grants list and watch of these two
// ConfigMaps by name only (one field selector each).
func followCA(ctx context.Context, mgr manager.Manager, namespace string) (*natstls.CAStore, error) {
	c, err := ctrlcache.New(mgr.GetConfig(), ctrlcache.Options{
		HTTPClient: mgr.GetHTTPClient(), Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		DefaultTransform: ctrlcache.TransformStripManagedFields(),
		ByObject:         map[client.Object]ctrlcache.ByObject{&corev1.ConfigMap{}: natstls.CACacheConfig(namespace)},
	})
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	inf, err := c.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	store, err := natstls.FollowCA(inf, namespace)
	if err != nil {
		return nil, err
	}
	// Started, and waited for, with the manager's own cache.
	if err := mgr.Add(managerCache{c}); err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	return store, nil
}

// managerCache is a cache the manager starts and waits for among its
// caches (those a Runnable's GetCache names).
type managerCache struct{ ctrlcache.Cache }

func (c managerCache) GetCache() ctrlcache.Cache { return c.Cache }

// healthMux serves /healthz and /readyz (checks).
func healthMux(checks map[string]healthz.Checker) *http.ServeMux {
	mux := http.NewServeMux()
	for path, h := range map[string]http.Handler{
		"/healthz": &healthz.Handler{Checks: map[string]healthz.Checker{"ping": healthz.Ping}},
		"/readyz":  &healthz.Handler{Checks: checks},
	} {
		mux.Handle("GET "+path, http.StripPrefix(path, h))
		mux.Handle("GET "+path+"/", http.StripPrefix(path, h))
	}
	return mux
}
