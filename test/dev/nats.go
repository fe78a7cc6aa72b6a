package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/runplane/runplane/queue"
)

// natsAuth is the embedded NATS's auth: the queue's user and the callout
// issuer, as files only this user can read (what the chart keeps in
// Secrets in runplane's namespace).
type natsAuth struct {
	queueUser, queuePassword, queuePasswordFile string
	issuerPub, issuerSeedFile                   string
}

func writeNATSAuth(dir string) (natsAuth, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return natsAuth{}, err
	}
	pw := make([]byte, 24)
	if _, err := rand.Read(pw); err != nil {
		return natsAuth{}, fmt.Errorf("generating the queue's NATS password: %w", err)
	}
	issuer, err := nkeys.CreateAccount()
	if err != nil {
		return natsAuth{}, fmt.Errorf("generating the callout issuer: %w", err)
	}
	seed, err := issuer.Seed()
	if err != nil {
		return natsAuth{}, err
	}
	pub, err := issuer.PublicKey()
	if err != nil {
		return natsAuth{}, err
	}
	a := natsAuth{
		queueUser: "runplane-queue", queuePassword: hex.EncodeToString(pw),
		queuePasswordFile: filepath.Join(dir, "queue-password"),
		issuerPub:         pub, issuerSeedFile: filepath.Join(dir, "issuer.nk"),
	}
	if err := os.WriteFile(a.queuePasswordFile, []byte(a.queuePassword), 0o600); err != nil {
		return natsAuth{}, err
	}
	if err := os.WriteFile(a.issuerSeedFile, seed, 0o600); err != nil {
		return natsAuth{}, err
	}
	return a, nil
}

// natsConfig is the server configuration: the same shape as the chart's
// bundled NATS (charts/runplane/templates/_nats.tpl) and what an operator
// adds to an external NATS. The queue is the only configured user (in the
// RUNPLANE account, with JetStream); every other client is handed to the
// auth callout, which places the users it admits in the same account.
func natsConfig(storeDir string, a natsAuth) string {
	return fmt.Sprintf(`listen: "127.0.0.1:-1"
jetstream { store_dir: %q }
accounts {
  %[2]s { jetstream: enabled, users: [ { user: %[3]q, password: %[4]q } ] }
}
authorization {
  auth_callout { issuer: %[5]q, account: %[2]s, auth_users: [ %[3]q ] }
}
`, storeDir, queue.DefaultCalloutAccount, a.queueUser, a.queuePassword, a.issuerPub)
}

// startNATS runs the embedded server from that configuration, through the
// server's own config parser.
func startNATS(dir string, a natsAuth) (*server.Server, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, []byte(natsConfig(filepath.Join(dir, "jetstream"), a)), 0o600); err != nil {
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
