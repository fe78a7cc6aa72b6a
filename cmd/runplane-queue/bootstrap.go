package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/kubernetes"

	"github.com/runplane/runplane/internal/bootstrapsecret"
	"github.com/runplane/runplane/internal/natstls"
	"github.com/runplane/runplane/internal/pki"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/config"
)

// labels mark the Secrets as runplane's, created by the queue.
var bootstrapLabels = map[string]string{"app.kubernetes.io/name": "runplane", "app.kubernetes.io/component": "nats", "app.kubernetes.io/managed-by": "runplane-queue"}

// bootstrap creates the bundled NATS's Secrets (nats.bootstrap) in
// runplane's namespace, created at run time (internal/bootstrapsecret; the
// TLS one with internal/pki, renewed for as long as the queue runs:
// natstls.Keeper), and points c at files holding what the queue reads.
func bootstrap(ctx context.Context, qc *config.QueueConfiguration, c *queue.Config) error {
	b := qc.NATS.Bootstrap
	if b.TrustSecret == "" {
		return nil
	}
	if c.RESTConfig == nil {
		return fmt.Errorf("nats.bootstrap.trustSecret needs Kubernetes")
	}
	client, err := kubernetes.NewForConfig(c.RESTConfig)
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	trust, err := bootstrapsecret.Ensure(ctx, client, qc.Namespace, b.TrustSecret, bootstrapLabels,
		bootstrapsecret.NATSTrust(b.ResolverDir, queue.WorkerExports(c.Stream)), bootstrapsecret.TrustSecretKey, bootstrapsecret.TrustConfigKey)
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	if b.RouteSecret != "" {
		if _, err := bootstrapsecret.Ensure(ctx, client, qc.Namespace, b.RouteSecret, bootstrapLabels, bootstrapsecret.Password, "password"); err != nil {
			return fmt.Errorf("bootstrap: %w", err)
		}
	}
	c.NATS.TrustFile = filepath.Join(b.Dir, bootstrapsecret.TrustSecretKey)
	if err := os.WriteFile(c.NATS.TrustFile, trust[bootstrapsecret.TrustSecretKey], 0o600); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	if b.TLSSecret == "" {
		return nil
	}
	// The servers wait for this Secret; the queue trusts what it holds
	// (its CA file, in nats.bootstrap.dir) and publishes it for the webhook.
	k := &natstls.Keeper{Client: client, Secret: pki.SecretRef{Namespace: qc.Namespace, Name: b.TLSSecret},
		Cert:   pki.Options{Name: "runplane-nats", DNSNames: b.TLSDNSNames},
		CAFile: filepath.Join(b.Dir, "nats-ca.crt"), Labels: bootstrapLabels, Interval: b.TLSCheckInterval.Duration}
	if _, err := k.Ensure(ctx); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	c.NATS.CAFile, c.NATSTLSKeeper = k.CAFile, k
	return nil
}
