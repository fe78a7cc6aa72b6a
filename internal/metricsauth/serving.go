package metricsauth

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"k8s.io/client-go/kubernetes"

	"github.com/runplane/runplane/internal/pki"
)

// ServingCert is where a component's /metrics certificate comes from.
// With a Secret, from a CA kept there (pki.Keeper: created by the first
// replica, renewed before expiry), covering Hosts, so a scraper verifies
// every replica with the Secret's pki.KeyCABundle for the Service's name
// (the chart's ServiceMonitors). Without one, a certificate made at start
// that nobody can verify: the token is still off the wire in clear.
type ServingCert struct {
	Secret pki.SecretRef
	Hosts  []string
}

// ParseSecret sets Secret from "namespace/name" ("" leaves none): the
// metrics.tlsSecret of every component's configuration file.
func (c *ServingCert) ParseSecret(v string) error {
	if v == "" {
		c.Secret = pki.SecretRef{}
		return nil
	}
	ns, name, ok := strings.Cut(v, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("metrics TLS Secret %q: want namespace/name", v)
	}
	c.Secret = pki.SecretRef{Namespace: ns, Name: name}
	return nil
}

// Keeper is the keeper of c's certificate, or nil without a Secret. Add
// it to the manager: its Start loads the certificate and renews it.
func (c ServingCert) Keeper(client kubernetes.Interface, log *slog.Logger) (*pki.Keeper, error) {
	if c.Secret.Name == "" {
		return nil, nil
	}
	if len(c.Hosts) == 0 {
		return nil, fmt.Errorf("metrics TLS Secret %s/%s: no hosts for its certificate", c.Secret.Namespace, c.Secret.Name)
	}
	o := pki.Options{Name: "runplane-metrics"}
	for _, h := range c.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			o.IPAddresses = append(o.IPAddresses, ip)
		} else {
			o.DNSNames = append(o.DNSNames, h)
		}
	}
	return &pki.Keeper{Client: client, Secret: c.Secret, Options: o, Log: log}, nil
}

// TLS is the serving configuration of k's certificate, or a self-signed
// one for host when k is nil.
func TLS(k *pki.Keeper, host string) (*tls.Config, error) {
	if k == nil {
		return SelfSignedTLS(host)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: k.GetCertificate}
	http1Only(cfg)
	return cfg, nil
}

// SecretName is the Secret of component's /metrics certificate, as the
// chart names it (runplane.metricsSecretName) and make dev does.
func SecretName(component string) string { return "runplane-" + component + "-metrics-tls" }

// DevCert is make dev's ServingCert of component: its Secret in namespace,
// for the loopback address every component listens on there.
func DevCert(namespace, component string) ServingCert {
	return ServingCert{Secret: pki.SecretRef{Namespace: namespace, Name: SecretName(component)}, Hosts: []string{"127.0.0.1"}}
}
