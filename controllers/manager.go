// Package controllers runs runplane's controllers in one controller-runtime
// manager (leader election, metrics, health probes): storage preparation
// (controllers/storage), the read-only accessor (controllers/accessor), the
// storage scheduling gate (controllers/gate), the egress restriction
// (controllers/egress), the SSH Service (controllers/sshservice) and the
// ResourceClaimTemplates of DRA GPU specs (controllers/claimtemplate).
package controllers

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/go-logr/logr"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	resourcev1 "k8s.io/api/resource/v1"
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
	"github.com/runplane/runplane/controllers/config"
	"github.com/runplane/runplane/controllers/egress"
	"github.com/runplane/runplane/controllers/gate"
	"github.com/runplane/runplane/controllers/sshservice"
	"github.com/runplane/runplane/controllers/storage"
	"github.com/runplane/runplane/internal/metricsauth"
)

// Config configures Run: the settings of runplane-controller's
// configuration file (controllers/config, embedded: defaulted and
// validated here, so make dev and tests get the binary's defaults) and the
// process's parts.
type Config struct {
	config.ControllerConfiguration
	// RESTConfig reaches the cluster; nil means ctrl.GetConfig() (kubeconfig
	// flag, KUBECONFIG, in-cluster).
	RESTConfig *rest.Config
	// SkipNameValidation allows several managers in one process one after
	// another (tests restart the controller in-process); controller names
	// are otherwise unique per process because of their metrics.
	SkipNameValidation bool
	// Logger receives the manager's and controllers' logs; zero discards.
	Logger logr.Logger
}

func (c *Config) defaults() error {
	c.Default()
	if err := c.Validate(); err != nil {
		return fmt.Errorf("controllers: %w", err)
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
	servingCert, err := cfg.Metrics.ServingCert()
	if err != nil {
		return nil, fmt.Errorf("controllers: %w", err)
	}
	metricsCert, err := servingCert.Keeper(kube, certLog)
	if err != nil {
		return nil, fmt.Errorf("controllers: %w", err)
	}
	metricsOpts, err := metricsauth.ManagerOptions(cfg.Metrics.BindAddress, metricsCert)
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
		Metrics:                       metricsOpts,
		HealthProbeBindAddress:        cfg.HealthAddr,
		LeaderElection:                *cfg.LeaderElection.LeaderElect,
		LeaderElectionID:              cfg.LeaderElection.ResourceName,
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
		if err := metricsauth.RegisterExpiry(ctrlmetrics.Registry, metricsCert); err != nil {
			return nil, fmt.Errorf("controllers: %w", err)
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("controllers: healthz: %w", err)
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("controllers: readyz: %w", err)
	}
	accessorNamespaces, err := cfg.AccessorNamespaces()
	if err != nil {
		return nil, fmt.Errorf("controllers: %w", err)
	}
	setups := []func(ctrl.Manager) error{
		func(m ctrl.Manager) error {
			return storage.Setup(m, storage.Options{Image: cfg.Image, Deadline: cfg.PrepareDeadline.Duration, ImagePullTimeout: cfg.ImagePullTimeout.Duration})
		},
		func(m ctrl.Manager) error {
			return accessor.Setup(m, accessor.Options{Image: cfg.Image, ClusterDomain: cfg.ClusterDomain, AllowedNamespaces: accessorNamespaces})
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
