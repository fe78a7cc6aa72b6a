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
	namespace, password, issuer, route, dir string
}

// labels mark the Secrets as runplane's, created by the queue.
var bootstrapLabels = map[string]string{"app.kubernetes.io/name": "runplane", "app.kubernetes.io/component": "nats", "app.kubernetes.io/managed-by": "runplane-queue"}

// run ensures the Secrets and points c at files holding the queue's own
// password and issuer seed (the queue reads its credentials from files).
func (b bootstrap) run(ctx context.Context, rc *rest.Config, c *queue.Config) error {
	if b.password == "" || b.issuer == "" {
		return fmt.Errorf("-bootstrap-secrets-namespace needs -nats-password-secret and -nats-callout-issuer-secret")
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	pw, err := bootstrapsecret.Ensure(ctx, client, b.namespace, b.password, bootstrapLabels, bootstrapsecret.Password, "password")
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	issuer, err := bootstrapsecret.Ensure(ctx, client, b.namespace, b.issuer, bootstrapLabels, bootstrapsecret.AccountNKey, "seed", "issuer")
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	if b.route != "" {
		if _, err := bootstrapsecret.Ensure(ctx, client, b.namespace, b.route, bootstrapLabels, bootstrapsecret.Password, "password"); err != nil {
			return fmt.Errorf("bootstrap: %w", err)
		}
	}
	c.NATSPasswordFile, c.Callout.IssuerSeedFile = filepath.Join(b.dir, "password"), filepath.Join(b.dir, "seed")
	if err := os.WriteFile(c.NATSPasswordFile, pw["password"], 0o600); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	if err := os.WriteFile(c.Callout.IssuerSeedFile, issuer["seed"], 0o600); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	return nil
}
