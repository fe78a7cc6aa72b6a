// Package metricsauth is the one place runplane's components get their
// /metrics protection from: controller-runtime's metrics filter
// (sigs.k8s.io/controller-runtime/pkg/metrics/filters), which authenticates
// a scraper's bearer token with a TokenReview and authorizes it with a
// SubjectAccessReview for verb get on the non-resource URL /metrics. A
// scraper needs a ClusterRole granting that (the chart's
// runplane-metrics-reader); the component's own ServiceAccount needs create
// on tokenreviews and subjectaccessreviews.
//
// Metrics are served over TLS only: the scraper's token must not cross the
// network in clear.
package metricsauth

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/runplane/runplane/internal/pki"
)

// Path is where every component serves its metrics (and the non-resource
// URL scrapers are authorized for).
const Path = "/metrics"

// filter is controller-runtime's authentication and authorization filter,
// reviewing through the API server cfg reaches.
func filter(cfg *rest.Config) (metricsserver.Filter, error) {
	if cfg == nil {
		return nil, errors.New("metricsauth: scrapers are authenticated by the API server: a Kubernetes config is needed")
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("metricsauth: HTTP client: %w", err)
	}
	f, err := filters.WithAuthenticationAndAuthorization(cfg, hc)
	if err != nil {
		return nil, fmt.Errorf("metricsauth: filter: %w", err)
	}
	return f, nil
}

// Handler serves g in the Prometheus text format to scrapers the API
// server cfg reaches authenticates and RBAC allows get on Path.
func Handler(cfg *rest.Config, log logr.Logger, g prometheus.Gatherer) (http.Handler, error) {
	f, err := filter(cfg)
	if err != nil {
		return nil, err
	}
	h, err := f(log.WithValues("path", Path), promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	if err != nil {
		return nil, fmt.Errorf("metricsauth: %w", err)
	}
	return h, nil
}

// ManagerOptions are a controller-runtime manager's metrics server options
// on bindAddress ("0": off): HTTPS and the filter; the certificate is k's
// (ServingCert.Keeper), or without k a self-signed one (SelfSignedTLS),
// where controller-runtime would make its own: an RSA one, which costs
// ~0.1–0.5 s of CPU at every start. Either way GetCertificate is set, so
// controller-runtime reads no certificate files of its CertDir.
func ManagerOptions(bindAddress string, k *pki.Keeper) (metricsserver.Options, error) {
	opts := []func(*tls.Config){http1Only}
	switch {
	case k != nil:
		opts = append(opts, func(c *tls.Config) { c.GetCertificate = k.GetCertificate })
	case bindAddress != "0":
		self, err := SelfSignedTLS("localhost")
		if err != nil {
			return metricsserver.Options{}, err
		}
		// GetCertificate, not Certificates: controller-runtime makes its
		// own unless GetCertificate is set.
		cert := &self.Certificates[0]
		opts = append(opts, func(c *tls.Config) {
			c.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert, nil }
		})
	}
	return metricsserver.Options{
		BindAddress:    bindAddress,
		SecureServing:  true,
		FilterProvider: filters.WithAuthenticationAndAuthorization,
		TLSOpts:        opts,
	}, nil
}

// SelfSignedTLS is a serving configuration with a certificate made now for
// host (and 127.0.0.1), as controller-runtime's metrics server makes one
// when it has none: it keeps the scraper's token off the wire in clear;
// scrapers do not verify it (a fresh one per process, nothing to pin).
// Its keys are pki's (ECDSA P-256): client-go's certutil, which
// controller-runtime uses, makes two RSA-2048 keys, 113 ms of CPU a start
// on average and up to ~0.5 s (a queue's test start spent 9% of its CPU
// there), against ~0.4 ms.
func SelfSignedTLS(host string) (*tls.Config, error) {
	now := time.Now()
	ca, err := pki.NewCA("runplane-metrics-self-signed", now, selfSignedValidity)
	if err != nil {
		return nil, fmt.Errorf("metricsauth: self-signed certificate: %w", err)
	}
	hosts := []string{"127.0.0.1"}
	if host != "" {
		hosts = append([]string{host}, hosts...)
	}
	certPEM, keyPEM, err := ca.Issue(pki.Serving("runplane-metrics", hosts, selfSignedValidity), now)
	if err != nil {
		return nil, fmt.Errorf("metricsauth: self-signed certificate: %w", err)
	}
	pair, err := tls.X509KeyPair(append(certPEM, ca.CertPEM...), keyPEM)
	if err != nil {
		return nil, fmt.Errorf("metricsauth: self-signed certificate: %w", err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
	http1Only(cfg)
	return cfg, nil
}

// selfSignedValidity is client-go certutil's for its self-signed
// certificates: a year (scrapers do not verify it).
const selfSignedValidity = 365 * 24 * time.Hour

// http1Only leaves HTTP/2 off a listener anyone on the network reaches
// (CVE-2023-44487, rapid reset), as controller-runtime's own servers do.
func http1Only(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }

// Loopback refuses a metrics address other Pods could reach. runplane's
// processes in tenants' Pods (the worker sidecar, the SSH server) serve
// metrics on loopback only: nothing there can authenticate a scraper (no
// Kubernetes credentials), and a scraper's token must never be sent to a
// Pod a tenant controls. Whoever may port-forward to the Pod (RBAC
// pods/portforward) still reads them.
func Loopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("metrics address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("metrics address %q: only a loopback address (127.0.0.1, [::1]) may serve metrics in a tenant's Pod", addr)
	}
	return nil
}
