// Package config is runplane-controller's configuration file: one
// versioned, typed document (apiVersion runplane.io/v1alpha1, kind
// ControllerConfiguration), read by internal/configfile (strict: an unknown
// key is an error naming it), defaulted in one place (Default) and
// validated (Validate). The chart renders it into the ConfigMap
// runplane-controller; the binary takes it with -config. controllers.Config
// embeds it, so the manager reads these values as they are, and defaults
// and validates them the same way when make dev and tests build it
// in-process.
package config

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/controllers/egress"
	"github.com/runplane/runplane/internal/configfile"
	"github.com/runplane/runplane/internal/metricsauth"
)

// ControllerConfiguration is runplane-controller's settings. Zero fields
// take Default's values.
type ControllerConfiguration struct {
	metav1.TypeMeta `json:",inline"`

	// Namespace is runplane's namespace: the leader-election Lease and the
	// catalog live there (default runplane-system).
	Namespace string `json:"namespace,omitempty"`
	// Image is the runplane image; copy Jobs run runplane-copy and accessor
	// Deployments run runplane-accessor from it. Required.
	Image string `json:"image,omitempty"`
	// PrepareDeadline bounds a prepare Job (activeDeadlineSeconds; default
	// 6h).
	PrepareDeadline metav1.Duration `json:"prepareDeadline,omitzero"`
	// ImagePullTimeout is how long a prepare Pod may fail to pull its image
	// before the attempt is Failed (default 5m).
	ImagePullTimeout metav1.Duration `json:"imagePullTimeout,omitzero"`
	// ClusterDomain forms accessor URLs (default cluster.local).
	ClusterDomain string `json:"clusterDomain,omitempty"`
	// AccessorAllowedNamespaces is a label selector (kubectl's syntax, e.g.
	// "team=a,env in (dev)") of namespaces, besides a PVC's own, whose Pods
	// may reach its accessor (default "": none).
	AccessorAllowedNamespaces string `json:"accessorAllowedNamespaces,omitempty"`
	// Egress restricts runplane.io/egress Pods (controllers/egress); zero
	// fields get egress.DefaultSettings' values, but the NATS namespace
	// defaults to Namespace.
	Egress egress.Settings `json:"egress"`
	// Metrics serves /metrics over HTTPS to scrapers RBAC allows get on
	// /metrics (internal/metricsauth).
	Metrics metricsauth.Settings `json:"metrics"`
	// HealthAddr serves /healthz and /readyz (default :8081; "0" turns it
	// off).
	HealthAddr     string         `json:"healthAddr,omitempty"`
	LeaderElection LeaderElection `json:"leaderElection"`
}

// LeaderElection runs the controllers only on the holder of the Lease (in
// Namespace).
type LeaderElection struct {
	// LeaderElect (default true; make dev and tests, one in-process
	// instance, turn it off).
	LeaderElect *bool `json:"leaderElect,omitempty"`
	// ResourceName is the Lease (default runplane-controller).
	ResourceName string `json:"resourceName,omitempty"`
}

// Default fills every zero field with its default: the one place the
// controller's settings get them.
func (c *ControllerConfiguration) Default() {
	c.Namespace = cmp.Or(c.Namespace, api.DefaultNamespace)
	configfile.OrDuration(&c.PrepareDeadline, 6*time.Hour)
	configfile.OrDuration(&c.ImagePullTimeout, 5*time.Minute)
	c.ClusterDomain = cmp.Or(c.ClusterDomain, "cluster.local")

	def, e := egress.DefaultSettings(), &c.Egress
	e.Enforcement, e.Priority = cmp.Or(e.Enforcement, def.Enforcement), cmp.Or(e.Priority, def.Priority)
	e.NATS.Namespace, e.NATS.Port = cmp.Or(e.NATS.Namespace, c.Namespace), cmp.Or(e.NATS.Port, def.NATS.Port)
	if e.NATS.PodLabels == nil {
		e.NATS.PodLabels = def.NATS.PodLabels
	}
	e.DNS.Namespace = cmp.Or(e.DNS.Namespace, def.DNS.Namespace)
	if e.DNS.PodLabels == nil {
		e.DNS.PodLabels = def.DNS.PodLabels
	}
	if e.DNS.Ports == nil {
		e.DNS.Ports = def.DNS.Ports
	}

	c.Metrics.BindAddress = cmp.Or(c.Metrics.BindAddress, ":8080")
	c.HealthAddr = cmp.Or(c.HealthAddr, ":8081")
	if c.LeaderElection.LeaderElect == nil {
		c.LeaderElection.LeaderElect = ptr.To(true)
	}
	c.LeaderElection.ResourceName = cmp.Or(c.LeaderElection.ResourceName, "runplane-controller")
}

// Validate refuses settings the controller cannot run with, each error
// naming its key.
func (c *ControllerConfiguration) Validate() error {
	var errs []error
	if c.Image == "" {
		errs = append(errs, errors.New("image: required (the runplane image of copy Jobs and accessors)"))
	}
	if d := c.PrepareDeadline.Duration; d < 0 {
		errs = append(errs, fmt.Errorf("prepareDeadline: %v: want a positive duration", d))
	}
	if d := c.ImagePullTimeout.Duration; d < 0 {
		errs = append(errs, fmt.Errorf("imagePullTimeout: %v: want a positive duration", d))
	}
	if _, err := c.AccessorNamespaces(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Egress.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Metrics.Validate("metrics"); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// AccessorNamespaces is AccessorAllowedNamespaces parsed (nil: none).
func (c *ControllerConfiguration) AccessorNamespaces() (*metav1.LabelSelector, error) {
	if c.AccessorAllowedNamespaces == "" {
		return nil, nil
	}
	sel, err := metav1.ParseToLabelSelector(c.AccessorAllowedNamespaces)
	if err != nil {
		return nil, fmt.Errorf("accessorAllowedNamespaces %q: %w", c.AccessorAllowedNamespaces, err)
	}
	return sel, nil
}
