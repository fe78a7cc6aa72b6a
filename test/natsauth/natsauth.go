// Package natsauth runs an embedded nats-server in runplane's operator mode
// (internal/natsaccounts), for the stacks tests and make dev start next to
// a cluster: the queue connects as its user in RUNPLANE; every other client
// (the worker sidecars, with their projected ServiceAccount tokens) comes
// in as the default sentinel and is handed to the queue's callout, which
// places each in an account of its worker's own. The configuration is the
// one the chart's bundled NATS runs (charts/runplane/templates/_nats.tpl
// includes the trust.conf that bootstrapsecret.NATSTrust writes), TLS
// included: the server's certificate comes from internal/pki, clients speak
// TLS first and verify it against its CA and ServerName (internal/natstls),
// as every runplane component does against the chart's NATS.
package natsauth

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/bootstrapsecret"
	"github.com/runplane/runplane/internal/natsaccounts"
	"github.com/runplane/runplane/internal/natssync"
	"github.com/runplane/runplane/internal/natstls"
	"github.com/runplane/runplane/internal/pki"
	"github.com/runplane/runplane/test/kit"
)

// ServerName is the name the server's certificate carries and every
// client verifies, whatever address it dials (the chart's is its Service's
// name; here the server listens on an IP).
const ServerName = "runplane-nats." + api.DefaultNamespace + ".svc"

// Auth is the server's trust: the secret, in a file only this user can
// read (what the chart keeps in a Secret in runplane's namespace), and the
// keys derived from it.
type Auth struct {
	// TrustFile holds the secret (queue.NATS.TrustFile).
	TrustFile string
	Trust     *natsaccounts.Trust
	// TLS are the server's certificate files, and Client how a client
	// verifies it (queue.NATS.Client; the CA file is the CA bundle, what
	// the webhook gives sidecars).
	TLS    natstls.ServerFiles
	Client natstls.Client
}

// Write generates a trust secret and a CA and server certificate, and
// writes them to dir.
func Write(dir string) (Auth, error) {
	if err := os.MkdirAll(filepath.Join(dir, "tls"), 0o700); err != nil {
		return Auth{}, err
	}
	secret, err := natsaccounts.NewSecret()
	if err != nil {
		return Auth{}, err
	}
	t, err := natsaccounts.Derive(secret)
	if err != nil {
		return Auth{}, err
	}
	a := Auth{TrustFile: filepath.Join(dir, bootstrapsecret.TrustSecretKey), Trust: t}
	if err := os.WriteFile(a.TrustFile, secret, 0o600); err != nil {
		return Auth{}, err
	}
	a.TLS = natstls.ServerFiles{Cert: filepath.Join(dir, "tls", "tls.crt"), Key: filepath.Join(dir, "tls", "tls.key"), CA: filepath.Join(dir, "tls", "ca.crt")}
	a.Client = natstls.Client{CAFile: a.TLS.CA, ServerName: ServerName}
	b, err := pki.Renew(nil, CertOptions())
	if err != nil {
		return Auth{}, err
	}
	if err := a.WriteBundle(b); err != nil {
		return Auth{}, err
	}
	return a, nil
}

// CertOptions are what the server's certificate covers: ServerName, for
// clients, and loopback, which StartCluster's routes dial.
func CertOptions() pki.Options {
	return pki.Options{Name: "runplane-nats", DNSNames: []string{ServerName}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ClientAuth: true}
}

// WriteBundle writes b as the server's certificate, key and CA bundle (what
// the kubelet does with the chart's TLS Secret); a running server serves
// it once it reloads its configuration.
func (a Auth) WriteBundle(b *pki.Bundle) error {
	for f, p := range map[string][]byte{a.TLS.Cert: b.CertPEM, a.TLS.Key: b.KeyPEM, a.TLS.CA: b.CABundle} {
		if err := os.WriteFile(f, p, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// Extra is more configuration for a test: JetStream inside the jetstream
// block, Top at the top level.
type Extra struct{ JetStream, Top string }

// Config is the server configuration listening on host (any free port),
// its JetStream and resolver under storeDir, RUNPLANE exporting exports
// (queue.WorkerExports). JetStream syncs as the chart's NATS does
// (natssync.Default: fsync before every acknowledgement).
func (a Auth) Config(host, storeDir string, exports jwt.Exports, extra Extra) (string, error) {
	trust, err := a.Trust.ServerConfig(filepath.Join(storeDir, "jwt"), exports)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("listen: %q\njetstream { store_dir: %q\n%s\n%s }\n%s%s%s\n",
		net.JoinHostPort(host, "-1"), filepath.Join(storeDir, "jetstream"), natssync.Config(natssync.Default), extra.JetStream,
		natstls.ServerConfig(a.TLS), trust, extra.Top), nil
}

// Start runs the embedded server from that configuration (written to dir,
// read back through the server's own config parser), listening on host.
func Start(dir, host string, a Auth, exports jwt.Exports) (*server.Server, error) {
	return StartWith(dir, host, a, exports, Extra{})
}

// StartWith is Start with extra configuration.
func StartWith(dir, host string, a Auth, exports jwt.Exports, extra Extra) (*server.Server, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	text, err := a.Config(host, dir, exports, extra)
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		return nil, err
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		return nil, fmt.Errorf("nats config: %w", err)
	}
	opts.NoSigs, opts.NoLog = true, true
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(15 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("nats: not ready for connections (configuration %s)", conf)
	}
	return ns, nil
}

// StartCluster runs n embedded servers of one JetStream cluster, as the
// chart's bundled NATS with nats.bundled.replicas n: server_name n<i>,
// every server listing every route (ports picked free a moment before),
// routes TLS from their first byte with both sides verified
// (natstls.RouteConfig). Unlike the chart, routes carry no password: the
// kit listens on loopback only. Each server keeps its store under
// dir/n<i>; it returns once every server accepts clients, is routed to the
// others and JetStream's meta leader sees them all online.
func StartCluster(dir string, a Auth, exports jwt.Exports, n int) ([]*server.Server, error) {
	return StartClusterWith(dir, a, exports, n, Extra{})
}

// StartClusterWith is StartCluster with extra configuration for every
// server (extra.Top after the cluster block).
func StartClusterWith(dir string, a Auth, exports jwt.Exports, n int, extra Extra) ([]*server.Server, error) {
	const host = "127.0.0.1"
	ports, err := kit.FreePorts(host, n)
	if err != nil {
		return nil, err
	}
	addrs, routes := make([]string, n), make([]string, n)
	for i, port := range ports {
		addrs[i] = net.JoinHostPort(host, strconv.Itoa(port))
		routes[i] = strconv.Quote("nats-route://" + addrs[i])
	}
	servers := make([]*server.Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		// Together: a clustered server waits for its peers' routes.
		wg.Go(func() {
			top := fmt.Sprintf("server_name: n%d\ncluster {\n  name: runplane\n  listen: %q\n%s  routes: [%s]\n}\n",
				i, addrs[i], natstls.RouteConfig(a.TLS), strings.Join(routes, ", "))
			servers[i], errs[i] = StartWith(filepath.Join(dir, fmt.Sprintf("n%d", i)), host, a, exports, Extra{JetStream: extra.JetStream, Top: top + extra.Top})
		})
	}
	wg.Wait()
	stop := func() {
		for _, s := range servers {
			if s != nil {
				s.Shutdown()
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		stop()
		return nil, fmt.Errorf("nats cluster: %w", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		// The meta leader must count every peer online (with its stats):
		// before, a stream of n replicas finds "no suitable peers".
		// And each server must have resolved RUNPLANE with its JetStream:
		// before, a client connected there is told "JetStream not enabled
		// for account" (1 whole-tree run in 3 at load ~20).
		current, online := 0, 0
		for _, s := range servers {
			if s.JetStreamIsCurrent() && s.NumRoutes() >= n-1 && jetStreamEnabled(s, a.Trust.Runplane.Pub) {
				current++
			}
			if s.JetStreamIsLeader() {
				online = len(s.JetStreamClusterPeers())
			}
		}
		if current == n && online == n {
			return servers, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	return nil, fmt.Errorf("nats cluster of %d: no JetStream meta leader seeing every server online within 30s", n)
}

// jetStreamEnabled reports whether s has resolved account pub with
// JetStream on.
func jetStreamEnabled(s *server.Server, pub string) bool {
	acc, err := s.LookupAccount(pub)
	return err == nil && acc.JetStreamEnabled()
}

// ClientURLs is the comma-separated client URL list of servers, what a
// client (nats.Connect) takes to reach any of them.
func ClientURLs(servers []*server.Server) string {
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = s.ClientURL()
	}
	return strings.Join(urls, ",")
}

// QueueOption connects as the queue's user in RUNPLANE (with TLSOption):
// tests watch the queue's streams and Records as the queue sees them.
func (a Auth) QueueOption() (nats.Option, error) {
	userJWT, seed, err := a.Trust.QueueCreds()
	if err != nil {
		return nil, err
	}
	return options(a.TLSOption(), nats.UserJWTAndSeed(userJWT, string(seed))), nil
}

// SystemOption connects as the queue's user in SYS (with TLSOption).
func (a Auth) SystemOption() (nats.Option, error) {
	userJWT, seed, err := a.Trust.SystemCreds()
	if err != nil {
		return nil, err
	}
	return options(a.TLSOption(), nats.UserJWTAndSeed(userJWT, string(seed))), nil
}

// TLSOption is what every client of the server needs: TLS first, the
// server's certificate verified against the CA and ServerName.
func (a Auth) TLSOption() nats.Option {
	opts, err := a.Client.Options()
	if err != nil {
		return func(*nats.Options) error { return err }
	}
	return options(opts...)
}

// options applies several options as one.
func options(opts ...nats.Option) nats.Option {
	return func(o *nats.Options) error {
		for _, opt := range opts {
			if err := opt(o); err != nil {
				return err
			}
		}
		return nil
	}
}
