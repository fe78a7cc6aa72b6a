// Package certs keeps the webhook's TLS material: a self-managed CA and a
// serving certificate stored in a Secret (created on first start, loaded on
// every later one, rotated before expiry), and a file source for when
// cert-manager provides the certificate instead.
package certs

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Keys of the Secret besides tls.crt and tls.key.
const (
	KeyCACert   = "ca.crt"        // the current CA certificate
	KeyCAKey    = "ca.key"        // its private key
	KeyCABundle = "ca-bundle.crt" // what clients trust: current CA, then the previous one while valid
)

// Options says where the Secret lives and what the certificate covers.
type Options struct {
	Namespace   string
	SecretName  string
	DNSNames    []string
	IPAddresses []net.IP
	// CAValidity (default 10 years) and CertValidity (default 1 year).
	CAValidity   time.Duration
	CertValidity time.Duration
	// RenewBefore renews the serving certificate when less than this is
	// left (default a third of CertValidity); the CA is renewed when less
	// than a third of CAValidity is left, keeping the old CA in the bundle.
	RenewBefore time.Duration
	// Now is the clock (tests move it); nil means time.Now.
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	if o.CAValidity == 0 {
		o.CAValidity = 10 * 365 * 24 * time.Hour
	}
	if o.CertValidity == 0 {
		o.CertValidity = 365 * 24 * time.Hour
	}
	if o.RenewBefore == 0 {
		o.RenewBefore = o.CertValidity / 3
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Bundle is the TLS material in the Secret.
type Bundle struct {
	CABundle []byte // PEM certificates clients should trust
	CertPEM  []byte
	KeyPEM   []byte
	NotAfter time.Time // of the serving certificate
	caCert   []byte
	caKey    []byte
}

// TLSCertificate is the serving certificate for a tls.Config.
func (b *Bundle) TLSCertificate() (*tls.Certificate, error) {
	c, err := tls.X509KeyPair(b.CertPEM, b.KeyPEM)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	return &c, nil
}

// Ensure creates the Secret or loads it, renewing whatever is invalid,
// expiring or no longer covers the names. It reports whether it wrote the
// Secret. Two replicas racing are safe: the loser gets a conflict error and
// retries on its next pass, loading the winner's certificate.
func Ensure(ctx context.Context, client kubernetes.Interface, o Options) (*Bundle, bool, error) {
	o = o.withDefaults()
	secrets := client.CoreV1().Secrets(o.Namespace)
	sec, err := secrets.Get(ctx, o.SecretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		b, err := Renew(nil, o)
		if err != nil {
			return nil, false, err
		}
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: o.SecretName, Namespace: o.Namespace,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "runplane"}},
			Type: corev1.SecretTypeTLS,
			Data: b.secretData(),
		}
		if _, err := secrets.Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			return nil, false, fmt.Errorf("creating TLS Secret %s/%s: %w", o.Namespace, o.SecretName, err)
		}
		return b, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading TLS Secret %s/%s: %w", o.Namespace, o.SecretName, err)
	}
	old := fromSecret(sec.Data)
	b, err := Renew(old, o)
	if err != nil {
		return nil, false, err
	}
	if b == old {
		return b, false, nil
	}
	sec = sec.DeepCopy()
	if sec.Data == nil {
		sec.Data = map[string][]byte{}
	}
	for k, v := range b.secretData() {
		sec.Data[k] = v
	}
	if _, err := secrets.Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		return nil, false, fmt.Errorf("updating TLS Secret %s/%s: %w", o.Namespace, o.SecretName, err)
	}
	return b, true, nil
}

func (b *Bundle) secretData() map[string][]byte {
	return map[string][]byte{
		corev1.TLSCertKey:       b.CertPEM,
		corev1.TLSPrivateKeyKey: b.KeyPEM,
		KeyCACert:               b.caCert,
		KeyCAKey:                b.caKey,
		KeyCABundle:             b.CABundle,
	}
}

func fromSecret(d map[string][]byte) *Bundle {
	return &Bundle{CABundle: d[KeyCABundle], CertPEM: d[corev1.TLSCertKey], KeyPEM: d[corev1.TLSPrivateKeyKey],
		caCert: d[KeyCACert], caKey: d[KeyCAKey]}
}

// Renew returns old unchanged (the same pointer) when it is still good, or
// a bundle with a renewed CA and/or serving certificate. old may be nil.
func Renew(old *Bundle, o Options) (*Bundle, error) {
	o = o.withDefaults()
	now := o.Now()
	var ca *x509.Certificate
	var caKey *ecdsa.PrivateKey
	if old != nil {
		ca, caKey = parseCA(old.caCert, old.caKey)
	}
	b := &Bundle{}
	if old != nil {
		*b = *old
	}
	changed := false
	if ca == nil || ca.NotAfter.Sub(now) < o.CAValidity/3 {
		var err error
		if ca, caKey, err = newCA(now, o.CAValidity); err != nil {
			return nil, err
		}
		b.caCert = pemCert(ca.Raw)
		if b.caKey, err = pemKey(caKey); err != nil {
			return nil, err
		}
		changed = true
	}
	bundle := trustBundle(b.caCert, old, now)
	if !bytes.Equal(bundle, b.CABundle) {
		b.CABundle = bundle
		changed = true
	}
	if changed || !servingOK(b, ca, o, now) {
		cert, key, err := issue(ca, caKey, o, now)
		if err != nil {
			return nil, err
		}
		b.CertPEM, b.KeyPEM = cert, key
		changed = true
	}
	if !changed {
		return old, nil
	}
	if leaf, err := parseCert(b.CertPEM); err == nil {
		b.NotAfter = leaf.NotAfter
	}
	return b, nil
}

// trustBundle is the current CA followed by the other still-valid CAs of
// the old bundle, so clients that cached the old bundle keep working while
// the new one propagates.
func trustBundle(current []byte, old *Bundle, now time.Time) []byte {
	out := slices.Clone(current)
	if old == nil {
		return out
	}
	rest := old.CABundle
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return out
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil || now.After(c.NotAfter) || bytes.Contains(current, pem.EncodeToMemory(block)) {
			continue
		}
		out = append(out, pem.EncodeToMemory(block)...)
	}
}

func servingOK(b *Bundle, ca *x509.Certificate, o Options, now time.Time) bool {
	leaf, err := parseCert(b.CertPEM)
	if err != nil {
		return false
	}
	if _, err := tls.X509KeyPair(b.CertPEM, b.KeyPEM); err != nil {
		return false
	}
	if leaf.CheckSignatureFrom(ca) != nil || leaf.NotAfter.Sub(now) < o.RenewBefore || now.Before(leaf.NotBefore) {
		return false
	}
	for _, n := range o.DNSNames {
		if !slices.Contains(leaf.DNSNames, n) {
			return false
		}
	}
	for _, ip := range o.IPAddresses {
		if !slices.ContainsFunc(leaf.IPAddresses, ip.Equal) {
			return false
		}
	}
	b.NotAfter = leaf.NotAfter
	return true
}

func parseCA(certPEM, keyPEM []byte) (*x509.Certificate, *ecdsa.PrivateKey) {
	c, err := parseCert(certPEM)
	if err != nil || !c.IsCA {
		return nil, nil
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, nil
	}
	k, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil || !k.PublicKey.Equal(c.PublicKey) {
		return nil, nil
	}
	return c, k
}

func parseCert(p []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(p)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func newCA(now time.Time, validity time.Duration) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating CA key: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, fmt.Errorf("CA serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("runplane-webhook-ca@%d", now.Unix())},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("creating CA certificate: %w", err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing CA certificate: %w", err)
	}
	return c, key, nil
}

func issue(ca *x509.Certificate, caKey *ecdsa.PrivateKey, o Options, now time.Time) ([]byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating serving key: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, fmt.Errorf("serving serial: %w", err)
	}
	notAfter := now.Add(o.CertValidity)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	cn := "runplane-webhook"
	if len(o.DNSNames) > 0 {
		cn = o.DNSNames[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     o.DNSNames,
		IPAddresses:  o.IPAddresses,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("creating serving certificate: %w", err)
	}
	keyPEM, err := pemKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemCert(der), keyPEM, nil
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func pemKey(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("encoding key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// FileSource serves a certificate from files another party (cert-manager)
// keeps up to date, reloading them when they change.
type FileSource struct {
	CertFile, KeyFile string

	mu      sync.Mutex
	cert    *tls.Certificate
	modTime time.Time
}

// GetCertificate is for tls.Config.GetCertificate.
func (f *FileSource) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return f.Load()
}

// Load returns the current certificate, re-reading the files if they changed.
func (f *FileSource) Load() (*tls.Certificate, error) {
	st, err := os.Stat(f.CertFile)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cert != nil && st.ModTime().Equal(f.modTime) {
		return f.cert, nil
	}
	c, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		if f.cert != nil {
			return f.cert, nil // mid-rotation: keep the last good pair
		}
		return nil, fmt.Errorf("serving certificate %s: %w", f.CertFile, err)
	}
	f.cert, f.modTime = &c, st.ModTime()
	return f.cert, nil
}
