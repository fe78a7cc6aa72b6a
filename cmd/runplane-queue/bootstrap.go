package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/runplane/runplane/internal/bootstrapsecret"
	"github.com/runplane/runplane/internal/natstls"
	"github.com/runplane/runplane/internal/pki"
	"github.com/runplane/runplane/queue"
)

// bootstrap is the -bootstrap-secrets-namespace flags: the bundled NATS's
// Secrets, created at run time (internal/bootstrapsecret; the TLS one with
// internal/pki, renewed for as long as the queue runs: natstls.Keeper).
type bootstrap struct {
	namespace, trust, route, dir, resolverDir string
	// tls is the Secret of the bundled NATS's CA and certificate, for
	// tlsNames, checked every tlsInterval.
	tls         string
	tlsNames    string
	tlsInterval time.Duration
}

// labels mark the Secrets as runplane's, created by the queue.
var bootstrapLabels = map[string]string{"app.kubernetes.io/name": "runplane", "app.kubernetes.io/component": "nats", "app.kubernetes.io/managed-by": "runplane-queue"}

// run ensures the Secrets and points c at a file holding the trust secret
// (the queue reads its credentials from files).
func (b bootstrap) run(ctx context.Context, rc *rest.Config, c *queue.Config) error {
	if b.trust == "" {
		return fmt.Errorf("-bootstrap-secrets-namespace needs -nats-trust-secret")
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	trust, err := bootstrapsecret.Ensure(ctx, client, b.namespace, b.trust, bootstrapLabels,
		bootstrapsecret.NATSTrust(b.resolverDir, queue.WorkerExports(c.Stream)), bootstrapsecret.TrustSecretKey, bootstrapsecret.TrustConfigKey)
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	if b.route != "" {
		if _, err := bootstrapsecret.Ensure(ctx, client, b.namespace, b.route, bootstrapLabels, bootstrapsecret.Password, "password"); err != nil {
			return fmt.Errorf("bootstrap: %w", err)
		}
	}
	c.NATSTrustFile = filepath.Join(b.dir, bootstrapsecret.TrustSecretKey)
	if err := os.WriteFile(c.NATSTrustFile, trust[bootstrapsecret.TrustSecretKey], 0o600); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	if b.tls == "" {
		return nil
	}
	// The servers wait for this Secret; the queue trusts what it holds
	// (its CA file, in -bootstrap-dir) and publishes it for the webhook.
	if c.NATSTLS.CAFile != "" {
		return fmt.Errorf("-nats-tls-secret keeps the CA file itself: drop -nats-ca-file")
	}
	k := &natstls.Keeper{Client: client, Secret: pki.SecretRef{Namespace: b.namespace, Name: b.tls},
		Cert:   pki.Options{Name: "runplane-nats", DNSNames: splitList(b.tlsNames)},
		CAFile: filepath.Join(b.dir, "nats-ca.crt"), Labels: bootstrapLabels, Interval: b.tlsInterval}
	if len(k.Cert.DNSNames) == 0 {
		return fmt.Errorf("-nats-tls-secret needs -nats-tls-dns-names")
	}
	if _, err := k.Ensure(ctx); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	c.NATSTLS.CAFile, c.NATSTLSKeeper = k.CAFile, k
	return nil
}
