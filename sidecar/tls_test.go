package sidecar

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/pki"
)

// attempt is what a fake NATS server got on one connection: the bytes on
// the wire, the bytes TLS decrypted (when the handshake succeeded), and
// the handshake's error.
type attempt struct {
	raw, plain []byte
	handshake  error
}

// recordingConn keeps every byte read from the wire.
type recordingConn struct {
	net.Conn
	mu  sync.Mutex
	raw bytes.Buffer
}

func (c *recordingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.raw.Write(p[:n])
	c.mu.Unlock()
	return n, err
}

func (c *recordingConn) bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.raw.Bytes())
}

// fakeINFO is what a nats-server says first (after the handshake with TLS
// first): enough for a client to answer with CONNECT.
const fakeINFO = "INFO {\"server_id\":\"FAKE\",\"server_name\":\"fake\",\"version\":\"2.15.3\",\"proto\":1,\"max_payload\":1048576,\"auth_required\":true,\"tls_required\":true}\r\n"

// fakeNATS listens on loopback as a NATS server would: with cert, it
// expects the client's TLS handshake first and then says INFO inside TLS;
// without, it says INFO in clear at once. Each connection's attempt is
// sent on the returned channel when the client goes (or after 3s: nats.go
// leaves a connection whose handshake failed to the garbage collector).
func fakeNATS(t *testing.T, cert *tls.Certificate) (url string, attempts <-chan attempt) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	ch := make(chan attempt, 64)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
				rc := &recordingConn{Conn: conn}
				var a attempt
				if cert == nil {
					_, _ = io.WriteString(conn, fakeINFO)
					_, _ = io.Copy(io.Discard, rc)
				} else {
					tc := tls.Server(rc, &tls.Config{Certificates: []tls.Certificate{*cert}})
					if a.handshake = tc.Handshake(); a.handshake == nil {
						_, _ = io.WriteString(tc, fakeINFO)
						a.plain, _ = io.ReadAll(tc)
					}
				}
				a.raw = rc.bytes()
				ch <- a
			}()
		}
	}()
	return "nats://" + ln.Addr().String(), ch
}

func keyPair(t *testing.T, certPEM, keyPEM []byte) *tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	return &c
}

// TestTokenGoesOnlyToVerifiedNATS runs the sidecar binary, configured as
// the webhook configures it (runplane's NATS CA and server name), against
// fake servers on loopback standing where DNS or a rogue Service could send
// it: one with a certificate of another CA for the right name, one with a
// certificate of runplane's CA for another name, and a plain NATS that
// says INFO in clear. Each gets a TLS ClientHello first and never a byte
// of the token, in clear or inside TLS; the sidecar retries and keeps
// failing. A server with runplane's CA and name does get the token (what
// the fakes would see if the sidecar did not verify).
func TestTokenGoesOnlyToVerifiedNATS(t *testing.T) {
	sidecarBin, _ := binaries(t)
	e := newEnv(t)
	const name = "runplane-nats.runplane-system.svc"
	rp, err := pki.Renew(nil, pki.Options{Name: "runplane-nats", DNSNames: []string{name}, ClientAuth: true})
	require.NoError(t, err)
	other, err := pki.Renew(nil, pki.Options{Name: "runplane-nats", DNSNames: []string{name}})
	require.NoError(t, err)
	rpCA, err := pki.ParseCA(rp.CACert, rp.CAKey)
	require.NoError(t, err)
	wrongNameCert, wrongNameKey, err := rpCA.Issue(pki.Serving("x", []string{"elsewhere.example", "127.0.0.1"}, time.Hour), time.Now())
	require.NoError(t, err)

	token := "rp-token-" + rand.Text()
	tokFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokFile, []byte(token), 0o600))

	tests := []struct {
		name string
		cert *tls.Certificate
		// gets is true for the one server the token may reach.
		gets bool
	}{
		{name: "another CA, the right name", cert: keyPair(t, other.CertPEM, other.KeyPEM)},
		{name: "runplane's CA, another name", cert: keyPair(t, wrongNameCert, wrongNameKey)},
		{name: "plain NATS saying INFO"},
		{name: "runplane's CA and name", cert: keyPair(t, rp.CertPEM, rp.KeyPEM), gets: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			url, attempts := fakeNATS(t, tc.cert)
			start := e.sidecarProcess(sidecarBin, "w-tls", socketPath(t),
				api.EnvNATSURL+"="+url, api.EnvNATSTokenFile+"="+tokFile,
				api.EnvNATSCA+"="+string(rp.CABundle), api.EnvNATSServerName+"="+name)
			sc := start()
			// Not only at the end of the whole test: it would keep dialing.
			t.Cleanup(func() { _ = sc.Process.Kill() })
			// Two attempts: the sidecar finished one and came back.
			for i := range 2 {
				var a attempt
				select {
				case a = <-attempts:
				case <-time.After(30 * time.Second):
					t.Fatalf("no connection attempt %d reached the fake server", i+1)
				}
				require.NotEmpty(t, a.raw)
				require.Equal(t, byte(0x16), a.raw[0], "the first byte is not a TLS handshake record: the sidecar wrote before TLS")
				seen := bytes.Contains(a.raw, []byte(token)) || bytes.Contains(a.plain, []byte(token))
				if tc.gets {
					require.NoError(t, a.handshake)
					require.True(t, seen, "the verified server got no token: CONNECT %q", a.plain)
					return
				}
				require.False(t, seen, "the token reached a server the sidecar cannot verify")
				require.Empty(t, a.plain, "the sidecar wrote inside an unverified TLS session")
				if tc.cert != nil {
					require.Error(t, a.handshake, "the sidecar completed the handshake with a server it cannot verify")
				}
			}
		})
	}
}
