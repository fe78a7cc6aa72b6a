package extender

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"
)

// SelfSignedCert makes a self-signed serving certificate for hosts (DNS
// names or IPs), valid for a year. It is its own CA: give certPEM to the
// scheduler config as the CA.
func SelfSignedCert(hosts []string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, nil, fmt.Errorf("generating serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "runplane-extender"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("creating certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// WriteSelfSignedCert writes a SelfSignedCert to certFile and keyFile, so
// restarts of an extender keep the certificate the scheduler trusts.
func WriteSelfSignedCert(certFile, keyFile string, hosts []string) (certPEM []byte, err error) {
	certPEM, keyPEM, err := SelfSignedCert(hosts)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
		return nil, fmt.Errorf("writing %s: %w", certFile, err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return nil, fmt.Errorf("writing %s: %w", keyFile, err)
	}
	return certPEM, nil
}

func (c *Config) tlsConfig() (*tls.Config, []byte, error) {
	var certPEM, keyPEM []byte
	var err error
	if c.CertFile != "" {
		if certPEM, err = os.ReadFile(c.CertFile); err != nil {
			return nil, nil, fmt.Errorf("reading certFile: %w", err)
		}
		if keyPEM, err = os.ReadFile(c.KeyFile); err != nil {
			return nil, nil, fmt.Errorf("reading keyFile: %w", err)
		}
	} else if certPEM, keyPEM, err = SelfSignedCert(c.TLSHosts); err != nil {
		return nil, nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("loading serving certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, certPEM, nil
}
