package queue

import (
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/runplane/runplane/queue/callback"
	"github.com/runplane/runplane/queue/ingress"
	"github.com/runplane/runplane/queue/stream"
)

// callbackConfig reads the master key (CallbackKeyFile wins over
// Callbacks.MasterKey) and the target rules; nil when callbacks are off.
func callbackConfig(cfg Config) (*ingress.CallbackConfig, error) {
	key := cfg.Callbacks.MasterKey
	if f := cfg.CallbackKeyFile; f != "" {
		s, err := readSecretFile(f)
		if err != nil {
			return nil, fmt.Errorf("queue: callback signing key: %w", err)
		}
		if key, err = hex.DecodeString(s); err != nil {
			return nil, fmt.Errorf("queue: callback signing key in %s: not hex: %w", f, err)
		}
	}
	if len(key) == 0 {
		return nil, nil
	}
	if len(key) < 32 {
		return nil, fmt.Errorf("queue: callback signing key of %d bytes: at least 32", len(key))
	}
	targets, err := cfg.Callbacks.Targets()
	if err != nil {
		return nil, fmt.Errorf("queue: callback %w", err)
	}
	return &ingress.CallbackConfig{Targets: targets, MasterKey: key}, nil
}

// namespaceSource tells the namespaces' UIDs, which stamp every Record and
// key the callbacks' signatures: nss when set (tests), else the API server
// (get namespaces), else none without Kubernetes.
func namespaceSource(nss callback.Namespaces, rc *rest.Config) (callback.Namespaces, error) {
	switch {
	case nss != nil:
		return nss, nil
	case rc != nil:
		// Its own client: however often the signing-key endpoint is called,
		// the activator's scaling and the informers keep their rate.
		kube, err := limitedClient(rc, 20, 40)
		if err != nil {
			return nil, fmt.Errorf("queue: namespaces: %w", err)
		}
		// A UID read is kept 10s: new invocations and reads whose Record's
		// UID it matches; a mismatch and the signing-key endpoint read
		// fresh.
		return callback.NewKubeNamespaces(kube.CoreV1(), 10*time.Second), nil
	default:
		return callback.NoNamespaces{}, nil
	}
}

// newDeliverer is the callback sender, run with the activator: cfg's
// settings with the queue's key, store, namespaces, logger and registry.
func newDeliverer(cfg callback.Config, cc *ingress.CallbackConfig, nss callback.Namespaces, st *stream.Store, reg prometheus.Registerer, log *slog.Logger) (*callback.Deliverer, error) {
	cfg.Store, cfg.MasterKey, cfg.Namespaces, cfg.Logger, cfg.Registerer = st, cc.MasterKey, nss, log.With("component", "callbacks"), reg
	return callback.New(cfg)
}
