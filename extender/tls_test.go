package extender

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/extender/config"
)

// servedCert handshakes with a listener serving cfg and returns the
// certificate it presented, verified against the trusted PEM.
func servedCert(t *testing.T, cfg *tls.Config, trusted []byte) *x509.Certificate {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			_ = c.(*tls.Conn).Handshake()
			_ = c.Close()
		}
	}()
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(trusted))
	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	require.NoError(t, err)
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

func TestTLSSelfSigned(t *testing.T) {
	cfg, caPEM, err := servingTLS(context.Background(), config.TLS{Hosts: []string{"localhost", "127.0.0.1"}}, slog.Default())
	require.NoError(t, err)
	leaf := servedCert(t, cfg, caPEM)
	require.Equal(t, []string{"localhost"}, leaf.DNSNames)
}

// TestTLSCertFilesRotate: a certificate rewritten on disk (cert-manager
// renewing it) is served without a restart.
func TestTLSCertFilesRotate(t *testing.T) {
	dir := t.TempDir()
	c := config.TLS{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}
	caPEM, err := WriteSelfSignedCert(c.CertFile, c.KeyFile, []string{"127.0.0.1"})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cfg, _, err := servingTLS(ctx, c, slog.Default())
	require.NoError(t, err)
	first := servedCert(t, cfg, caPEM)

	// The files now hold a certificate from another CA.
	rotatedCA, err := WriteSelfSignedCert(filepath.Join(dir, "new.crt"), filepath.Join(dir, "new.key"), []string{"127.0.0.1"})
	require.NoError(t, err)
	for _, f := range []struct{ from, to string }{{"new.key", "tls.key"}, {"new.crt", "tls.crt"}} {
		b, err := os.ReadFile(filepath.Join(dir, f.from))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f.to), b, 0o600))
	}
	require.Eventually(t, func() bool {
		served, err := cfg.GetCertificate(&tls.ClientHelloInfo{})
		return err == nil && !served.Leaf.Equal(first)
	}, 20*time.Second, 50*time.Millisecond)
	require.False(t, servedCert(t, cfg, rotatedCA).Equal(first))
}

// TestWriteSelfSignedDir: the init container's files make a serving
// configuration the written CA verifies, and its expiry is exported.
func TestWriteSelfSignedDir(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, WriteSelfSignedDir(dir, []string{"localhost", "127.0.0.1"}))
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	require.NoError(t, err)
	cfg, _, err := servingTLS(t.Context(), config.TLS{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	leaf := servedCert(t, cfg, caPEM)
	require.Equal(t, float64(leaf.NotAfter.Unix()), certExpiry(cfg))
	require.WithinDuration(t, time.Now().Add(selfSignedValidity), leaf.NotAfter, time.Hour)

	self, _, err := servingTLS(t.Context(), config.TLS{Hosts: []string{"127.0.0.1"}}, slog.Default())
	require.NoError(t, err)
	require.NotZero(t, certExpiry(self))
	require.Zero(t, certExpiry(&tls.Config{}))
}

// The verbs listener speaks HTTP/2 to a client that offers it (as
// kube-scheduler's does), so concurrent binds share one connection; the
// metrics listener stays on HTTP/1.1.
func TestVerbsServeHTTP2(t *testing.T) {
	cfg, caPEM, err := servingTLS(t.Context(), config.TLS{Hosts: []string{"127.0.0.1"}}, slog.Default())
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	client := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: pool}}}
	for _, tt := range []struct {
		name  string
		cfg   *tls.Config
		proto int
	}{
		{"verbs", verbsTLS(cfg), 2},
		{"metrics", cfg, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			mux := http.NewServeMux()
			mux.HandleFunc("/", func(http.ResponseWriter, *http.Request) {})
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- server(tt.name, mux, l, tt.cfg).Start(ctx) }()
			defer func() { cancel(); assert.NoError(t, <-done) }()
			resp, err := client.Get("https://" + l.Addr().String() + "/")
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, tt.proto, resp.ProtoMajor)
		})
	}
}
