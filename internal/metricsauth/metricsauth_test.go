package metricsauth

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoopback(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:8092": true, "127.0.0.2:1": true, "[::1]:8092": true,
		":8092": false, "0.0.0.0:8092": false, "10.0.0.1:8092": false, "[::]:8092": false,
		"localhost:8092": false, // a name: whatever the Pod's resolver says
		"127.0.0.1":      false,
	} {
		err := Loopback(addr)
		assert.Equal(t, ok, err == nil, "%s: %v", addr, err)
	}
}

// TestSelfSignedTLS: the certificate serves host and 127.0.0.1, chains to
// the CA it carries, and has an ECDSA key (an RSA one cost ~0.1–0.5 s of
// CPU a start).
func TestSelfSignedTLS(t *testing.T) {
	for _, host := range []string{"extender", ""} {
		cfg, err := SelfSignedTLS(host)
		require.NoError(t, err)
		require.Len(t, cfg.Certificates, 1)
		chain := cfg.Certificates[0].Certificate
		require.Len(t, chain, 2, "the leaf and its CA")
		leaf, err := x509.ParseCertificate(chain[0])
		require.NoError(t, err)
		ca, err := x509.ParseCertificate(chain[1])
		require.NoError(t, err)
		assert.IsType(t, &ecdsa.PublicKey{}, leaf.PublicKey)
		roots := x509.NewCertPool()
		roots.AddCert(ca)
		names := []string{"127.0.0.1"}
		if host != "" {
			names = append(names, host)
		}
		for _, name := range names {
			_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name})
			assert.NoError(t, err, "host %q: %s", host, name)
		}
		assert.Equal(t, []string{"http/1.1"}, cfg.NextProtos)
	}
}

// TestManagerOptionsGiveTheCertificate: without a keeper, a served
// metrics endpoint gets SelfSignedTLS's certificate through
// GetCertificate, which keeps controller-runtime from making an RSA one;
// an endpoint that is off makes none.
func TestManagerOptionsGiveTheCertificate(t *testing.T) {
	for bind, served := range map[string]bool{"127.0.0.1:0": true, "0": false} {
		opts, err := ManagerOptions(bind, nil)
		require.NoError(t, err)
		var c tls.Config
		for _, o := range opts.TLSOpts {
			o(&c)
		}
		assert.Equal(t, []string{"http/1.1"}, c.NextProtos)
		if !served {
			assert.Nil(t, c.GetCertificate, bind)
			continue
		}
		require.NotNil(t, c.GetCertificate, bind)
		cert, err := c.GetCertificate(&tls.ClientHelloInfo{})
		require.NoError(t, err)
		leaf, err := x509.ParseCertificate(cert.Certificate[0])
		require.NoError(t, err)
		assert.IsType(t, &ecdsa.PublicKey{}, leaf.PublicKey)
	}
}
