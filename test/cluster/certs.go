package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the cluster's certificate authority and the files made from it.
type pki struct {
	caFile, caKeyFile                string
	servingCert, servingKey          string
	adminCert, adminKey              string
	serviceAccountKey                string // RSA private key (signs tokens)
	serviceAccountPub                string
	caPEM, adminCertPEM, adminKeyPEM []byte
}

func writePEM(path, typ string, der []byte) ([]byte, error) {
	data := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	return data, os.WriteFile(path, data, 0o600)
}

// newPKI writes a CA, a serving certificate for 127.0.0.1, an admin client
// certificate (group system:masters) and the service-account key pair.
func newPKI(dir string) (*pki, error) {
	p := &pki{
		caFile: filepath.Join(dir, "ca.crt"), caKeyFile: filepath.Join(dir, "ca.key"),
		servingCert: filepath.Join(dir, "apiserver.crt"), servingKey: filepath.Join(dir, "apiserver.key"),
		adminCert: filepath.Join(dir, "admin.crt"), adminKey: filepath.Join(dir, "admin.key"),
		serviceAccountKey: filepath.Join(dir, "sa.key"), serviceAccountPub: filepath.Join(dir, "sa.pub"),
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating CA key: %w", err)
	}
	now := time.Now().Add(-time.Hour)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "runplane-local-ca"},
		NotBefore: now, NotAfter: now.Add(24 * 365 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("signing CA: %w", err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	if p.caPEM, err = writePEM(p.caFile, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	issue := func(serial int64, subject pkix.Name, usage x509.ExtKeyUsage, certPath, keyPath string, ips []net.IP, dns []string) ([]byte, []byte, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: subject, NotBefore: now, NotAfter: now.Add(24 * 365 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: ips, DNSNames: dns,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return nil, nil, err
		}
		certPEM, err := writePEM(certPath, "CERTIFICATE", der)
		if err != nil {
			return nil, nil, err
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return nil, nil, err
		}
		keyPEM, err := writePEM(keyPath, "EC PRIVATE KEY", keyDER)
		return certPEM, keyPEM, err
	}
	if _, _, err := issue(2, pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth, p.servingCert, p.servingKey,
		[]net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 96, 0, 1)}, []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"}); err != nil {
		return nil, fmt.Errorf("issuing serving certificate: %w", err)
	}
	if p.adminCertPEM, p.adminKeyPEM, err = issue(3, pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}}, x509.ExtKeyUsageClientAuth, p.adminCert, p.adminKey, nil, nil); err != nil {
		return nil, fmt.Errorf("issuing admin certificate: %w", err)
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("generating service-account key: %w", err)
	}
	if _, err := writePEM(p.serviceAccountKey, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey)); err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	if _, err := writePEM(p.serviceAccountPub, "PUBLIC KEY", pubDER); err != nil {
		return nil, err
	}
	return p, nil
}
