package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/runplane/runplane/internal/pki"
)

// serving returns the certificate getter and the Runnables that keep the
// certificate (and, self-managed, the webhook configurations) current.
func serving(ctx context.Context, client kubernetes.Interface, objects ctrlcache.Informers, cfg Config, metrics *Metrics, log *slog.Logger, ready *atomic.Bool) (func(*tls.ClientHelloInfo) (*tls.Certificate, error), []manager.Runnable, error) {
	if cfg.TLS.CertManager {
		w, err := pki.WatchFiles(filepath.Join(cfg.TLS.CertDir, "tls.crt"), filepath.Join(cfg.TLS.CertDir, "tls.key"),
			func(leaf *x509.Certificate) { metrics.certExpiry.Set(float64(leaf.NotAfter.Unix())) })
		if err != nil {
			return nil, nil, fmt.Errorf("webhook: %w", err)
		}
		ready.Store(true)
		return w.GetCertificate, []manager.Runnable{w}, nil
	}

	var trust atomic.Pointer[[]byte] // the caBundle the configurations get
	configs := &configReconciler{client: client, objects: objects, cfg: cfg, log: log, ready: ready, caBundle: func() []byte { return *trust.Load() }}
	opts := cfg.Certs
	opts.Name, opts.DNSNames, opts.IPAddresses = "runplane-webhook", cfg.TLS.DNSNames, cfg.TLS.IPs()
	k := &pki.Keeper{Client: client, Secret: pki.SecretRef{Namespace: cfg.Namespace, Name: cfg.TLS.SecretName}, Options: opts,
		CheckInterval: cfg.TLS.CheckInterval.Duration, Log: log,
		// The API server must accept a renewed certificate before it is presented.
		Trust: func(ctx context.Context, caBundle []byte) error {
			trust.Store(&caBundle)
			if err := configs.reconcile(ctx); err != nil {
				return fmt.Errorf("webhook configurations: %w", err)
			}
			return nil
		},
		Served: func(notAfter time.Time) { metrics.certExpiry.Set(float64(notAfter.Unix())) }}
	if err := k.Init(ctx); err != nil {
		return nil, nil, fmt.Errorf("webhook: %w", err)
	}
	caBundle := k.CABundle()
	trust.Store(&caBundle)
	return k.GetCertificate, []manager.Runnable{k, configs}, nil
}
