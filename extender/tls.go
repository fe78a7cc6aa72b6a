package extender

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/runplane/runplane/extender/config"
	"github.com/runplane/runplane/internal/pki"
)

// selfSignedValidity is how long a generated serving certificate lasts.
const selfSignedValidity = 365 * 24 * time.Hour

// selfSigned issues a serving certificate for hosts (DNS names or IPs)
// from a fresh CA: give the CA's PEM to the scheduler config.
func selfSigned(hosts []string) (caPEM, certPEM, keyPEM []byte, err error) {
	now := time.Now()
	ca, err := pki.NewCA("runplane-extender-ca", now, selfSignedValidity)
	if err != nil {
		return nil, nil, nil, err
	}
	certPEM, keyPEM, err = ca.Issue(pki.Serving("runplane-extender", hosts, selfSignedValidity), now)
	return ca.CertPEM, certPEM, keyPEM, err
}

// WriteSelfSignedCert writes a serving certificate for hosts to certFile
// and keyFile, so restarts of an extender keep the certificate the
// scheduler trusts, and returns the PEM of the CA that issued it.
func WriteSelfSignedCert(certFile, keyFile string, hosts []string) (caPEM []byte, err error) {
	caPEM, certPEM, keyPEM, err := selfSigned(hosts)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
		return nil, fmt.Errorf("writing %s: %w", certFile, err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return nil, fmt.Errorf("writing %s: %w", keyFile, err)
	}
	return caPEM, nil
}

// WriteSelfSignedDir writes ca.crt, tls.crt and tls.key for hosts into dir:
// what the chart's init container does, so each scheduler Pod has its own
// CA and serving certificate, created at run time (no key material in the
// chart's render), shared with its kube-scheduler through an emptyDir.
func WriteSelfSignedDir(dir string, hosts []string) error {
	caPEM, err := WriteSelfSignedCert(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), hosts)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), caPEM, 0o644); err != nil {
		return fmt.Errorf("writing ca.crt: %w", err)
	}
	return nil
}

// certExpiry is when the certificate cfg serves now expires (Unix seconds;
// 0 when none can be read), for runplane_extender_certificate_expiry_timestamp_seconds.
func certExpiry(cfg *tls.Config) float64 {
	var cert *tls.Certificate
	switch {
	case cfg.GetCertificate != nil:
		cert, _ = cfg.GetCertificate(&tls.ClientHelloInfo{})
	case len(cfg.Certificates) > 0:
		cert = &cfg.Certificates[0]
	}
	if cert == nil || len(cert.Certificate) == 0 {
		return 0
	}
	leaf := cert.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return 0
		}
	}
	return float64(leaf.NotAfter.Unix())
}

// servingTLS is the serving configuration and the PEM the scheduler must
// trust: the generated CA, or the certificate file as it was at startup.
// Certificate files are followed until ctx ends, so a rotated certificate
// is served without a restart.
func servingTLS(ctx context.Context, t config.TLS, log *slog.Logger) (*tls.Config, []byte, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CertFile == "" {
		caPEM, certPEM, keyPEM, err := selfSigned(t.Hosts)
		if err != nil {
			return nil, nil, err
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, nil, fmt.Errorf("loading serving certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
		return cfg, caPEM, nil
	}
	w, err := pki.WatchFiles(t.CertFile, t.KeyFile, nil)
	if err != nil {
		return nil, nil, err
	}
	certPEM, err := os.ReadFile(t.CertFile)
	if err != nil {
		return nil, nil, fmt.Errorf("reading certFile: %w", err)
	}
	go func() {
		if err := w.Start(ctx); err != nil {
			log.Error("watching the serving certificate", "certFile", t.CertFile, "error", err)
		}
	}()
	cfg.GetCertificate = w.GetCertificate
	return cfg, certPEM, nil
}
