// Package config is runplane-queue's configuration file: one versioned,
// typed document (apiVersion runplane.io/v1alpha1, kind QueueConfiguration,
// in the style of kube-scheduler's KubeSchedulerConfiguration), decoded
// strictly (an unknown key is an error naming it), defaulted in one place
// (Default) and validated (Validate) before the queue starts. The chart
// renders it into a ConfigMap; the binary takes it with -config and has no
// other setting flags. Queue turns it into the queue.Config that
// queue.Run takes.
package config

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/internal/callerauth"
	"github.com/runplane/runplane/internal/metricsauth"
	"github.com/runplane/runplane/internal/tracing"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/activator"
	"github.com/runplane/runplane/queue/callback"
	"github.com/runplane/runplane/queue/pool"
	"github.com/runplane/runplane/queue/shard"
	"github.com/runplane/runplane/queue/stream"
)

// QueueConfiguration is runplane-queue's settings. Zero fields take
// Default's values; -1 means unbounded where a field says so.
type QueueConfiguration struct {
	metav1.TypeMeta `json:",inline"`

	// Namespace is runplane's namespace: the activator's Lease, the
	// bootstrapped Secrets (default runplane-system).
	Namespace string `json:"namespace,omitempty"`
	// WatchNamespace is the only namespace whose pool Deployments and Pods
	// are watched (default: all).
	WatchNamespace string `json:"watchNamespace,omitempty"`
	// StaticPools run the queue without Kubernetes: these pools
	// (namespace/pool, or pool in namespace default), no scaling, no leader
	// election, no caller authentication (needs
	// insecureDisableCallerAuth).
	StaticPools []string `json:"staticPools,omitempty"`
	// LeaderElection is who runs the activator (its Leases in Namespace).
	LeaderElection shard.LeaderElection `json:"leaderElection"`
	// Listen is the ingress address: the ingress API and the probes, never
	// /metrics (default :8080).
	Listen string `json:"listen,omitempty"`
	// Metrics serves /metrics over HTTPS to scrapers RBAC allows get on
	// /metrics.
	Metrics metricsauth.Settings `json:"metrics"`
	// Tracing exports spans over OTLP.
	Tracing tracing.Settings `json:"tracing"`
	NATS    NATS             `json:"nats"`
	// Stream is the JetStream resources (stream.Config).
	Stream stream.Config `json:"stream"`
	Limits pool.Limits   `json:"limits"`
	// Workers is how the activator judges workers (activator.Workers).
	Workers activator.Workers `json:"workers"`
	// MaxPayloadBytes bounds a payload and a response body (JSON text, or
	// decoded binary; beyond, 413); what does not fit in one NATS message
	// goes through the namespace's Object Store bucket (default 64 MiB).
	MaxPayloadBytes int64 `json:"maxPayloadBytes,omitempty"`
	// CallerAuth limits caller authentication's reviews.
	CallerAuth callerauth.Rates `json:"callerAuth"`
	Callbacks  Callbacks        `json:"callbacks"`
	// DisableIngress and DisableActivator run one half only.
	DisableIngress   bool `json:"disableIngress,omitempty"`
	DisableActivator bool `json:"disableActivator,omitempty"`
	// InsecureDisableCallerAuth serves the ingress without bearer tokens,
	// TokenReview and RBAC: INSECURE, for benchmarks and tests of the
	// unauthenticated baseline only.
	InsecureDisableCallerAuth bool `json:"insecureDisableCallerAuth,omitempty"`
}

// NATS is queue.NATS (bootstrap.trustSecret and tlsSecret replace its
// trustFile and caFile) and the bundled NATS's bootstrap.
type NATS struct {
	queue.NATS `json:",inline"`
	Bootstrap  Bootstrap `json:"bootstrap"`
}

// Bootstrap creates the bundled NATS's Secrets in Namespace when they do
// not exist (an existing one is used as it is).
type Bootstrap struct {
	// TrustSecret is the NATS trust chain's Secret (keys secret, read by
	// the queue, and trust.conf, included by nats-server); set, it turns
	// bootstrapping on and replaces nats.trustFile.
	TrustSecret string `json:"trustSecret,omitempty"`
	// ResolverDir is where nats-server's resolver stores account JWTs
	// (written into trust.conf; default /data/jwt).
	ResolverDir string `json:"resolverDir,omitempty"`
	// RouteSecret is the Secret of the NATS cluster's route password.
	RouteSecret string `json:"routeSecret,omitempty"`
	// TLSSecret is the Secret of the bundled NATS's CA and certificate for
	// TLSDNSNames, created and renewed here, checked every
	// TLSCheckInterval (default 1m); it replaces nats.caFile.
	TLSSecret        string          `json:"tlsSecret,omitempty"`
	TLSDNSNames      []string        `json:"tlsDNSNames,omitempty"`
	TLSCheckInterval metav1.Duration `json:"tlsCheckInterval,omitzero"`
	// Dir (memory-backed) receives the bootstrapped files for the queue's
	// own use (default /var/run/runplane/bootstrap).
	Dir string `json:"dir,omitempty"`
}

// Callbacks are completion callbacks: on with a signing key.
type Callbacks struct {
	// SigningSecret (key key) in Namespace holds the master signing key,
	// created when missing and written into KeyDir (default
	// /var/run/runplane/bootstrap); or SigningKeyFile holds it (hex, at
	// least 32 bytes). Neither: callbacks are off.
	SigningSecret  string `json:"signingSecret,omitempty"`
	SigningKeyFile string `json:"signingKeyFile,omitempty"`
	KeyDir         string `json:"keyDir,omitempty"`
	// Delivery: the target rules and the bounds of attempts and POSTs in
	// flight (queue/callback).
	callback.Delivery
}
