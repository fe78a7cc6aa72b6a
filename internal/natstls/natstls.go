// Package natstls is verified TLS on every connection to runplane's NATS:
// the client options every runplane component dials with (TLS before
// anything else, the server's certificate verified against runplane's NATS
// CA and a configured name, so a client never writes — least of all its
// credential — to a server that has not proved both), the nats-server
// settings that go with them, the CA's publication (a ConfigMap in
// runplane's namespace, certificates only) that the webhook hands to
// worker sidecars, and the queue's Keeper of the bundled NATS's
// certificate, which renews it (internal/pki) and has every server reload
// it without a restart.
package natstls

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"
)

// Client is how a runplane component verifies NATS. The zero value is a
// NATS without TLS (unit tests on a bare nats-server).
type Client struct {
	// CAFile holds the PEM CAs to trust; it is read again on every
	// (re)connect, so a renewed bundle takes effect without a restart.
	// CA holds them in memory instead (the sidecar's, from its
	// environment). One of them turns TLS on.
	CAFile string `json:"caFile,omitempty"`
	CA     []byte `json:"-"`
	// ServerName is the name the server's certificate must carry, whatever
	// host the URL names (an IP, or a name DNS could send elsewhere).
	ServerName string `json:"serverName,omitempty"`
}

// Enabled reports whether c dials with TLS.
func (c Client) Enabled() bool { return c.CAFile != "" || len(c.CA) > 0 }

// Options are the connect options of c: none without a CA. With one, the
// client starts the TLS handshake as soon as the TCP connection is up
// (nats.TLSHandshakeFirst: the server sends nothing in clear, not even
// INFO) and verifies the server's chain against the CAs and its name
// against ServerName before nats.go writes CONNECT.
func (c Client) Options() ([]nats.Option, error) {
	if !c.Enabled() {
		if c.ServerName != "" {
			return nil, errors.New("NATS TLS: a server name without a CA to verify it with")
		}
		return nil, nil
	}
	if c.ServerName == "" {
		return nil, errors.New("NATS TLS: the server name to verify must be set")
	}
	roots := c.roots
	if _, err := roots(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	return []nats.Option{nats.Secure(cfg), nats.ClientTLSConfig(nil, roots), nats.TLSHandshakeFirst()}, nil
}

func (c Client) roots() (*x509.CertPool, error) {
	p, src := c.CA, "the NATS CA"
	if c.CAFile != "" {
		var err error
		if p, err = os.ReadFile(c.CAFile); err != nil {
			return nil, fmt.Errorf("NATS TLS: %w", err)
		}
		src = c.CAFile
	}
	return ParseCAs(p, src)
}

// ParseCAs is the pool of the PEM certificates in p (named src in errors);
// p must hold at least one and nothing but certificates (a private key in
// a bundle meant for every tenant's Pod is refused, not skipped).
func ParseCAs(p []byte, src string) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	n := 0
	for rest := p; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("NATS TLS: %s holds a %s, not only certificates", src, block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("NATS TLS: %s: %w", src, err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("NATS TLS: %s holds no PEM certificate", src)
	}
	return pool, nil
}

// ServerFiles are where a nats-server reads its certificate (the leaf and
// any chain after it), its key, and the CAs it verifies its routes with.
type ServerFiles struct{ Cert, Key, CA string }

// ServerConfig is the client-port TLS block of nats-server's
// configuration: TLS first (handshake_first: nothing in clear; a client
// that does not start with a TLS handshake gets nothing), no client
// certificates (clients authenticate with JWTs and the callout). The
// chart's templates/_nats.tpl writes the same (a test compares them).
func ServerConfig(f ServerFiles) string {
	return fmt.Sprintf("tls {\n  cert_file: %q\n  key_file: %q\n  handshake_first: true\n}\n", f.Cert, f.Key)
}

// RouteConfig is the TLS block inside a cluster block: a route is TLS
// from its first byte, presents the server's certificate both ways (it
// carries client authentication too) and verifies the peer's against the
// CA bundle; the dialing side also checks the peer's name from its route
// URL.
func RouteConfig(f ServerFiles) string {
	return fmt.Sprintf("tls {\n  cert_file: %q\n  key_file: %q\n  ca_file: %q\n  verify: true\n}\n", f.Cert, f.Key, f.CA)
}
