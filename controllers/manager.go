// Package controllers runs runplane's controllers in one controller-runtime
// manager (leader election, metrics, health probes): storage preparation
// (controllers/storage), the read-only accessor (controllers/accessor), the
// storage scheduling gate (controllers/gate), the egress restriction
// (controllers/egress), the SSH Service (controllers/sshservice) and the
// ResourceClaimTemplates of DRA GPU specs (controllers/claimtemplate).
package controllers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-logr/logr"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/controllers/accessor"
	"github.com/runplane/runplane/controllers/claimtemplate"
	"github.com/runplane/runplane/controllers/egress"
	"github.com/runplane/runplane/controllers/gate"
	"github.com/runplane/runplane/controllers/sshservice"
	"github.com/runplane/runplane/controllers/storage"
	"github.com/runplane/runplane/internal/metricsauth"
)

// Config configures Run.
type Config struct {
	// RESTConfig reaches the cluster; nil means ctrl.GetConfig() (kubeconfig
	// flag, KUBECONFIG, in-cluster).
	RESTConfig *rest.Config
	// Namespace is runplane's namespace: the leader-election Lease lives
	// there. Default api.DefaultNamespace.
	Namespace string
	// Image is the runplane image; copy Jobs run runplane-copy and accessor
	// Deployments run runplane-accessor from it. Required.
	Image string
	// PrepareDeadline bounds a prepare Job (activeDeadlineSeconds); default 6h.
	PrepareDeadline time.Duration
	// ImagePullTimeout is how long a prepare Pod may fail to pull its image
	// before the attempt is Failed; default 5m.
	ImagePullTimeout time.Duration
	// ClusterDomain forms accessor URLs; default cluster.local.
	ClusterDomain string
	// AccessorAllowedNamespaces selects namespaces, besides a PVC's own,
	// whose Pods may reach its accessor; nil: only its own.
	AccessorAllowedNamespaces *metav1.LabelSelector
	// Egress restricts runplane.io/egress Pods (controllers/egress). Start
	// from egress.DefaultSettings(); zero fields get its values, but the NATS
	// namespace defaults to Namespace (NATS's labels and port are required).
	Egress egress.Settings

	// MetricsAddr serves Prometheus metrics over HTTPS to scrapers RBAC
	// allows get on /metrics (internal/metricsauth; "0" disables); default
	// :8080.
	MetricsAddr string
	// ProbeAddr serves /healthz and /readyz ("0" disables); default :8081.
	ProbeAddr string
	// LeaderElection turns on leader election (on in the chart; off for a
	// single in-process instance in make dev and tests).
	LeaderElection bool
	// MetricsCert is where /metrics's certificate comes from: a CA kept in
	// a Secret, which scrapers verify (the chart's ServiceMonitor), or none:
	// controller-runtime's self-signed one.
	MetricsCert metricsauth.ServingCert
	// LeaderElectionID names the Lease; default runplane-controller.
	LeaderElectionID string

	// SkipNameValidation allows several managers in one process one after
	// another (tests restart the controller in-process); controller names
	// are otherwise unique per process because of their metrics.
	SkipNameValidation bool

	// Logger receives the manager's and controllers' logs; zero discards.
	Logger logr.Logger
}

func (c *Config) defaults() error {
	if c.Image == "" {
		return errors.New("controllers: Config.Image is required (the runplane image for copy and accessor Pods)")
	}
	if c.Namespace == "" {
		c.Namespace = api.DefaultNamespace
	}
	def := egress.DefaultSettings()
	if c.Egress.Enforcement == "" {
		c.Egress.Enforcement = def.Enforcement
	}
	if c.Egress.NATS.Namespace == "" {
		c.Egress.NATS.Namespace = c.Namespace
	}
	if c.Egress.DNS.Namespace == "" && len(c.Egress.DNS.PodLabels) == 0 && len(c.Egress.DNS.Ports) == 0 {
		c.Egress.DNS = def.DNS
	}
	if c.PrepareDeadline == 0 {
		c.PrepareDeadline = 6 * time.Hour
	}
	if c.ImagePullTimeout == 0 {
		c.ImagePullTimeout = 5 * time.Minute
	}
	if c.ClusterDomain == "" {
		c.ClusterDomain = "cluster.local"
	}
	if c.MetricsAddr == "" {
		c.MetricsAddr = ":8080"
	}
	if c.ProbeAddr == "" {
		c.ProbeAddr = ":8081"
	}
	if c.LeaderElectionID == "" {
		c.LeaderElectionID = "runplane-controller"
	}
	if c.RESTConfig == nil {
		rc, err := ctrl.GetConfig()
		if err != nil {
			return fmt.Errorf("controllers: kubernetes client config: %w", err)
		}
		c.RESTConfig = rc
	}
	return nil
}

// Run starts the manager and blocks until ctx is done or a controller fails.
func Run(ctx context.Context, cfg Config) error {
	mgr, err := NewManager(cfg)
	if err != nil {
		return err
	}
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("controllers: manager: %w", err)
	}
	return nil
}

// NewManager builds the manager with every controller registered, without
// starting it.
func NewManager(cfg Config) (ctrl.Manager, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("controllers: scheme: %w", err)
	}
	// Objects runplane creates are watched through their managed-by label
	// only.
	owned := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{api.LabelManagedBy: api.ManagedByController})}
	kube, err := kubernetes.NewForConfig(cfg.RESTConfig)
	if err != nil {
		return nil, fmt.Errorf("controllers: client: %w", err)
	}
	certLog := slog.New(slog.DiscardHandler)
	if cfg.Logger.GetSink() != nil {
		certLog = slog.New(logr.ToSlogHandler(cfg.Logger))
	}
	metricsCert, err := cfg.MetricsCert.Keeper(kube, certLog)
	if err != nil {
		return nil, fmt.Errorf("controllers: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg.RESTConfig, ctrl.Options{
		Scheme:     scheme,
		Logger:     cfg.Logger,
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(cfg.SkipNameValidation)},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&batchv1.Job{}:                      owned,
			&appsv1.Deployment{}:                owned,
			&corev1.Service{}:                   owned,
			&networkingv1.NetworkPolicy{}:       owned,
			&resourcev1.ResourceClaimTemplate{}: owned,
			// Only the GPU spec catalog (RBAC: that one ConfigMap).
			&corev1.ConfigMap{}: {
				Namespaces: map[string]cache.Config{cfg.Namespace: {}},
				Field:      fields.OneTermEqualSelector("metadata.name", api.CatalogConfigMap),
			},
		}},
		Metrics:                       metricsauth.ManagerOptions(cfg.MetricsAddr, metricsCert),
		HealthProbeBindAddress:        cfg.ProbeAddr,
		LeaderElection:                cfg.LeaderElection,
		LeaderElectionID:              cfg.LeaderElectionID,
		LeaderElectionNamespace:       cfg.Namespace,
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return nil, fmt.Errorf("controllers: new manager: %w", err)
	}
	if metricsCert != nil {
		if err := mgr.Add(metricsCert); err != nil {
			return nil, fmt.Errorf("controllers: metrics certificate: %w", err)
		}
		if err := ctrlmetrics.Registry.Register(metricsauth.ExpiryGauge(metricsCert)); err != nil {
			return nil, fmt.Errorf("controllers: metrics certificate expiry gauge: %w", err)
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("controllers: healthz: %w", err)
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("controllers: readyz: %w", err)
	}
	setups := []func(ctrl.Manager) error{
		func(m ctrl.Manager) error {
			return storage.Setup(m, storage.Options{Image: cfg.Image, Deadline: cfg.PrepareDeadline, ImagePullTimeout: cfg.ImagePullTimeout})
		},
		func(m ctrl.Manager) error {
			return accessor.Setup(m, accessor.Options{Image: cfg.Image, ClusterDomain: cfg.ClusterDomain, AllowedNamespaces: cfg.AccessorAllowedNamespaces})
		},
		gate.Setup,
		func(m ctrl.Manager) error { return egress.Setup(m, cfg.Egress) },
		sshservice.Setup,
		func(m ctrl.Manager) error { return claimtemplate.Setup(m, cfg.Namespace) },
	}
	for _, setup := range setups {
		if err := setup(mgr); err != nil {
			return nil, fmt.Errorf("controllers: %w", err)
		}
	}
	return mgr, nil
}
