package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/runplane/runplane/internal/pki"
)

// serving returns the certificate getter and the Runnables that keep the
// certificate (and, self-managed, the webhook configurations) current.
func serving(ctx context.Context, client kubernetes.Interface, cfg Config, metrics *Metrics, log *slog.Logger, ready *atomic.Bool) (func(*tls.ClientHelloInfo) (*tls.Certificate, error), []manager.Runnable, error) {
	if cfg.TLS.CertManager {
		w, err := pki.WatchFiles(filepath.Join(cfg.TLS.CertDir, "tls.crt"), filepath.Join(cfg.TLS.CertDir, "tls.key"),
			func(leaf *x509.Certificate) { metrics.certExpiry.Set(float64(leaf.NotAfter.Unix())) })
		if err != nil {
			return nil, nil, fmt.Errorf("webhook: %w", err)
		}
		ready.Store(true)
		return w.GetCertificate, []manager.Runnable{w}, nil
	}

	k := &certKeeper{client: client, cfg: cfg, metrics: metrics, log: log}
	k.opts = cfg.TLS.Certs
	k.opts.Name, k.opts.DNSNames, k.opts.IPAddresses = "runplane-webhook", cfg.TLS.DNSNames, cfg.TLS.IPAddresses
	bundle, _, err := pki.Ensure(ctx, client, k.secret(), k.opts)
	if err != nil {
		return nil, nil, fmt.Errorf("webhook: %w", err)
	}
	if err := k.serve(bundle); err != nil {
		return nil, nil, fmt.Errorf("webhook: %w", err)
	}
	k.configs = &configReconciler{client: client, cfg: cfg, log: log, ready: ready, caBundle: k.caBundle}
	get := func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return k.current.Load(), nil }
	return get, []manager.Runnable{k, k.configs}, nil
}

// certKeeper renews the self-managed CA and serving certificate in their
// Secret every CheckInterval, and serves a renewed certificate once the
// webhook configurations trust it.
type certKeeper struct {
	client  kubernetes.Interface
	cfg     Config
	opts    pki.Options
	metrics *Metrics
	log     *slog.Logger
	configs *configReconciler

	bundle  atomic.Pointer[pki.Bundle]      // served
	trust   atomic.Pointer[[]byte]          // the caBundle the configurations get
	current atomic.Pointer[tls.Certificate] // of bundle
}

func (k *certKeeper) secret() pki.SecretRef {
	return pki.SecretRef{Namespace: k.cfg.Namespace, Name: k.cfg.TLS.SecretName}
}

func (k *certKeeper) caBundle() []byte { return *k.trust.Load() }

func (k *certKeeper) serve(b *pki.Bundle) error {
	c, err := b.TLSCertificate()
	if err != nil {
		return err
	}
	k.trust.Store(&b.CABundle)
	k.bundle.Store(b)
	k.current.Store(c)
	k.metrics.certExpiry.Set(float64(b.NotAfter.Unix()))
	return nil
}

// Start is the manager Runnable: it checks the certificate until ctx ends.
func (k *certKeeper) Start(ctx context.Context) error {
	tick := time.NewTicker(k.cfg.TLS.CheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if err := k.renew(ctx); err != nil {
				k.log.Error("renewing the serving certificate", "error", err)
			}
		}
	}
}

func (k *certKeeper) renew(ctx context.Context) error {
	b, changed, err := pki.Ensure(ctx, k.client, k.secret(), k.opts)
	if err != nil {
		return err
	}
	old := k.bundle.Load()
	if !changed && bytes.Equal(b.CABundle, old.CABundle) && bytes.Equal(b.CertPEM, old.CertPEM) {
		return nil
	}
	// Trust first, then serve: the API server must accept the new
	// certificate before it is presented. The new bundle still trusts the
	// old CA, so the configurations may take it at once.
	k.trust.Store(&b.CABundle)
	if err := k.configs.reconcile(ctx); err != nil {
		return fmt.Errorf("webhook configurations: %w", err)
	}
	if err := k.serve(b); err != nil {
		return fmt.Errorf("renewed certificate: %w", err)
	}
	k.log.Info("serving certificate renewed", "notAfter", b.NotAfter)
	return nil
}
