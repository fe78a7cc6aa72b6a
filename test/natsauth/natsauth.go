// Package natsauth runs an embedded nats-server in runplane's operator mode
// (internal/natsaccounts), for the stacks tests and make dev start next to
// a cluster: the queue connects as its user in RUNPLANE; every other client
// (the worker sidecars, with their projected ServiceAccount tokens) comes
// in as the default sentinel and is handed to the queue's callout, which
// places each in an account of its worker's own. The configuration is the
// one the chart's bundled NATS runs (charts/runplane/templates/_nats.tpl
// includes the trust.conf that bootstrapsecret.NATSTrust writes).
package natsauth

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/runplane/runplane/internal/bootstrapsecret"
	"github.com/runplane/runplane/internal/natsaccounts"
)

// Auth is the server's trust: the secret, in a file only this user can
// read (what the chart keeps in a Secret in runplane's namespace), and the
// keys derived from it.
type Auth struct {
	// TrustFile holds the secret (queue.Config.NATSTrustFile).
	TrustFile string
	Trust     *natsaccounts.Trust
}

// Write generates a trust secret and writes it to dir.
func Write(dir string) (Auth, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
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
	return a, nil
}

// Extra is more configuration for a test: JetStream inside the jetstream
// block, Top at the top level.
type Extra struct{ JetStream, Top string }

// Config is the server configuration listening on host (any free port),
// its JetStream and resolver under storeDir, RUNPLANE exporting exports
// (queue.WorkerExports).
func (a Auth) Config(host, storeDir string, exports jwt.Exports, extra Extra) (string, error) {
	trust, err := a.Trust.ServerConfig(filepath.Join(storeDir, "jwt"), exports)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("listen: %q\njetstream { store_dir: %q\n%s }\n%s%s\n",
		net.JoinHostPort(host, "-1"), filepath.Join(storeDir, "jetstream"), extra.JetStream, trust, extra.Top), nil
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
		return nil, fmt.Errorf("nats: not ready for connections")
	}
	return ns, nil
}

// QueueOption connects as the queue's user in RUNPLANE: tests watch the
// queue's streams and Records as the queue sees them.
func (a Auth) QueueOption() (nats.Option, error) {
	userJWT, seed, err := a.Trust.QueueCreds()
	if err != nil {
		return nil, err
	}
	return nats.UserJWTAndSeed(userJWT, string(seed)), nil
}
