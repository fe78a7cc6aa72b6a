// Package config is runplane-extender's configuration file: one versioned,
// typed document (apiVersion runplane.io/v1alpha1, kind
// ExtenderConfiguration), read by internal/configfile (strict: an unknown
// key is an error naming it), defaulted in one place (Default) and
// validated (Validate). The chart renders it into the ConfigMap
// runplane-extender; the binary takes it with -config. extender.Config
// embeds it, so extender.Start reads these values as they are, and
// defaults and validates them the same way when make dev and tests build
// it in-process.
package config

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/extender/ledger"
	"github.com/runplane/runplane/internal/configfile"
	"github.com/runplane/runplane/internal/metricsauth"
)

// ExtenderConfiguration is runplane-extender's settings. Zero fields take
// Default's values.
type ExtenderConfiguration struct {
	metav1.TypeMeta `json:",inline"`

	// Namespace holds the catalog, the Lease and the reservation Pods
	// (default runplane-system).
	Namespace string `json:"namespace,omitempty"`
	// Addr serves filter, prioritize and bind over HTTPS (default
	// 127.0.0.1:8443: loopback, where only the Pod's scheduler calls).
	Addr string `json:"addr,omitempty"`
	// Metrics: bindAddress serves /metrics and the probes on a listener of
	// their own (empty: on addr, with the verbs' certificate).
	Metrics        metricsauth.Settings `json:"metrics"`
	TLS            TLS                  `json:"tls"`
	LeaderElection LeaderElection       `json:"leaderElection"`
	// ManagedResources are the scheduler configuration's managedResources
	// (default nvidia.com/gpu); a catalog spec requesting another resource
	// is refused (catalog.Spec.CheckManaged).
	ManagedResources []corev1.ResourceName `json:"managedResources,omitempty"`
	// ClaimTimeout bounds deleting a placeholder until it is gone (10s).
	ClaimTimeout metav1.Duration `json:"claimTimeout,omitzero"`
	// ReservationImage runs preemptors' reservation Pods (default
	// api.DefaultPauseImage, as the webhook's placeholders).
	ReservationImage string     `json:"reservationImage,omitempty"`
	Preemption       Preemption `json:"preemption"`
	Stock            Stock      `json:"stock"`
	// PprofAddr serves net/http/pprof with mutex and block profiles (plain
	// HTTP: keep it on loopback; empty: off).
	PprofAddr string `json:"pprofAddr,omitempty"`
}

// TLS is the verbs' serving certificate.
type TLS struct {
	// CertFile and KeyFile are reloaded when they change; both empty: a
	// fresh CA issues one for Hosts at start.
	CertFile string `json:"certFile,omitempty"`
	KeyFile  string `json:"keyFile,omitempty"`
	// Hosts: names and IPs of that certificate and -write-tls-dir's
	// (default localhost, 127.0.0.1).
	Hosts []string `json:"hosts,omitempty"`
}

// LeaderElection says when the extender binds: while its manager holds the
// Lease resourceName in namespace (leaderElect), while the co-located
// runplane-scheduler holds its own (followLease), or always (neither).
type LeaderElection struct {
	// LeaderElect (default true without followLease, false with it).
	LeaderElect *bool `json:"leaderElect,omitempty"`
	// ResourceName is the Lease (default runplane-extender).
	ResourceName string `json:"resourceName,omitempty"`
	// LeaseDuration, RenewDeadline, RetryPeriod (default 15s, 10s, 2s).
	LeaseDuration metav1.Duration `json:"leaseDuration,omitzero"`
	RenewDeadline metav1.Duration `json:"renewDeadline,omitzero"`
	RetryPeriod   metav1.Duration `json:"retryPeriod,omitzero"`
	// FollowLease, namespace/name: bind while an identity of this host
	// holds the co-located scheduler's Lease (kube-scheduler's is
	// <hostname>_<uuid>), so the leading scheduler calls a binding extender.
	FollowLease string `json:"followLease,omitempty"`
}

// Preemption bounds evictions (defaults: ledger.Defaults).
type Preemption struct {
	// MaxEvictionsPerPod and MaxEvictionsPerNode cap the Pods evicted for
	// one GPU Pod and on one node in any minute.
	MaxEvictionsPerPod  int `json:"maxEvictionsPerPod,omitempty"`
	MaxEvictionsPerNode int `json:"maxEvictionsPerNode,omitempty"`
	// Backoff spares other schedulers' Pods on a node after an eviction
	// there led to no bind.
	Backoff metav1.Duration `json:"backoff,omitzero"`
}

// Stock: the leader keeps the RunplaneStock condition of the stock
// Deployments in Namespace (empty: none) every StatusPeriod (10s).
type Stock struct {
	Namespace    string          `json:"namespace,omitempty"`
	StatusPeriod metav1.Duration `json:"statusPeriod,omitzero"`
}

// Default fills every zero field with its default: the one place the
// extender's settings get them (the preemption bounds are the ledger's).
func (c *ExtenderConfiguration) Default() {
	c.Namespace = cmp.Or(c.Namespace, api.DefaultNamespace)
	c.Addr = cmp.Or(c.Addr, "127.0.0.1:8443")
	if len(c.TLS.Hosts) == 0 {
		c.TLS.Hosts = []string{"localhost", "127.0.0.1"}
	}
	le := &c.LeaderElection
	if le.LeaderElect == nil {
		le.LeaderElect = ptr.To(le.FollowLease == "")
	}
	le.ResourceName = cmp.Or(le.ResourceName, "runplane-extender")
	configfile.OrDuration(&le.LeaseDuration, 15*time.Second)
	configfile.OrDuration(&le.RenewDeadline, 10*time.Second)
	configfile.OrDuration(&le.RetryPeriod, 2*time.Second)
	if len(c.ManagedResources) == 0 {
		c.ManagedResources = []corev1.ResourceName{api.DefaultGPUResource}
	}
	configfile.OrDuration(&c.ClaimTimeout, 10*time.Second)
	c.ReservationImage = cmp.Or(c.ReservationImage, api.DefaultPauseImage)
	def, p := ledger.Defaults(), &c.Preemption
	p.MaxEvictionsPerPod, p.MaxEvictionsPerNode = cmp.Or(p.MaxEvictionsPerPod, def.MaxEvictionsPerPod), cmp.Or(p.MaxEvictionsPerNode, def.MaxEvictionsPerNode)
	configfile.OrDuration(&p.Backoff, def.PreemptBackoff)
	configfile.OrDuration(&c.Stock.StatusPeriod, 10*time.Second)
}

// Validate refuses settings the extender cannot run with, each error
// naming its key.
func (c *ExtenderConfiguration) Validate() error {
	var errs []error
	bad := func(key string, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{key}, args...)...))
	}
	for key, addr := range map[string]string{"addr": c.Addr, "metrics.bindAddress": c.Metrics.BindAddress, "pprofAddr": c.PprofAddr} {
		if _, _, err := net.SplitHostPort(addr); addr != "" && err != nil {
			bad(key, "%q: want host:port", addr)
		}
	}
	if err := c.Metrics.Validate("metrics"); err != nil {
		errs = append(errs, err)
	}
	if c.Metrics.TLSSecret != "" && c.Metrics.BindAddress == "" {
		bad("metrics.tlsSecret", "needs metrics.bindAddress (addr serves the verbs' own certificate)")
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		bad("tls", "certFile and keyFile together or neither (certFile %q, keyFile %q)", c.TLS.CertFile, c.TLS.KeyFile)
	}
	le := &c.LeaderElection
	if le.FollowLease != "" {
		if ns, name, ok := strings.Cut(le.FollowLease, "/"); !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			bad("leaderElection.followLease", "%q: want namespace/name", le.FollowLease)
		}
		if ptr.Deref(le.LeaderElect, false) {
			bad("leaderElection.followLease", "not with leaderElection.leaderElect: true (following replaces the own election)")
		}
	}
	if le.LeaseDuration.Duration <= le.RenewDeadline.Duration {
		bad("leaderElection.leaseDuration", "%v: want more than leaderElection.renewDeadline %v", le.LeaseDuration.Duration, le.RenewDeadline.Duration)
	}
	for key, d := range map[string]time.Duration{"leaderElection.renewDeadline": le.RenewDeadline.Duration, "leaderElection.retryPeriod": le.RetryPeriod.Duration,
		"claimTimeout": c.ClaimTimeout.Duration, "preemption.backoff": c.Preemption.Backoff.Duration, "stock.statusPeriod": c.Stock.StatusPeriod.Duration} {
		if d < 0 {
			bad(key, "%v: want a positive duration", d)
		}
	}
	for key, n := range map[string]int{"preemption.maxEvictionsPerPod": c.Preemption.MaxEvictionsPerPod, "preemption.maxEvictionsPerNode": c.Preemption.MaxEvictionsPerNode} {
		if n < 0 {
			bad(key, "%d: want a positive number", n)
		}
	}
	for _, r := range c.ManagedResources {
		if msgs := validation.IsQualifiedName(string(r)); len(msgs) > 0 {
			bad("managedResources", "%q: %s", r, strings.Join(msgs, "; "))
		}
	}
	return errors.Join(errs...)
}
