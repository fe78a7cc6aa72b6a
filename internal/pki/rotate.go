package pki

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"slices"
	"time"

	"k8s.io/utils/clock"
)

// Options say what a rotated serving certificate covers and when its CA
// and it are renewed.
type Options struct {
	// Name prefixes the CA's name (default runplane) and names a
	// certificate without DNS names.
	Name        string
	DNSNames    []string
	IPAddresses []net.IP
	// CAValidity (default 10 years) and CertValidity (default 1 year).
	CAValidity   time.Duration
	CertValidity time.Duration
	// RenewBefore renews the serving certificate when less than this is
	// left (default a third of CertValidity); the CA is renewed when less
	// than a third of CAValidity is left, keeping the old CA in the bundle.
	RenewBefore time.Duration
	// ClientAuth: the serving certificate also authenticates its holder as
	// a TLS client (a NATS server dials its cluster's routes with it).
	ClientAuth bool
	// Clock decides; nil is the real clock.
	Clock clock.PassiveClock
}

func (o Options) withDefaults() Options {
	if o.Name == "" {
		o.Name = "runplane"
	}
	if o.CAValidity == 0 {
		o.CAValidity = 10 * 365 * 24 * time.Hour
	}
	if o.CertValidity == 0 {
		o.CertValidity = 365 * 24 * time.Hour
	}
	if o.RenewBefore == 0 {
		o.RenewBefore = o.CertValidity / 3
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return o
}

// Bundle is a rotated CA and the serving certificate it signed.
type Bundle struct {
	CABundle []byte // PEM certificates clients should trust
	// CertPEM is the serving certificate, followed by CrossCert while
	// there is one.
	CertPEM []byte
	KeyPEM  []byte
	CACert  []byte
	CAKey   []byte
	// CrossCert is the current CA certified by the one it replaced, until
	// that one expires. Served after the leaf, it lets a client that took
	// the trust bundle before the renewal (and trusts only the old CA: a
	// worker Pod's environment, fixed when the Pod was made) verify the new
	// serving certificate, so a renewed CA is served at once without
	// waiting for every client to learn it.
	CrossCert []byte
	NotAfter  time.Time // of the serving certificate
}

// TLSCertificate is the serving certificate for a tls.Config.
func (b *Bundle) TLSCertificate() (*tls.Certificate, error) {
	c, err := tls.X509KeyPair(b.CertPEM, b.KeyPEM)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	return &c, nil
}

// Renew returns old unchanged (the same pointer) when it is still good, or
// a bundle with a renewed CA and/or serving certificate: the CA when it is
// missing, unusable or in its last third (certified by the old one while
// that is valid: CrossCert); the serving certificate when the CA, bundle
// or cross certificate changed, or it is unusable, expiring within
// RenewBefore or misses a name or usage. old may be nil.
func Renew(old *Bundle, o Options) (*Bundle, error) {
	o = o.withDefaults()
	now := o.Clock.Now()
	b := &Bundle{}
	var ca *CA
	if old != nil {
		*b = *old
		ca, _ = ParseCA(old.CACert, old.CAKey) // unusable means renewed
	}
	changed := false
	if ca == nil || ca.Cert.NotAfter.Sub(now) < o.CAValidity/3 {
		prev := ca
		var err error
		if ca, err = NewCA(fmt.Sprintf("%s-ca@%d", o.Name, now.Unix()), now, o.CAValidity); err != nil {
			return nil, err
		}
		b.CACert, b.CAKey, b.CrossCert = ca.CertPEM, ca.KeyPEM, nil
		if prev != nil && now.Before(prev.Cert.NotAfter) {
			if b.CrossCert, err = prev.certify(ca, now); err != nil {
				return nil, err
			}
		}
		changed = true
	}
	if len(b.CrossCert) > 0 && !crossValid(b.CrossCert, ca, now) {
		b.CrossCert = nil
		changed = true
	}
	if bundle := trustBundle(b.CACert, old, now); !bytes.Equal(bundle, b.CABundle) {
		b.CABundle = bundle
		changed = true
	}
	if changed || !servingOK(b, ca, o, now) {
		validity := o.CertValidity
		// Never the expiry, to the second, of the certificate it replaces:
		// a server tells which one it serves by its expiry alone (NATS's
		// VARZ; natstls.ReloadStale).
		if now.Add(validity).Truncate(time.Second).Equal(b.NotAfter.Truncate(time.Second)) {
			validity -= time.Second
		}
		leaf := Leaf{DNSNames: o.DNSNames, IPAddresses: o.IPAddresses, Usage: x509.ExtKeyUsageServerAuth, ClientAuth: o.ClientAuth, Validity: validity}
		leaf.Subject.CommonName = o.Name
		if len(o.DNSNames) > 0 {
			leaf.Subject.CommonName = o.DNSNames[0]
		}
		var err error
		if b.CertPEM, b.KeyPEM, err = ca.Issue(leaf, now); err != nil {
			return nil, err
		}
		b.CertPEM = append(b.CertPEM, b.CrossCert...)
		changed = true
	}
	if !changed {
		return old, nil
	}
	if leaf, err := ParseCert(b.CertPEM); err == nil {
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

// certify is ca's own certificate (subject, key and key ID) issued by
// old, valid until the earlier of the two expiries: the cross certificate.
func (old *CA) certify(ca *CA, now time.Time) ([]byte, error) {
	notAfter := old.Cert.NotAfter
	if ca.Cert.NotAfter.Before(notAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl, err := template(ca.Cert.Subject, now, notAfter)
	if err != nil {
		return nil, err
	}
	tmpl.KeyUsage = ca.Cert.KeyUsage
	tmpl.BasicConstraintsValid, tmpl.IsCA = true, true
	// The leaf names its issuer by key ID: the cross certificate must
	// carry the new CA's.
	tmpl.SubjectKeyId = ca.Cert.SubjectKeyId
	der, err := x509.CreateCertificate(rand.Reader, tmpl, old.Cert, ca.Key.Public(), old.Key)
	if err != nil {
		return nil, fmt.Errorf("certifying the renewed CA with the old one: %w", err)
	}
	return encodeCert(der), nil
}

// crossValid: p certifies ca and has not expired.
func crossValid(p []byte, ca *CA, now time.Time) bool {
	c, err := ParseCert(p)
	return err == nil && now.Before(c.NotAfter) && ca.Key.PublicKey.Equal(c.PublicKey)
}

func servingOK(b *Bundle, ca *CA, o Options, now time.Time) bool {
	leaf, err := ParseCert(b.CertPEM)
	if err != nil {
		return false
	}
	if _, chain := pem.Decode(b.CertPEM); !bytes.Equal(bytes.TrimSpace(chain), bytes.TrimSpace(b.CrossCert)) {
		return false
	}
	if o.ClientAuth && !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		return false
	}
	if _, err := tls.X509KeyPair(b.CertPEM, b.KeyPEM); err != nil {
		return false
	}
	if leaf.CheckSignatureFrom(ca.Cert) != nil || leaf.NotAfter.Sub(now) < o.RenewBefore || now.Before(leaf.NotBefore) {
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
