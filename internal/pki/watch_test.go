package pki

import (
	"context"
	"crypto/x509"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWatchFilesCert serves the pair on disk and follows it when it is
// rewritten (cert-manager renewing), without a restart.
func TestWatchFilesCert(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca, err := NewCA("ca", time.Now(), time.Hour)
	require.NoError(t, err)
	write := func(cn string) {
		c, k, err := ca.Issue(Serving(cn, []string{cn}, time.Hour), time.Now())
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(keyFile, k, 0o600))
		require.NoError(t, os.WriteFile(certFile, c, 0o600))
	}

	_, err = WatchFiles(certFile, keyFile, nil)
	require.Error(t, err, "no files yet")

	write("first.example")
	var loaded atomic.Pointer[x509.Certificate]
	w, err := WatchFiles(certFile, keyFile, func(c *x509.Certificate) { loaded.Store(c) })
	w.WithWatchInterval(200 * time.Millisecond) // the backstop poll, should the write beat the file watch
	require.NoError(t, err)
	require.Equal(t, "first.example", loaded.Load().Subject.CommonName)
	served := func() string {
		c, err := w.GetCertificate(nil)
		require.NoError(t, err)
		return c.Leaf.Subject.CommonName
	}
	require.Equal(t, "first.example", served())

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Start(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })

	write("second.example")
	require.Eventually(t, func() bool { return served() == "second.example" }, 20*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool { return loaded.Load().Subject.CommonName == "second.example" }, 5*time.Second, 50*time.Millisecond)
}
