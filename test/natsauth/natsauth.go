// Package natsauth runs an embedded nats-server with runplane's auth
// callout, for the stacks tests and make dev start next to a cluster: the
// queue connects as the one configured user, every other client (the worker
// sidecars, with their projected ServiceAccount tokens) is handed to the
// queue's callout, which admits each as a user allowed only its worker's
// subjects. The configuration has the shape of the chart's bundled NATS
// (charts/runplane/templates/_nats.tpl).
package natsauth

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/runplane/runplane/queue"
)

// Auth is the server's auth: the queue's user and the callout issuer, as
// files only this user can read (what the chart keeps in Secrets in
// runplane's namespace).
type Auth struct {
	QueueUser, QueuePassword, QueuePasswordFile string
	IssuerPub, IssuerSeedFile                   string
}

// Write generates the queue's password and the callout issuer's account
// nkey and writes them to dir.
func Write(dir string) (Auth, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Auth{}, err
	}
	pw := make([]byte, 24)
	if _, err := rand.Read(pw); err != nil {
		return Auth{}, fmt.Errorf("generating the queue's NATS password: %w", err)
	}
	issuer, err := nkeys.CreateAccount()
	if err != nil {
		return Auth{}, fmt.Errorf("generating the callout issuer: %w", err)
	}
	seed, err := issuer.Seed()
	if err != nil {
		return Auth{}, err
	}
	pub, err := issuer.PublicKey()
	if err != nil {
		return Auth{}, err
	}
	a := Auth{
		QueueUser: "runplane-queue", QueuePassword: hex.EncodeToString(pw),
		QueuePasswordFile: filepath.Join(dir, "queue-password"),
		IssuerPub:         pub, IssuerSeedFile: filepath.Join(dir, "issuer.nk"),
	}
	if err := os.WriteFile(a.QueuePasswordFile, []byte(a.QueuePassword), 0o600); err != nil {
		return Auth{}, err
	}
	if err := os.WriteFile(a.IssuerSeedFile, seed, 0o600); err != nil {
		return Auth{}, err
	}
	return a, nil
}

// Callout is the queue's side of the callout.
func (a Auth) Callout() queue.CalloutConfig {
	return queue.CalloutConfig{IssuerSeedFile: a.IssuerSeedFile, Account: queue.DefaultCalloutAccount}
}

// Queue sets the queue's NATS URL, credentials and callout in cfg.
func (a Auth) Queue(cfg *queue.Config, url string) {
	cfg.NATSURL, cfg.NATSUser, cfg.NATSPasswordFile, cfg.Callout = url, a.QueueUser, a.QueuePasswordFile, a.Callout()
}

// Config is the server configuration listening on host (any free port).
// The queue is the only configured user (in the RUNPLANE account, with
// JetStream); every other client is handed to the auth callout, which
// places the users it admits in the same account.
func Config(host, storeDir string, a Auth) string {
	return fmt.Sprintf(`listen: %q
jetstream { store_dir: %q }
accounts {
  %[3]s { jetstream: enabled, users: [ { user: %[4]q, password: %[5]q } ] }
}
authorization {
  auth_callout { issuer: %[6]q, account: %[3]s, auth_users: [ %[4]q ] }
}
`, net.JoinHostPort(host, "-1"), storeDir, queue.DefaultCalloutAccount, a.QueueUser, a.QueuePassword, a.IssuerPub)
}

// Start runs the embedded server from that configuration (written to dir,
// read back through the server's own config parser), listening on host.
func Start(dir, host string, a Auth) (*server.Server, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, []byte(Config(host, filepath.Join(dir, "jetstream"), a)), 0o600); err != nil {
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
