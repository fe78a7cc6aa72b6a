package natstls_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/natstls"
	"github.com/runplane/runplane/internal/pki"
)

func bundle(t *testing.T, names ...string) *pki.Bundle {
	t.Helper()
	b, err := pki.Renew(nil, pki.Options{Name: "test-nats", DNSNames: names, ClientAuth: true})
	require.NoError(t, err)
	return b
}

func TestClientOptions(t *testing.T) {
	b := bundle(t, "nats.example")
	dir := t.TempDir()
	file := func(name string, p []byte) string {
		f := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(f, p, 0o600))
		return f
	}
	tests := []struct {
		name   string
		c      natstls.Client
		opts   int
		errHas string
	}{
		{name: "no TLS", c: natstls.Client{}},
		{name: "a name without a CA", c: natstls.Client{ServerName: "nats.example"}, errHas: "without a CA"},
		{name: "a CA without a name", c: natstls.Client{CA: b.CABundle}, errHas: "server name"},
		{name: "a CA in memory", c: natstls.Client{CA: b.CABundle, ServerName: "nats.example"}, opts: 3},
		{name: "a CA file", c: natstls.Client{CAFile: file("ca.crt", b.CABundle), ServerName: "nats.example"}, opts: 3},
		{name: "a missing CA file", c: natstls.Client{CAFile: filepath.Join(dir, "none"), ServerName: "nats.example"}, errHas: "no such file"},
		{name: "a bundle with a key", c: natstls.Client{CA: append(b.CABundle, b.CAKey...), ServerName: "nats.example"}, errHas: "not only certificates"},
		{name: "no certificate", c: natstls.Client{CA: []byte("junk"), ServerName: "nats.example"}, errHas: "no PEM certificate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts, err := tc.c.Options()
			if tc.errHas != "" {
				require.ErrorContains(t, err, tc.errHas)
				return
			}
			require.NoError(t, err)
			require.Len(t, opts, tc.opts)
		})
	}
}

// startServer runs nats-server from conf (written to dir), as the chart
// and test/natsauth do: through the server's own config parser.
func startServer(t *testing.T, dir, conf string) *server.Server {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o700))
	f := filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(f, []byte(conf), 0o600))
	opts, err := server.ProcessConfigFile(f)
	require.NoError(t, err)
	opts.NoLog, opts.NoSigs = true, true
	s, err := server.NewServer(opts)
	require.NoError(t, err)
	s.Start()
	t.Cleanup(s.Shutdown)
	require.True(t, s.ReadyForConnections(10*time.Second))
	return s
}

func writeFiles(t *testing.T, dir string, b *pki.Bundle) natstls.ServerFiles {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o700))
	f := natstls.ServerFiles{Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key"), CA: filepath.Join(dir, "ca.crt")}
	for p, data := range map[string][]byte{f.Cert: b.CertPEM, f.Key: b.KeyPEM, f.CA: b.CABundle} {
		require.NoError(t, os.WriteFile(p, data, 0o600))
	}
	return f
}

// TestRoutesVerifyPeers: two servers with RouteConfig form a cluster, each
// dialing the other by a name its certificate carries and presenting it as
// a client certificate; a peer presenting a certificate of another CA, or
// none, gets no route. The client port speaks TLS first with
// ServerConfig.
func TestRoutesVerifyPeers(t *testing.T) {
	dir := t.TempDir()
	b := bundle(t, "localhost")
	files := writeFiles(t, filepath.Join(dir, "tls"), b)
	conf := func(routes string) string {
		return fmt.Sprintf("listen: \"127.0.0.1:-1\"\n%scluster {\n  name: rp\n  listen: \"127.0.0.1:-1\"\n  %s\n  routes: [%s]\n}\n",
			natstls.ServerConfig(files), natstls.RouteConfig(files), routes)
	}
	a := startServer(t, filepath.Join(dir, "a"), conf(""))
	routeA := a.ClusterAddr().Port
	bSrv := startServer(t, filepath.Join(dir, "b"), conf(fmt.Sprintf("\"nats-route://localhost:%d\"", routeA)))
	require.Eventually(t, func() bool { return a.NumRoutes() > 0 && bSrv.NumRoutes() > 0 }, 10*time.Second, 20*time.Millisecond, "no verified route")

	// A message crosses the route, each client verified TLS first.
	c := natstls.Client{CAFile: files.CA, ServerName: "localhost"}
	opts, err := c.Options()
	require.NoError(t, err)
	sub, err := nats.Connect(a.ClientURL(), opts...)
	require.NoError(t, err)
	defer sub.Close()
	got, err := sub.SubscribeSync("x")
	require.NoError(t, err)
	require.NoError(t, sub.Flush())
	pub, err := nats.Connect(bSrv.ClientURL(), opts...)
	require.NoError(t, err)
	defer pub.Close()
	require.Eventually(t, func() bool {
		require.NoError(t, pub.Publish("x", []byte("over the route")))
		_, err := got.NextMsg(100 * time.Millisecond)
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)

	other := bundle(t, "localhost")
	otherPair, err := tls.X509KeyPair(other.CertPEM, other.KeyPEM)
	require.NoError(t, err)
	ownPair, err := tls.X509KeyPair(b.CertPEM, b.KeyPEM)
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		certs []tls.Certificate
		ok    bool
	}{"another CA's certificate": {certs: []tls.Certificate{otherPair}}, "no certificate": {}, "the servers' own certificate": {certs: []tls.Certificate{ownPair}, ok: true}} {
		t.Run(name, func(t *testing.T) {
			// A TLS route handshakes before anything else (no INFO in
			// clear); the server must refuse the peer's certificate.
			conn, err := net.DialTimeout("tcp", a.ClusterAddr().String(), 5*time.Second)
			require.NoError(t, err)
			defer conn.Close()
			require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(b.CABundle)
			c := tls.Client(conn, &tls.Config{RootCAs: pool, ServerName: "localhost", Certificates: tc.certs})
			err = c.Handshake()
			if err == nil {
				// TLS 1.3: the server's verdict on the client's
				// certificate arrives with the first read (its INFO, when
				// it accepts the peer).
				_, err = c.Read(make([]byte, 1))
			}
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.Error(t, err, "the route port accepted a peer it cannot verify")
		})
	}
}
