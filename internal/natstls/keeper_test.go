package natstls_test

import (
	"cmp"
	"context"
	"crypto/x509"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/natstls"
	"github.com/runplane/runplane/internal/pki"
	"github.com/runplane/runplane/test/natsauth"
)

const ns = "runplane-system"

// served is the leaf a new connection with c's options gets (as the
// queue's user: the server hands a client without credentials to a
// callout, which this test does not run).
func served(t *testing.T, url string, a natsauth.Auth, c natstls.Client) *x509.Certificate {
	t.Helper()
	cert, err := serve(url, a, c)
	require.NoError(t, err)
	return cert
}

// serve is served's connection; its error is for a caller that polls (a
// server reloading, or a TLS handshake slower than its timeout at load,
// is "not yet").
func serve(url string, a natsauth.Auth, c natstls.Client) (*x509.Certificate, error) {
	opts, err := c.Options()
	if err != nil {
		return nil, err
	}
	userJWT, seed, err := a.Trust.QueueCreds()
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(url, append(opts, nats.UserJWTAndSeed(userJWT, string(seed)), nats.NoReconnect(), nats.Timeout(10*time.Second))...)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	st, err := nc.TLSConnectionState()
	if err != nil {
		return nil, err
	}
	return st.PeerCertificates[0], nil
}

// TestKeeperRotatesWithoutRestart: the keeper renews the Secret's
// certificate; the server, whose files (the Secret's mount) are updated
// later, is asked to reload until it serves the new one. New connections
// get it, the connection made before never drops, and a client that holds
// only the CA bundle of before a CA renewal still verifies the server.
func TestKeeperRotatesWithoutRestart(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	client := fake.NewClientset()
	a, err := natsauth.Write(filepath.Join(dir, "auth"))
	require.NoError(t, err)
	k := &natstls.Keeper{
		Client: client, Secret: pki.SecretRef{Namespace: ns, Name: "runplane-nats-tls"},
		Cert:   pki.Options{DNSNames: []string{natsauth.ServerName}, CAValidity: 3 * time.Hour, CertValidity: time.Hour, RenewBefore: time.Minute},
		CAFile: filepath.Join(dir, "queue-ca.crt"), Wait: 500 * time.Millisecond, Log: slog.New(slog.DiscardHandler),
	}
	// What the kubelet does with the Secret's volume.
	mount := func() *pki.Bundle {
		s, err := client.CoreV1().Secrets(ns).Get(ctx, k.Secret.Name, metav1.GetOptions{})
		require.NoError(t, err)
		b := pki.FromSecretData(s.Data)
		require.NoError(t, a.WriteBundle(b))
		return b
	}
	first, err := k.Ensure(ctx)
	require.NoError(t, err)
	mount()
	srv, err := natsauth.Start(filepath.Join(dir, "nats"), "127.0.0.1", a, jwt.Exports{})
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, api.NATSCAConfigMap, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, string(first.CABundle), cm.Data[api.NATSCAKey], "the CA published for the webhook")

	queueTLS := natstls.Client{CAFile: k.CAFile, ServerName: natsauth.ServerName}
	oldTrust := natstls.Client{CA: first.CABundle, ServerName: natsauth.ServerName}
	require.Equal(t, first.NotAfter, served(t, srv.ClientURL(), a, queueTLS).NotAfter)

	sysOpt, err := a.SystemOption()
	require.NoError(t, err)
	k.Sys, err = nats.Connect(srv.ClientURL(), sysOpt)
	require.NoError(t, err)
	t.Cleanup(k.Sys.Close)
	// A client connected before, watching for drops.
	var drops atomic.Int32
	opts, err := queueTLS.Options()
	require.NoError(t, err)
	asQueue, err := a.QueueOption()
	require.NoError(t, err)
	before, err := nats.Connect(srv.ClientURL(), append(opts, asQueue, nats.DisconnectErrHandler(func(*nats.Conn, error) { drops.Add(1) }))...)
	require.NoError(t, err)
	t.Cleanup(before.Close)

	steps := []struct {
		name string
		cert pki.Options
	}{
		// Due for renewal (and a different expiry: servers are told
		// apart by it).
		{name: "the certificate renewed", cert: pki.Options{CertValidity: 2 * time.Hour, RenewBefore: 3 * time.Hour}},
		// A CA in its last third: a new CA, certified by the old one.
		{name: "the CA renewed", cert: pki.Options{CAValidity: 10 * time.Hour, CertValidity: 90 * time.Minute, RenewBefore: time.Minute}},
	}
	prev := first
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			k.Cert.CAValidity, k.Cert.CertValidity, k.Cert.RenewBefore = cmp.Or(s.cert.CAValidity, k.Cert.CAValidity), s.cert.CertValidity, s.cert.RenewBefore
			next, err := k.Ensure(ctx)
			require.NoError(t, err)
			require.NotEqual(t, prev.NotAfter, next.NotAfter, "not renewed")
			// The files are not updated yet: the server is asked, reloads
			// the same files, and is asked again next time.
			asked, err := natstls.ReloadStale(ctx, k.Sys, next.NotAfter, k.Wait)
			require.NoError(t, err)
			require.Equal(t, []string{srv.Name()}, asked)
			require.Equal(t, prev.NotAfter, served(t, srv.ClientURL(), a, queueTLS).NotAfter, "served before the files changed")

			require.Equal(t, next.CertPEM, mount().CertPEM)
			asked, err = natstls.ReloadStale(ctx, k.Sys, next.NotAfter, k.Wait)
			require.NoError(t, err)
			require.Equal(t, []string{srv.Name()}, asked)
			require.Equal(t, next.NotAfter, served(t, srv.ClientURL(), a, queueTLS).NotAfter, "a new connection gets the renewed certificate")
			require.Equal(t, next.NotAfter, served(t, srv.ClientURL(), a, oldTrust).NotAfter, "a client holding the first CA bundle verifies it")
			servers, err := natstls.Servers(ctx, k.Sys, k.Wait)
			require.NoError(t, err)
			require.Len(t, servers, 1)
			require.True(t, servers[0].Client.Equal(next.NotAfter), "VARZ reports the renewed certificate")
			asked, err = natstls.ReloadStale(ctx, k.Sys, next.NotAfter, k.Wait)
			require.NoError(t, err)
			require.Empty(t, asked, "a current server is left alone")

			// The connection made before the rotation still works.
			require.NoError(t, before.Flush())
			require.Equal(t, int32(0), drops.Load(), "a connection dropped by the reload")
			ca, err := os.ReadFile(k.CAFile)
			require.NoError(t, err)
			require.Equal(t, next.CABundle, ca, "the queue's own CA file")
			prev = next
		})
	}

	t.Run("another replica renewed; this one's pass has the server reload", func(t *testing.T) {
		other := *k
		other.Sys, other.CAFile = nil, ""
		other.Cert.CertValidity, other.Cert.RenewBefore = 80*time.Minute, 5*time.Hour
		next, err := other.Ensure(ctx)
		require.NoError(t, err)
		require.Equal(t, next.CertPEM, mount().CertPEM)
		k.Interval = 100 * time.Millisecond
		loop, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- k.Start(loop) }()
		// A failed handshake (i/o timeout under a whole-tree run's load) is
		// polled again, not a failure from the poll's goroutine.
		require.Eventually(t, func() bool {
			cert, err := serve(srv.ClientURL(), a, queueTLS)
			return err == nil && cert.NotAfter.Equal(next.NotAfter)
		}, 30*time.Second, 50*time.Millisecond)
		stop()
		require.NoError(t, <-done)
		require.NoError(t, before.Flush())
		require.Equal(t, int32(0), drops.Load(), "a connection dropped by the reload")
	})
}
