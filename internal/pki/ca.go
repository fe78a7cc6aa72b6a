// Package pki is runplane's one certificate toolkit: ECDSA certificate
// authorities and the certificates they issue (the webhook, the extender,
// the test control plane), the rotation rules of a CA and serving
// certificate kept in a Secret (a renewed CA certified by the old one, so
// clients that trust only the old CA keep verifying), and a watcher, built
// on controller-runtime's certwatcher, for certificate files another party
// (cert-manager) keeps.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// backdate starts every certificate an hour early, so a peer whose clock
// lags a little still accepts it.
const backdate = time.Hour

// CA is a certificate authority: its certificate and key, parsed and PEM.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	KeyPEM  []byte
}

// NewCA makes a self-signed CA named name, valid for validity from now.
func NewCA(name string, now time.Time, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating CA key: %w", err)
	}
	tmpl, err := template(pkix.Name{CommonName: name}, now, now.Add(validity))
	if err != nil {
		return nil, err
	}
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	tmpl.BasicConstraintsValid, tmpl.IsCA = true, true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("creating CA certificate: %w", err)
	}
	return newCA(der, key)
}

func newCA(der []byte, key *ecdsa.PrivateKey) (*CA, error) {
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing CA certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: c, Key: key, CertPEM: encodeCert(der), KeyPEM: keyPEM}, nil
}

// ParseCA reads a CA from PEM; the certificate must be a CA's and the key
// must match it.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	c, err := ParseCert(certPEM)
	if err != nil {
		return nil, err
	}
	if !c.IsCA {
		return nil, errors.New("not a CA certificate")
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("no PEM key")
	}
	k, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing CA key: %w", err)
	}
	if !k.PublicKey.Equal(c.PublicKey) {
		return nil, errors.New("CA key does not match its certificate")
	}
	return &CA{Cert: c, Key: k, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// Leaf describes a certificate for Issue.
type Leaf struct {
	Subject     pkix.Name
	DNSNames    []string
	IPAddresses []net.IP
	// Usage is server or client authentication.
	Usage x509.ExtKeyUsage
	// ClientAuth adds client authentication to Usage (a server that also
	// dials its peers with the certificate).
	ClientAuth bool
	// Validity from now; never past the CA's own expiry.
	Validity time.Duration
}

// Serving is a server certificate for hosts (DNS names or IP addresses),
// named after the first one, or cn without hosts.
func Serving(cn string, hosts []string, validity time.Duration) Leaf {
	l := Leaf{Subject: pkix.Name{CommonName: cn}, Usage: x509.ExtKeyUsageServerAuth, Validity: validity}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			l.IPAddresses = append(l.IPAddresses, ip)
		} else {
			l.DNSNames = append(l.DNSNames, h)
		}
	}
	if len(l.DNSNames) > 0 {
		l.Subject.CommonName = l.DNSNames[0]
	}
	return l
}

// Issue signs a new key pair for l and returns both as PEM.
func (ca *CA) Issue(l Leaf, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating key: %w", err)
	}
	notAfter := now.Add(l.Validity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl, err := template(l.Subject, now, notAfter)
	if err != nil {
		return nil, nil, err
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{l.Usage}
	if l.ClientAuth && l.Usage != x509.ExtKeyUsageClientAuth {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	tmpl.DNSNames, tmpl.IPAddresses = l.DNSNames, l.IPAddresses
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("creating certificate for %s: %w", l.Subject.CommonName, err)
	}
	if keyPEM, err = encodeKey(key); err != nil {
		return nil, nil, err
	}
	return encodeCert(der), keyPEM, nil
}

func template(subject pkix.Name, now, notAfter time.Time) (*x509.Certificate, error) {
	sn, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("certificate serial: %w", err)
	}
	return &x509.Certificate{SerialNumber: sn, Subject: subject, NotBefore: now.Add(-backdate), NotAfter: notAfter}, nil
}

// ParseCert reads the first PEM certificate of p.
func ParseCert(p []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(p)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("encoding key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}
