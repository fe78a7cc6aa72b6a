package extender

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/metricsauth"
)

// Config configures an extender.
type Config struct {
	// RESTConfig reaches the API server.
	RESTConfig *rest.Config
	// Namespace holds the catalog ConfigMap and the leader-election Lease.
	// Default api.DefaultNamespace.
	Namespace string
	// Addr is the HTTPS listen address of filter, prioritize and bind.
	// Default "127.0.0.1:8443": in the chart the extender shares the
	// scheduler's Pod, so loopback reaches the scheduler and nothing else.
	Addr string
	// MetricsAddr, when set, serves /metrics, /healthz and /readyz on a
	// second HTTPS listener (the Service and the kubelet's probes reach it),
	// and Addr serves only the verbs. Empty: everything on Addr. /metrics
	// answers only scrapers RBAC allows get on /metrics (internal/metricsauth).
	MetricsAddr string
	// CertFile and KeyFile are the serving certificate, reloaded when the
	// files change (cert-manager renewing it). When both are empty a
	// certificate for TLSHosts is issued at startup by a fresh CA, whose
	// PEM is then Extender.CACert (what the scheduler config must trust).
	CertFile, KeyFile string
	// TLSHosts are the DNS names and IPs of a generated certificate.
	// Default localhost and 127.0.0.1.
	TLSHosts []string
	// MetricsCert is where the metrics listener's certificate comes from
	// (with MetricsAddr): a CA kept in a Secret, which scrapers verify (the
	// chart's ServiceMonitor). None: the verbs' certificate, which only
	// the Pod's own kube-scheduler can verify.
	MetricsCert metricsauth.ServingCert
	// LeaderElection makes the extender bind only while its manager holds
	// the Lease LeaseName in Namespace. Without it (and without
	// FollowLease) the extender always binds.
	LeaderElection bool
	LeaseName      string // default "runplane-extender"
	LeaseDuration  time.Duration
	RenewDeadline  time.Duration
	RetryPeriod    time.Duration
	// FollowLease, "namespace/name", replaces the extender's own election
	// when the extender runs in the same Pod as the runplane-scheduler: it
	// binds while that Lease (the scheduler's) is held by an identity of
	// this host (kube-scheduler's identity is "<hostname>_<uuid>"). The
	// scheduler leader then always talks to a binding extender.
	FollowLease string
	// ClaimTimeout bounds deleting a placeholder and waiting until it is
	// gone. Default 10s.
	ClaimTimeout time.Duration
	// StockNamespace, when set, is where the stock Deployments live: the
	// leader keeps StockConditionType in their status every
	// StockStatusPeriod (default 10s).
	StockNamespace    string
	StockStatusPeriod time.Duration
	// ReservationTTL bounds a filter's reservation without a bind. Default 30s.
	ReservationTTL time.Duration
	// ReservationImage is the container image of the reservation Pods the
	// leader binds where a GPU Pod preempts (reservations.go). Default
	// registry.k8s.io/pause:3.10, the webhook's pause image.
	ReservationImage string
	// MaxEvictionsPerPod and MaxEvictionsPerNode cap the victims evicted
	// for one GPU Pod and on one node in any minute (default 8 and 16);
	// PreemptBackoff is how long Pods of other schedulers on a node are
	// spared once an eviction there did not lead to a bind (default 2m).
	MaxEvictionsPerPod, MaxEvictionsPerNode int
	PreemptBackoff                          time.Duration
	// ManagedResources are the extended resources the runplane-scheduler's
	// configuration names as the extender's managedResources (the GPU
	// resource and, for MIG specs, their slices); default nvidia.com/gpu.
	// Every resource a catalog spec requests must be one of them
	// (catalog.Spec.CheckManaged): Start fails otherwise, and a spec that
	// a later catalog change breaks fails its Pods' filter with that error.
	ManagedResources []corev1.ResourceName
	// PprofAddr, when set, serves net/http/pprof there (plain HTTP; keep it
	// on loopback): how the benchmarks find where binds and scheduling
	// cycles go. Empty: off.
	PprofAddr string
	// Logger; slog.Default() when nil.
	Logger *slog.Logger
	// Clock judges Lease expiry and reservation age; the real clock when nil.
	Clock clock.Clock
}

// DefaultReservationImage is the image of reservation Pods.
const DefaultReservationImage = "registry.k8s.io/pause:3.10"

// DefaultLeaseName is the Lease the extender replicas compete for.
const DefaultLeaseName = "runplane-extender"

func (c *Config) defaults() error {
	if c.RESTConfig == nil {
		return errors.New("extender config: RESTConfig is required")
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return fmt.Errorf("extender config: certFile and keyFile must be set together (certFile %q, keyFile %q)", c.CertFile, c.KeyFile)
	}
	if c.Namespace == "" {
		c.Namespace = api.DefaultNamespace
	}
	if c.MetricsCert.Secret.Name != "" && c.MetricsAddr == "" {
		return fmt.Errorf("extender config: a metrics certificate Secret (%s) needs metricsAddr", c.MetricsCert.Secret.Name)
	}
	if c.Addr == "" {
		c.Addr = "127.0.0.1:8443"
	}
	if len(c.TLSHosts) == 0 {
		c.TLSHosts = []string{"localhost", "127.0.0.1"}
	}
	if c.FollowLease != "" {
		if ns, name, ok := strings.Cut(c.FollowLease, "/"); !ok || ns == "" || name == "" {
			return fmt.Errorf("extender config: followLease must be namespace/name, got %q", c.FollowLease)
		}
		if c.LeaderElection {
			return errors.New("extender config: leaderElection and followLease are exclusive")
		}
	}
	if c.LeaseName == "" {
		c.LeaseName = DefaultLeaseName
	}
	if c.LeaseDuration <= 0 {
		c.LeaseDuration = 15 * time.Second
	}
	if c.RenewDeadline <= 0 {
		c.RenewDeadline = 10 * time.Second
	}
	if c.RetryPeriod <= 0 {
		c.RetryPeriod = 2 * time.Second
	}
	if c.StockStatusPeriod <= 0 {
		c.StockStatusPeriod = 10 * time.Second
	}
	if c.ReservationImage == "" {
		c.ReservationImage = DefaultReservationImage
	}
	if c.ClaimTimeout <= 0 {
		c.ClaimTimeout = 10 * time.Second
	}
	if len(c.ManagedResources) == 0 {
		c.ManagedResources = []corev1.ResourceName{api.DefaultGPUResource}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	return nil
}
