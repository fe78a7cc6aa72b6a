package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/kubernetes"

	"github.com/runplane/runplane/internal/bootstrapsecret"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/config"
)

// callbackKey, with callbacks.signingSecret, points c at the completion
// callbacks' master signing key: a Secret in runplane's own namespace
// (created at start when missing, like the bundled NATS's), never in a
// tenant's: every namespace's key is derived from it, and a tenant reads its
// own through the ingress.
func callbackKey(ctx context.Context, qc *config.QueueConfiguration, c *queue.Config) error {
	cb := qc.Callbacks
	if cb.SigningSecret == "" {
		return nil
	}
	if c.RESTConfig == nil {
		return fmt.Errorf("callbacks.signingSecret needs Kubernetes")
	}
	client, err := kubernetes.NewForConfig(c.RESTConfig)
	if err != nil {
		return fmt.Errorf("callback signing key: %w", err)
	}
	data, err := bootstrapsecret.Ensure(ctx, client, qc.Namespace, cb.SigningSecret, bootstrapLabels, func() (map[string][]byte, error) {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		return map[string][]byte{"key": []byte(hex.EncodeToString(b))}, nil
	}, "key")
	if err != nil {
		return fmt.Errorf("callback signing key: %w", err)
	}
	if err := os.MkdirAll(cb.KeyDir, 0o700); err != nil {
		return fmt.Errorf("callback signing key: %w", err)
	}
	c.CallbackKeyFile = filepath.Join(cb.KeyDir, "callback-key")
	if err := os.WriteFile(c.CallbackKeyFile, data["key"], 0o600); err != nil {
		return fmt.Errorf("callback signing key: %w", err)
	}
	return nil
}
