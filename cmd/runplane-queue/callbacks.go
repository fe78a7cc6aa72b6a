package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/runplane/runplane/internal/bootstrapsecret"
	"github.com/runplane/runplane/queue"
)

// callbackFlags are the completion-callback flags. The master signing key
// is a Secret in runplane's own namespace (created at start when missing,
// like the bundled NATS's), never in a tenant's: every namespace's key is
// derived from it, and a tenant reads its own through the ingress.
type callbackFlags struct {
	secret, namespace, dir string
	allow, deny            string
}

func (f *callbackFlags) register(c *queue.Config) {
	flag.StringVar(&c.Callbacks.MasterKeyFile, "callback-signing-key-file", "", "file holding the completion callbacks' master signing key (hex, at least 32 bytes); empty with no -callback-signing-secret: callbacks are off")
	flag.StringVar(&f.secret, "callback-signing-secret", "", "Secret (key key) holding the callbacks' master signing key in -callback-secret-namespace, created when missing")
	flag.StringVar(&f.namespace, "callback-secret-namespace", "", "runplane's own namespace, where -callback-signing-secret lives")
	flag.StringVar(&f.dir, "callback-key-dir", "/var/run/runplane/bootstrap", "directory (memory-backed) where the signing key read from the Secret is written for the queue's own use")
	flag.StringVar(&f.allow, "callback-allow-cidrs", "", "comma-separated ranges a callback may reach although they are not public (an in-cluster receiver you vouch for)")
	flag.StringVar(&f.deny, "callback-deny-cidrs", "", "comma-separated ranges a callback may not reach although public (e.g. the cluster's Pod and Service ranges)")
	flag.IntVar(&c.Callbacks.MaxAttempts, "callback-max-attempts", 6, "POSTs of one completion callback before it is given up")
	flag.IntVar(&c.Callbacks.Workers, "callback-workers", 8, "completion callback POSTs in flight, all namespaces together")
	flag.IntVar(&c.Callbacks.NamespaceWorkers, "callback-namespace-workers", 2, "completion callback POSTs in flight of one namespace (at most -callback-workers): a tenant whose targets hang holds no more")
}

// apply fills c.Callbacks: the target rules, and the key file from the
// Secret when one is named.
func (f *callbackFlags) apply(ctx context.Context, rc *rest.Config, c *queue.Config) error {
	c.Callbacks.AllowCIDRs, c.Callbacks.DenyCIDRs = splitList(f.allow), splitList(f.deny)
	if f.secret == "" {
		return nil
	}
	if rc == nil || f.namespace == "" {
		return fmt.Errorf("-callback-signing-secret needs Kubernetes and -callback-secret-namespace")
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("callback signing key: %w", err)
	}
	data, err := bootstrapsecret.Ensure(ctx, client, f.namespace, f.secret, bootstrapLabels, func() (map[string][]byte, error) {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		return map[string][]byte{"key": []byte(hex.EncodeToString(b))}, nil
	}, "key")
	if err != nil {
		return fmt.Errorf("callback signing key: %w", err)
	}
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return fmt.Errorf("callback signing key: %w", err)
	}
	c.Callbacks.MasterKeyFile = filepath.Join(f.dir, "callback-key")
	if err := os.WriteFile(c.Callbacks.MasterKeyFile, data["key"], 0o600); err != nil {
		return fmt.Errorf("callback signing key: %w", err)
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for v := range strings.SplitSeq(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
