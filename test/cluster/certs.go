package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/runplane/runplane/internal/pki"
)

// certValidity is how long the cluster's certificates last.
const certValidity = 365 * 24 * time.Hour

// certFiles are the cluster's certificate authority and the files made from it.
type certFiles struct {
	caFile                           string
	servingCert, servingKey          string
	serviceAccountKey                string // RSA private key (signs tokens)
	serviceAccountPub                string
	caPEM, adminCertPEM, adminKeyPEM []byte
	// netpolCertPEM and netpolKeyPEM are the real nodes' NetworkPolicy
	// enforcer's client certificate (user netpolUser).
	netpolCertPEM, netpolKeyPEM []byte
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// newPKI writes a CA, a serving certificate for 127.0.0.1, an admin client
// certificate (group system:masters), the NetworkPolicy enforcer's client
// certificate (netpolUser, no group) and the service-account key pair.
func newPKI(dir string) (*certFiles, error) {
	p := &certFiles{
		caFile:      filepath.Join(dir, "ca.crt"),
		servingCert: filepath.Join(dir, "apiserver.crt"), servingKey: filepath.Join(dir, "apiserver.key"),
		serviceAccountKey: filepath.Join(dir, "sa.key"), serviceAccountPub: filepath.Join(dir, "sa.pub"),
	}
	now := time.Now()
	ca, err := pki.NewCA("runplane-local-ca", now, certValidity)
	if err != nil {
		return nil, err
	}
	p.caPEM = ca.CertPEM
	if err := os.WriteFile(p.caFile, ca.CertPEM, 0o600); err != nil {
		return nil, err
	}
	serving := pki.Serving("kube-apiserver", []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "127.0.0.1", "10.96.0.1"}, certValidity)
	serving.Subject.CommonName = "kube-apiserver"
	certPEM, keyPEM, err := ca.Issue(serving, now)
	if err != nil {
		return nil, fmt.Errorf("issuing serving certificate: %w", err)
	}
	if err := os.WriteFile(p.servingCert, certPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.servingKey, keyPEM, 0o600); err != nil {
		return nil, err
	}
	admin := pki.Leaf{Subject: pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}}, Usage: x509.ExtKeyUsageClientAuth, Validity: certValidity}
	if p.adminCertPEM, p.adminKeyPEM, err = ca.Issue(admin, now); err != nil {
		return nil, fmt.Errorf("issuing admin certificate: %w", err)
	}
	netpol := pki.Leaf{Subject: pkix.Name{CommonName: netpolUser}, Usage: x509.ExtKeyUsageClientAuth, Validity: certValidity}
	if p.netpolCertPEM, p.netpolKeyPEM, err = ca.Issue(netpol, now); err != nil {
		return nil, fmt.Errorf("issuing the NetworkPolicy enforcer's certificate: %w", err)
	}
	// ECDSA (ES256 tokens): an RSA-2048 key cost ~0.1–0.5 s of CPU at
	// every cluster start.
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating service-account key: %w", err)
	}
	saDER, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return nil, fmt.Errorf("encoding service-account key: %w", err)
	}
	if err := writePEM(p.serviceAccountKey, "EC PRIVATE KEY", saDER); err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	return p, writePEM(p.serviceAccountPub, "PUBLIC KEY", pubDER)
}
