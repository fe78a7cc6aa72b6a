// Package config is runplane-webhook's configuration file: one versioned,
// typed document (apiVersion runplane.io/v1alpha1, kind
// WebhookConfiguration), read by internal/configfile (strict: an unknown
// key is an error naming it), defaulted in one place (Default) and
// validated (Validate). The chart renders it into the ConfigMap
// runplane-webhook; the binary takes it with -config. webhook.Config embeds
// it, so webhook.Run reads these values as they are, and defaults and
// validates them the same way when make dev and tests build it in-process.
package config

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
	"github.com/runplane/runplane/internal/configfile"
	"github.com/runplane/runplane/webhook/mutate"
)

// DefaultConfigurationName names both the Mutating- and the
// ValidatingWebhookConfiguration.
const DefaultConfigurationName = "runplane-webhook"

// WebhookConfiguration is runplane-webhook's settings. Zero fields take
// Default's values.
type WebhookConfiguration struct {
	metav1.TypeMeta `json:",inline"`

	// Namespace is runplane's namespace: the catalog ConfigMap, the TLS
	// Secret and NATS's CA ConfigMap (api.NATSCAConfigMap, followed when
	// injection.natsServerName is set) live there, and admission skips it
	// (default runplane-system).
	Namespace string `json:"namespace,omitempty"`
	// Addr is the HTTPS address, host:port, of admission, the health
	// endpoints and /metrics (only for scrapers RBAC allows get on
	// /metrics; default :9443).
	Addr string `json:"addr,omitempty"`
	// HealthAddr serves /healthz and /readyz over plain HTTP (default
	// :8081; "0" turns it off, as controller-runtime's probe address).
	HealthAddr string `json:"healthAddr,omitempty"`
	// Injection is the platform side of Pod mutation (images, NATS, sidecar
	// resources, priority tiers); image and natsURL are required.
	Injection mutate.Config `json:"injection"`
	TLS       TLS           `json:"tls"`
	// Service is the Service in front of the webhook: the certificate's
	// default names, and where managed webhook configurations send
	// admission without webhooks.url.
	Service  Service  `json:"service"`
	Webhooks Webhooks `json:"webhooks"`
	// GPUDeviceClasses are the DRA DeviceClasses of GPUs besides every DRA
	// catalog spec's (the chart's admissionPolicies.gpu.deviceClasses): a
	// Pod may not name an existing claim of one by resourceClaimName
	// (default gpu.nvidia.com, mig.nvidia.com).
	GPUDeviceClasses []string `json:"gpuDeviceClasses,omitempty"`
}

// TLS says where the serving certificate comes from.
type TLS struct {
	// CertManager serves certDir's tls.crt and tls.key (kept by
	// cert-manager, which also injects the caBundle): no Secret, no
	// caBundle patching.
	CertManager bool `json:"certManager,omitempty"`
	// CertDir holds them with certManager (default
	// /var/run/runplane/webhook-tls).
	CertDir string `json:"certDir,omitempty"`
	// SecretName in Namespace holds the self-managed CA and certificate
	// (default runplane-webhook-tls).
	SecretName string `json:"secretName,omitempty"`
	// DNSNames and IPAddresses the certificate covers (default, when both
	// are empty: the Service's names, <service>.<namespace>.svc and
	// .svc.cluster.local).
	DNSNames    []string `json:"dnsNames,omitempty"`
	IPAddresses []string `json:"ipAddresses,omitempty"`
	// CheckInterval is how often the certificate is checked for renewal
	// (default 1h).
	CheckInterval metav1.Duration `json:"checkInterval,omitzero"`
}

// Service names the webhook's Service.
type Service struct {
	// Name (default runplane-webhook) and Port (default 443).
	Name string `json:"name,omitempty"`
	Port int32  `json:"port,omitempty"`
}

// Webhooks says which webhook configuration objects the webhook keeps.
type Webhooks struct {
	// Name of the Mutating- and ValidatingWebhookConfiguration (default
	// runplane-webhook).
	Name string `json:"name,omitempty"`
	// Manage creates and updates both objects, and runplane's
	// ValidatingAdmissionPolicies (make dev, tests); otherwise (the chart
	// owns them) the webhook only patches their caBundle when it drifts.
	Manage bool `json:"manage,omitempty"`
	// URL, with manage: the base URL the API server calls instead of the
	// Service (make dev and tests: https://127.0.0.1:PORT).
	URL string `json:"url,omitempty"`
	// Resync re-checks the objects at least this often (default 1m); a
	// watch re-checks them at once when they change.
	Resync metav1.Duration `json:"resync,omitzero"`
}

// Default fills every zero field with its default: the one place the
// webhook's settings get them.
func (c *WebhookConfiguration) Default() {
	c.Namespace = cmp.Or(c.Namespace, api.DefaultNamespace)
	c.Addr = cmp.Or(c.Addr, ":9443")
	c.HealthAddr = cmp.Or(c.HealthAddr, ":8081")

	def, in := mutate.DefaultConfig(), &c.Injection
	in.PauseImage = cmp.Or(in.PauseImage, def.PauseImage)
	in.SubjectPrefix, in.StreamName = cmp.Or(in.SubjectPrefix, def.SubjectPrefix), cmp.Or(in.StreamName, def.StreamName)
	if in.WorkloadPriorityClasses == nil { // set empty: runplane-workload only
		in.WorkloadPriorityClasses = def.WorkloadPriorityClasses
	}
	// A container named keeps its own; one not named gets its default.
	for name, r := range def.Resources {
		if _, ok := in.Resources[name]; !ok {
			if in.Resources == nil {
				in.Resources = mutate.SidecarResources{}
			}
			in.Resources[name] = r
		}
	}

	c.Service.Name, c.Service.Port = cmp.Or(c.Service.Name, "runplane-webhook"), cmp.Or(c.Service.Port, 443)
	t := &c.TLS
	t.CertDir = cmp.Or(t.CertDir, "/var/run/runplane/webhook-tls")
	t.SecretName = cmp.Or(t.SecretName, "runplane-webhook-tls")
	if len(t.DNSNames) == 0 && len(t.IPAddresses) == 0 {
		svc := c.Service.Name + "." + c.Namespace + ".svc"
		t.DNSNames = []string{svc, svc + ".cluster.local"}
	}
	configfile.OrDuration(&t.CheckInterval, time.Hour)
	c.Webhooks.Name = cmp.Or(c.Webhooks.Name, DefaultConfigurationName)
	configfile.OrDuration(&c.Webhooks.Resync, time.Minute)
	if c.GPUDeviceClasses == nil {
		c.GPUDeviceClasses = []string{catalog.GPUDeviceClass, catalog.MIGDeviceClass}
	}
}

// Validate refuses settings the webhook cannot run with, each error naming
// its key.
func (c *WebhookConfiguration) Validate() error {
	var errs []error
	bad := func(key string, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{key}, args...)...))
	}
	if err := c.Injection.Validate(); err != nil {
		errs = append(errs, err)
	}
	for _, s := range c.TLS.IPAddresses {
		if net.ParseIP(s) == nil {
			bad("tls.ipAddresses", "%q is not an IP address", s)
		}
	}
	if d := c.TLS.CheckInterval.Duration; d < 0 {
		bad("tls.checkInterval", "%v: want a positive duration", d)
	}
	if d := c.Webhooks.Resync.Duration; d < 0 {
		bad("webhooks.resync", "%v: want a positive duration", d)
	}
	if p := c.Service.Port; p < 1 || p > 65535 {
		bad("service.port", "%d: want 1-65535", p)
	}
	for _, d := range c.GPUDeviceClasses {
		if errs := validation.IsDNS1123Subdomain(d); len(errs) > 0 {
			bad("gpuDeviceClasses", "%q is not a DeviceClass name: %s", d, strings.Join(errs, "; "))
		}
	}
	if c.Webhooks.URL != "" && !c.Webhooks.Manage {
		bad("webhooks.url", "only with webhooks.manage: true")
	}
	return errors.Join(errs...)
}

// IPs are TLS.IPAddresses parsed (valid after Validate).
func (t TLS) IPs() []net.IP {
	var out []net.IP
	for _, s := range t.IPAddresses {
		if ip := net.ParseIP(s); ip != nil {
			out = append(out, ip)
		}
	}
	return out
}
