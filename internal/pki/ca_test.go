package pki

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestIssue(t *testing.T) {
	now := time.Now()
	ca, err := NewCA("test-ca", now, 24*time.Hour)
	require.NoError(t, err)
	parsed, err := ParseCA(ca.CertPEM, ca.KeyPEM)
	require.NoError(t, err)
	require.True(t, parsed.Cert.Equal(ca.Cert))
	other, err := NewCA("other", now, time.Hour)
	require.NoError(t, err)
	_, err = ParseCA(ca.CertPEM, other.KeyPEM)
	require.Error(t, err, "a CA with another CA's key")

	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	tests := []struct {
		name  string
		leaf  Leaf
		opts  x509.VerifyOptions
		until time.Time
	}{
		{"serving for a name and an IP", Serving("x", []string{"svc.example", "127.0.0.1"}, time.Hour),
			x509.VerifyOptions{DNSName: "127.0.0.1", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, now.Add(time.Hour)},
		{"client, capped at the CA's expiry", Leaf{Subject: pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}}, Usage: x509.ExtKeyUsageClientAuth, Validity: 48 * time.Hour},
			x509.VerifyOptions{KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, ca.Cert.NotAfter},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			certPEM, keyPEM, err := ca.Issue(tc.leaf, now)
			require.NoError(t, err)
			_, err = tls.X509KeyPair(certPEM, keyPEM)
			require.NoError(t, err)
			c, err := ParseCert(certPEM)
			require.NoError(t, err)
			tc.opts.Roots = pool
			_, err = c.Verify(tc.opts)
			require.NoError(t, err)
			require.WithinDuration(t, tc.until, c.NotAfter, time.Second)
		})
	}
}
