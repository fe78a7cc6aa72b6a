// Package webhook is runplane's admission webhook server: it mutates
// labelled Pods (webhook/mutate), validates claim annotations (webhook/pvc),
// keeps its TLS material (webhook/certs) and its webhook configuration
// objects, follows the GPU spec catalog, and serves Prometheus metrics and
// health endpoints. Run is the whole server; cmd/runplane-webhook and make
// dev call it.
package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
	"github.com/runplane/runplane/webhook/certs"
	"github.com/runplane/runplane/webhook/mutate"
)

// Config configures Run.
type Config struct {
	// RESTConfig reaches the API server.
	RESTConfig *rest.Config
	// Namespace is runplane's namespace: the catalog ConfigMap and the TLS
	// Secret live there, and admission skips it (default runplane-system).
	Namespace string
	// Addr is the HTTPS admission address (default :9443); Listener, when
	// set, is used instead (tests pass 127.0.0.1:0).
	Addr     string
	Listener net.Listener
	// HealthAddr serves /healthz, /readyz and /metrics over plain HTTP
	// (default :8081; "-" turns it off). HealthListener overrides it. The
	// same paths are also served on the HTTPS listener.
	HealthAddr     string
	HealthListener net.Listener
	// Injection is the platform side of Pod mutation (images, NATS).
	Injection mutate.Config
	TLS       TLSConfig
	Webhooks  WebhooksConfig
	Logger    *slog.Logger
}

// TLSConfig says where the serving certificate comes from.
type TLSConfig struct {
	// CertManager serves CertDir/tls.crt and tls.key (kept by cert-manager,
	// which also injects the caBundle): no Secret, no caBundle patching.
	CertManager bool
	CertDir     string
	// SecretName holds the self-managed CA and certificate (default
	// runplane-webhook-tls in Namespace).
	SecretName  string
	DNSNames    []string
	IPAddresses []net.IP
	// CheckInterval is how often the certificate is checked for renewal
	// (default 1h); certs.Options.RenewBefore decides when to renew.
	CheckInterval time.Duration
	Certs         certs.Options
}

// WebhooksConfig says which webhook configuration objects Run keeps.
type WebhooksConfig struct {
	// Name of the Mutating- and ValidatingWebhookConfiguration (default
	// runplane-webhook).
	Name string
	// Manage makes Run create and update both objects from Configurations
	// (make dev, tests). Otherwise (the chart owns them) Run only patches
	// their caBundle when it drifts.
	Manage bool
	// URL or Service, for Manage: see ConfigurationOptions.
	URL     string
	Service *admissionregistrationv1.ServiceReference
	// Resync re-checks the objects at least this often (default 1m); a
	// watch re-checks them at once when they change.
	Resync time.Duration
}

func (c *Config) defaults() error {
	if c.RESTConfig == nil {
		return errors.New("webhook: RESTConfig must be set")
	}
	if c.Namespace == "" {
		c.Namespace = api.DefaultNamespace
	}
	if c.Addr == "" {
		c.Addr = ":9443"
	}
	if c.HealthAddr == "" {
		c.HealthAddr = ":8081"
	}
	if c.TLS.SecretName == "" {
		c.TLS.SecretName = "runplane-webhook-tls"
	}
	if c.TLS.CheckInterval == 0 {
		c.TLS.CheckInterval = time.Hour
	}
	if c.TLS.CertManager && c.TLS.CertDir == "" {
		return errors.New("webhook: TLS.CertDir must be set with cert-manager")
	}
	if !c.TLS.CertManager && len(c.TLS.DNSNames) == 0 && len(c.TLS.IPAddresses) == 0 {
		return errors.New("webhook: TLS.DNSNames or TLS.IPAddresses must name the webhook's address")
	}
	if c.Webhooks.Name == "" {
		c.Webhooks.Name = DefaultConfigurationName
	}
	if c.Webhooks.Resync == 0 {
		c.Webhooks.Resync = time.Minute
	}
	if c.Webhooks.Manage && (c.Webhooks.URL == "") == (c.Webhooks.Service == nil) {
		return errors.New("webhook: exactly one of Webhooks.URL and Webhooks.Service must be set to manage the webhook configurations")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c.Injection.Validate()
}

// Run serves admission until ctx ends, then shuts its servers down. It
// fails early when the caches do not sync or TLS cannot be set up; once
// serving, /readyz reports whether the certificate is trusted (caBundle in
// place) and the catalog is synced.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.defaults(); err != nil {
		return err
	}
	log := cfg.Logger.With("component", "webhook")
	client, err := kubernetes.NewForConfig(cfg.RESTConfig)
	if err != nil {
		return fmt.Errorf("webhook: client: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	store, err := catalog.Watch(ctx, client, cfg.Namespace)
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	pvcs := factory.Core().V1().PersistentVolumeClaims()
	pcs := factory.Scheduling().V1().PriorityClasses()
	pvcInformer, pcInformer := pvcs.Informer(), pcs.Informer()
	factory.Start(ctx.Done())
	syncCtx, syncCancel := context.WithTimeout(ctx, time.Minute)
	defer syncCancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), pvcInformer.HasSynced, pcInformer.HasSynced) {
		return fmt.Errorf("webhook: claim and PriorityClass caches did not sync: %w", syncCtx.Err())
	}

	metrics := NewMetrics()
	mutator := &mutate.Mutator{
		Config:          cfg.Injection,
		Catalog:         store.Catalog,
		PVCs:            pvcLookup{lister: pvcs.Lister(), client: client},
		PriorityClasses: priorityClassLookup{lister: pcs.Lister(), client: client},
	}
	handler := NewHandler(mutator, metrics, log)

	var ready atomic.Bool
	getCert, certLoop, err := serving(ctx, client, cfg, metrics, log, &ready)
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.Handle(MutatePodsPath, handler)
	mux.Handle(ValidatePVCsPath, handler)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() || !store.HasSynced() {
			http.Error(w, "not ready: certificate or webhook configuration not in place yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}))

	ln := cfg.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.Addr); err != nil {
			return fmt.Errorf("webhook: listen %s: %w", cfg.Addr, err)
		}
	}
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: getCert},
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	servers := []*http.Server{srv}
	errc := make(chan error, 3)
	go func() { errc <- serveErr("admission", srv.ServeTLS(ln, "", "")) }()

	hln := cfg.HealthListener
	if hln == nil && cfg.HealthAddr != "-" {
		if hln, err = net.Listen("tcp", cfg.HealthAddr); err != nil {
			_ = srv.Close()
			return fmt.Errorf("webhook: listen %s: %w", cfg.HealthAddr, err)
		}
	}
	if hln != nil {
		hsrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, hsrv)
		go func() { errc <- serveErr("health", hsrv.Serve(hln)) }()
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); certLoop(ctx) }()
	log.Info("webhook serving", "addr", ln.Addr().String(), "namespace", cfg.Namespace)

	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	cancel()
	shutdownCtx, shutdownCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer shutdownCancel()
	for _, s := range servers {
		_ = s.Shutdown(shutdownCtx)
	}
	wg.Wait()
	return err
}

func serveErr(name string, err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("webhook: %s server: %w", name, err)
}

// serving returns the certificate getter and the loop that keeps the
// certificate and the webhook configurations current.
func serving(ctx context.Context, client kubernetes.Interface, cfg Config, metrics *Metrics, log *slog.Logger, ready *atomic.Bool) (func(*tls.ClientHelloInfo) (*tls.Certificate, error), func(context.Context), error) {
	if cfg.TLS.CertManager {
		src := &certs.FileSource{CertFile: cfg.TLS.CertDir + "/tls.crt", KeyFile: cfg.TLS.CertDir + "/tls.key"}
		c, err := src.Load()
		if err != nil {
			return nil, nil, fmt.Errorf("webhook: %w", err)
		}
		if c.Leaf != nil {
			metrics.certExpiry.Set(float64(c.Leaf.NotAfter.Unix()))
		}
		ready.Store(true)
		return src.GetCertificate, func(context.Context) {}, nil
	}

	opts := cfg.TLS.Certs
	opts.Namespace, opts.SecretName = cfg.Namespace, cfg.TLS.SecretName
	opts.DNSNames, opts.IPAddresses = cfg.TLS.DNSNames, cfg.TLS.IPAddresses
	bundle, _, err := certs.Ensure(ctx, client, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("webhook: %w", err)
	}
	var current atomic.Pointer[tls.Certificate]
	c, err := bundle.TLSCertificate()
	if err != nil {
		return nil, nil, fmt.Errorf("webhook: %w", err)
	}
	current.Store(c)
	metrics.certExpiry.Set(float64(bundle.NotAfter.Unix()))

	rec := &reconciler{client: client, cfg: cfg, log: log}
	if err := rec.reconcile(ctx, bundle.CABundle); err != nil {
		// The loop retries; the first admissions may fail TLS until then.
		log.Error("webhook configurations", "error", err)
	} else {
		ready.Store(true)
	}
	trigger := rec.watch(ctx)

	loop := func(ctx context.Context) {
		certTick := time.NewTicker(cfg.TLS.CheckInterval)
		defer certTick.Stop()
		resync := time.NewTicker(cfg.Webhooks.Resync)
		defer resync.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-certTick.C:
				b, changed, err := certs.Ensure(ctx, client, opts)
				if err != nil {
					log.Error("renewing the serving certificate", "error", err)
					continue
				}
				if changed || !bytes.Equal(b.CABundle, bundle.CABundle) || !bytes.Equal(b.CertPEM, bundle.CertPEM) {
					// Trust first, then serve: the API server must accept
					// the new certificate before it is presented.
					if err := rec.reconcile(ctx, b.CABundle); err != nil {
						log.Error("webhook configurations", "error", err)
						continue
					}
					c, err := b.TLSCertificate()
					if err != nil {
						log.Error("renewed certificate", "error", err)
						continue
					}
					bundle = b
					current.Store(c)
					metrics.certExpiry.Set(float64(b.NotAfter.Unix()))
					log.Info("serving certificate renewed", "notAfter", b.NotAfter)
				}
			case <-resync.C:
			case <-trigger:
			}
			if err := rec.reconcile(ctx, bundle.CABundle); err != nil {
				log.Error("webhook configurations", "error", err)
				continue
			}
			ready.Store(true)
		}
	}
	get := func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return current.Load(), nil }
	return get, loop, nil
}

// reconciler keeps the webhook configuration objects: whole objects when
// managing them, else only their caBundle.
type reconciler struct {
	client kubernetes.Interface
	cfg    Config
	log    *slog.Logger
}

// watch signals when either configuration object changes, so drift (say a
// reinstall that reset the caBundle) is repaired at once.
func (r *reconciler) watch(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	poke := func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { poke() }, UpdateFunc: func(any, any) { poke() }, DeleteFunc: func(any) { poke() },
	}
	factory := informers.NewSharedInformerFactoryWithOptions(r.client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "metadata.name=" + r.cfg.Webhooks.Name
	}))
	_, _ = factory.Admissionregistration().V1().MutatingWebhookConfigurations().Informer().AddEventHandler(handler)
	_, _ = factory.Admissionregistration().V1().ValidatingWebhookConfigurations().Informer().AddEventHandler(handler)
	factory.Start(ctx.Done())
	return ch
}

func (r *reconciler) reconcile(ctx context.Context, caBundle []byte) error {
	want, wantV := Configurations(ConfigurationOptions{
		Name: r.cfg.Webhooks.Name, Namespace: r.cfg.Namespace,
		URL: r.cfg.Webhooks.URL, Service: r.cfg.Webhooks.Service, CABundle: caBundle,
	})
	manage := r.cfg.Webhooks.Manage
	mapi := r.client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	err := reconcileObject(ctx, r, "MutatingWebhookConfiguration", want, mapi.Get, mapi.Create, mapi.Update,
		func(have *admissionregistrationv1.MutatingWebhookConfiguration) (*admissionregistrationv1.MutatingWebhookConfiguration, bool) {
			update := have.DeepCopy()
			changed := manage && have.Annotations[ConfigHashAnnotation] != want.Annotations[ConfigHashAnnotation]
			if changed {
				update.Webhooks, update.Annotations = want.Webhooks, mergeAnnotations(update.Annotations, want.Annotations)
			}
			for i := range update.Webhooks {
				changed = setCABundle(&update.Webhooks[i].ClientConfig, caBundle) || changed
			}
			return update, changed
		})
	if err != nil {
		return err
	}
	vapi := r.client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	return reconcileObject(ctx, r, "ValidatingWebhookConfiguration", wantV, vapi.Get, vapi.Create, vapi.Update,
		func(have *admissionregistrationv1.ValidatingWebhookConfiguration) (*admissionregistrationv1.ValidatingWebhookConfiguration, bool) {
			update := have.DeepCopy()
			changed := manage && have.Annotations[ConfigHashAnnotation] != wantV.Annotations[ConfigHashAnnotation]
			if changed {
				update.Webhooks, update.Annotations = wantV.Webhooks, mergeAnnotations(update.Annotations, wantV.Annotations)
			}
			for i := range update.Webhooks {
				changed = setCABundle(&update.Webhooks[i].ClientConfig, caBundle) || changed
			}
			return update, changed
		})
}

// reconcileObject creates the configuration when runplane manages it, and
// otherwise brings the existing one in line through sync (caBundle, and the
// webhooks themselves when managed).
func reconcileObject[T metav1.Object](ctx context.Context, r *reconciler, kind string, want T,
	get func(context.Context, string, metav1.GetOptions) (T, error),
	create func(context.Context, T, metav1.CreateOptions) (T, error),
	update func(context.Context, T, metav1.UpdateOptions) (T, error),
	sync func(have T) (T, bool),
) error {
	name := want.GetName()
	have, err := get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) && r.cfg.Webhooks.Manage:
		if _, err := create(ctx, want, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating %s %s: %w", kind, name, err)
		}
		r.log.Info("created "+kind, "name", name)
	case apierrors.IsNotFound(err):
		r.log.Warn(kind+" not found; the chart creates it", "name", name)
	case err != nil:
		return fmt.Errorf("reading %s %s: %w", kind, name, err)
	default:
		if next, changed := sync(have); changed {
			if _, err := update(ctx, next, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("updating %s %s: %w", kind, name, err)
			}
			r.log.Info("updated "+kind, "name", name)
		}
	}
	return nil
}

// setCABundle sets a webhook's caBundle and reports whether it changed.
func setCABundle(cc *admissionregistrationv1.WebhookClientConfig, caBundle []byte) bool {
	if bytes.Equal(cc.CABundle, caBundle) {
		return false
	}
	cc.CABundle = caBundle
	return true
}

func mergeAnnotations(have, want map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range have {
		out[k] = v
	}
	for k, v := range want {
		out[k] = v
	}
	return out
}
