package pki

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// DefaultCheckInterval is how often a Keeper checks its Secret by default.
const DefaultCheckInterval = time.Hour

// Keeper serves the certificate of a self-managed CA kept in a Secret
// (Ensure) and renews both before they expire: what the webhook serves to
// the API server and what the extender's /metrics serves to Prometheus,
// whose ServiceMonitor trusts the Secret's KeyCABundle. Replicas share the
// Secret, so a scraper verifies every replica with one CA.
type Keeper struct {
	Client  kubernetes.Interface
	Secret  SecretRef
	Options Options
	// CheckInterval is how often the Secret is checked (DefaultCheckInterval when zero).
	CheckInterval time.Duration
	// Trust, when set, is given a renewed bundle's CABundle before its
	// certificate is served, so clients learn the new CA first (the
	// webhook's configurations); an error keeps the old certificate.
	Trust func(ctx context.Context, caBundle []byte) error
	// Served, when set, is told the NotAfter of each certificate served
	// (a certificate-expiry gauge).
	Served func(notAfter time.Time)
	Log    *slog.Logger

	bundle  atomic.Pointer[Bundle]
	current atomic.Pointer[tls.Certificate]
}

// Init ensures the Secret and serves its certificate. Without it, Start
// does it first (retrying every second), and until then GetCertificate
// fails the handshake and CABundle is empty.
func (k *Keeper) Init(ctx context.Context) error {
	b, _, err := Ensure(ctx, k.Client, k.Secret, k.Options)
	if err != nil {
		return fmt.Errorf("serving certificate in Secret %s/%s: %w", k.Secret.Namespace, k.Secret.Name, err)
	}
	return k.serve(b)
}

// GetCertificate is tls.Config.GetCertificate: the certificate served now.
func (k *Keeper) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := k.current.Load(); c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("no certificate yet from Secret %s/%s", k.Secret.Namespace, k.Secret.Name)
}

// CABundle is what clients of the served certificate trust.
func (k *Keeper) CABundle() []byte {
	if b := k.bundle.Load(); b != nil {
		return b.CABundle
	}
	return nil
}

func (k *Keeper) serve(b *Bundle) error {
	c, err := b.TLSCertificate()
	if err != nil {
		return fmt.Errorf("certificate of Secret %s/%s: %w", k.Secret.Namespace, k.Secret.Name, err)
	}
	k.bundle.Store(b)
	k.current.Store(c)
	if k.Served != nil {
		k.Served(b.NotAfter)
	}
	return nil
}

// Start checks the Secret every CheckInterval until ctx ends (a
// controller-runtime Runnable). A failed check is logged and retried at
// the next one: the served certificate stays valid for months.
func (k *Keeper) Start(ctx context.Context) error {
	every := k.CheckInterval
	if every <= 0 {
		every = DefaultCheckInterval
	}
	if k.bundle.Load() == nil {
		err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
			if err := k.Init(ctx); err != nil {
				k.logError("loading the serving certificate", err)
				return false, nil
			}
			return true, nil
		})
		if err != nil {
			return nil // ctx ended
		}
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if err := k.Renew(ctx); err != nil {
				k.logError("renewing the serving certificate", err)
			}
		}
	}
}

func (k *Keeper) logError(msg string, err error) {
	if k.Log != nil {
		k.Log.Error(msg, "secret", k.Secret.Namespace+"/"+k.Secret.Name, "error", err)
	}
}

// Renew renews what is due in the Secret (or loads another replica's
// renewal) and serves it: trust first, then the certificate.
func (k *Keeper) Renew(ctx context.Context) error {
	b, changed, err := Ensure(ctx, k.Client, k.Secret, k.Options)
	if err != nil {
		return err
	}
	old := k.bundle.Load()
	if old == nil {
		return k.serve(b)
	}
	if !changed && bytes.Equal(b.CABundle, old.CABundle) && bytes.Equal(b.CertPEM, old.CertPEM) {
		return nil
	}
	if k.Trust != nil {
		// The new bundle still trusts the old CA, so clients may take it at once.
		if err := k.Trust(ctx, b.CABundle); err != nil {
			return fmt.Errorf("trusting the renewed CA: %w", err)
		}
	}
	if err := k.serve(b); err != nil {
		return err
	}
	if k.Log != nil {
		k.Log.Info("serving certificate renewed", "secret", k.Secret.Namespace+"/"+k.Secret.Name, "notAfter", b.NotAfter)
	}
	return nil
}
