package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/runplane/runplane/internal/bootstrapsecret"
	"github.com/runplane/runplane/queue"
)

// bootstrap is the -bootstrap-secrets-namespace flags: the bundled NATS's
// Secrets, created at run time (internal/bootstrapsecret).
type bootstrap struct {
	namespace, trust, route, dir, resolverDir string
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
	return nil
}
