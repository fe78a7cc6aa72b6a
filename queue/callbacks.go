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

// CallbackOptions turn on completion callbacks (queue/callback).
type CallbackOptions struct {
	// MasterKeyFile holds the master signing key, hex (at least 32 bytes):
	// a Secret in runplane's own namespace, from which every namespace's
	// key is derived. Empty: callbacks are off (a callbackURL is a 400).
	MasterKeyFile string
	// MasterKey is the key itself (tests; MasterKeyFile wins).
	MasterKey []byte
	// AllowCIDRs are target ranges let through although not public (an
	// in-cluster receiver the operator vouches for); DenyCIDRs are refused
	// although public (e.g. the cluster's Pod and Service ranges when they
	// are public addresses).
	AllowCIDRs, DenyCIDRs []string
	// MaxAttempts, Backoff, Timeout, Workers, NamespaceWorkers:
	// callback.Config's.
	MaxAttempts      int
	Backoff          time.Duration
	Timeout          time.Duration
	Workers          int
	NamespaceWorkers int
}

// callbackConfig reads the master key and the target rules; nil when
// callbacks are off.
func callbackConfig(o CallbackOptions) (*ingress.CallbackConfig, error) {
	key := o.MasterKey
	if o.MasterKeyFile != "" {
		s, err := readSecretFile(o.MasterKeyFile)
		if err != nil {
			return nil, fmt.Errorf("queue: callback signing key: %w", err)
		}
		if key, err = hex.DecodeString(s); err != nil {
			return nil, fmt.Errorf("queue: callback signing key in %s: not hex: %w", o.MasterKeyFile, err)
		}
	}
	if len(key) == 0 {
		return nil, nil
	}
	if len(key) < 32 {
		return nil, fmt.Errorf("queue: callback signing key of %d bytes: at least 32", len(key))
	}
	allow, err := callback.ParsePrefixes(o.AllowCIDRs)
	if err != nil {
		return nil, fmt.Errorf("queue: callback allowed ranges: %w", err)
	}
	deny, err := callback.ParsePrefixes(o.DenyCIDRs)
	if err != nil {
		return nil, fmt.Errorf("queue: callback denied ranges: %w", err)
	}
	return &ingress.CallbackConfig{Targets: callback.Targets{Allow: allow, Deny: deny}, MasterKey: key}, nil
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
		kube, err := limitedClient(rc, ClientLimits{}, 20, 40)
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

// newDeliverer is the callback sender, run with the activator.
func newDeliverer(cc *ingress.CallbackConfig, nss callback.Namespaces, o CallbackOptions, st *stream.Store, reg prometheus.Registerer, log *slog.Logger) (*callback.Deliverer, error) {
	return callback.New(callback.Config{Store: st, MasterKey: cc.MasterKey, Namespaces: nss, Targets: cc.Targets, MaxAttempts: o.MaxAttempts,
		Backoff: o.Backoff, Timeout: o.Timeout, Workers: o.Workers, NamespaceWorkers: o.NamespaceWorkers, Logger: log.With("component", "callbacks"), Registerer: reg})
}
