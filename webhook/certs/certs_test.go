package certs

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func verify(t *testing.T, b *Bundle, name string, at time.Time) {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b.CABundle) {
		t.Fatal("CA bundle holds no certificate")
	}
	leaf, err := parseCert(b.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Fatalf("serving certificate does not verify for %s at %s: %v", name, at, err)
	}
	if _, err := b.TLSCertificate(); err != nil {
		t.Fatal(err)
	}
}

func countCerts(p []byte) int {
	n := 0
	for {
		var block *pem.Block
		if block, p = pem.Decode(p); block == nil {
			return n
		}
		n++
	}
}

func TestRenew(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	o := Options{
		DNSNames: []string{"runplane-webhook.runplane-system.svc"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		CAValidity: 300 * 24 * time.Hour, CertValidity: 30 * 24 * time.Hour, RenewBefore: 10 * 24 * time.Hour,
		Now: func() time.Time { return now },
	}
	first, err := Renew(nil, o)
	if err != nil {
		t.Fatal(err)
	}
	verify(t, first, o.DNSNames[0], now)
	if got := first.NotAfter; !got.Equal(now.Add(o.CertValidity).Truncate(time.Second)) {
		t.Errorf("NotAfter %s", got)
	}

	// Loaded again (a restart): nothing changes.
	loaded := fromSecret(first.secretData())
	if b, err := Renew(loaded, o); err != nil || b != loaded {
		t.Fatalf("a good bundle was renewed (err %v)", err)
	}

	// Shortly before RenewBefore: still kept; after it: a new leaf, same CA.
	now = now.Add(o.CertValidity - o.RenewBefore - time.Hour)
	if b, _ := Renew(loaded, o); b != loaded {
		t.Fatal("renewed too early")
	}
	now = now.Add(2 * time.Hour)
	renewed, err := Renew(loaded, o)
	if err != nil || renewed == loaded {
		t.Fatalf("not renewed inside RenewBefore (err %v)", err)
	}
	if !bytes.Equal(renewed.caCert, first.caCert) || bytes.Equal(renewed.CertPEM, first.CertPEM) {
		t.Fatal("want a new serving certificate from the same CA")
	}
	verify(t, renewed, o.DNSNames[0], now)

	// A new name to cover: a new leaf.
	o2 := o
	o2.DNSNames = append([]string{}, o.DNSNames[0], "other.example")
	named, err := Renew(renewed, o2)
	if err != nil || named == renewed {
		t.Fatalf("not reissued for a new name (err %v)", err)
	}
	verify(t, named, "other.example", now)

	// The CA enters its last third: a new CA; the bundle trusts both, so
	// clients holding the old bundle and the new one both work.
	now = now.Add(o.CAValidity * 2 / 3)
	rotated, err := Renew(named, o2)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(rotated.caCert, named.caCert) {
		t.Fatal("CA not rotated")
	}
	if n := countCerts(rotated.CABundle); n != 2 {
		t.Fatalf("bundle holds %d CAs, want the new and the old", n)
	}
	verify(t, rotated, "other.example", now)

	// Once the old CA expired it leaves the bundle.
	now = now.Add(o.CAValidity / 2)
	later, err := Renew(rotated, o2)
	if err != nil {
		t.Fatal(err)
	}
	if n := countCerts(later.CABundle); n != 1 {
		t.Fatalf("bundle holds %d CAs after the old one expired, want 1", n)
	}
}

func TestRenewGarbage(t *testing.T) {
	o := Options{DNSNames: []string{"a.b.svc"}}
	b, err := Renew(&Bundle{CertPEM: []byte("junk"), KeyPEM: []byte("junk"), caCert: []byte("junk"), caKey: []byte("junk")}, o)
	if err != nil {
		t.Fatal(err)
	}
	verify(t, b, "a.b.svc", time.Now())
}

func TestFileSource(t *testing.T) {
	dir := t.TempDir()
	write := func(b *Bundle) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "tls.crt"), b.CertPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "tls.key"), b.KeyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	o := Options{DNSNames: []string{"a.b.svc"}}
	b1, _ := Renew(nil, o)
	write(b1)
	src := &FileSource{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}
	c1, err := src.Load()
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := Renew(nil, o)
	write(b2)
	// Make the change visible even on file systems with coarse mtimes.
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(filepath.Join(dir, "tls.crt"), later, later); err != nil {
		t.Fatal(err)
	}
	c2, err := src.Load()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(c1.Certificate[0], c2.Certificate[0]) {
		t.Fatal("rotated files not reloaded")
	}
}
