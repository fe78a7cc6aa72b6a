package natstls

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"k8s.io/client-go/kubernetes"

	"github.com/runplane/runplane/internal/natsvarz"
	"github.com/runplane/runplane/internal/pki"
)

// reloadSubject is nats-server's serverReloadReqSubj: addressed to one
// server by its ID, it re-reads its configuration file and the files it
// names (the certificate among them) and applies what changed.
const reloadSubject = "$SYS.REQ.SERVER.%s.RELOAD"

// ServerCert is the certificate one server serves, as its VARZ says.
type ServerCert struct {
	ID, Name string
	// Client and Route are the expiry of the certificate of the client
	// port and of the routes (zero: no TLS there).
	Client, Route time.Time
}

// reloadResponse is nats-server's ServerAPIResponse to a RELOAD.
type reloadResponse struct {
	Server struct {
		Name string `json:"name"`
	} `json:"server"`
	Error *struct {
		Code        int    `json:"code"`
		Description string `json:"description"`
	} `json:"error"`
}

// Servers asks every server for its VARZ through sys, a connection of the
// system account's user, and returns the answers that arrive within wait
// (a cluster does not say how many servers it has).
func Servers(ctx context.Context, sys *nats.Conn, wait time.Duration) ([]ServerCert, error) {
	varz, err := natsvarz.Ping(ctx, sys, wait, 0)
	out := make([]ServerCert, 0, len(varz))
	for _, v := range varz {
		out = append(out, ServerCert{ID: v.ID, Name: v.Name, Client: v.TLSNotAfter, Route: v.Cluster.TLSNotAfter})
	}
	if err != nil {
		return out, fmt.Errorf("NATS servers: %w", err)
	}
	return out, nil
}

// Reload asks the server with ID id to reload its configuration.
func Reload(ctx context.Context, sys *nats.Conn, id string) error {
	m, err := sys.RequestWithContext(ctx, fmt.Sprintf(reloadSubject, id), nil)
	if err != nil {
		return fmt.Errorf("NATS reload of %s: %w", id, err)
	}
	var r reloadResponse
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return fmt.Errorf("NATS reload of %s: answer %q: %w", id, m.Data, err)
	}
	if r.Error != nil {
		return fmt.Errorf("NATS reload of %s (%s): %d %s", r.Server.Name, id, r.Error.Code, r.Error.Description)
	}
	return nil
}

// ReloadStale asks every server that serves a certificate other than the
// one expiring at notAfter (its clients' or its routes') to reload, and
// returns the names of those asked. A server whose certificate files are
// not updated yet reloads to the same certificate and is asked again on
// the next pass.
func ReloadStale(ctx context.Context, sys *nats.Conn, notAfter time.Time, wait time.Duration) ([]string, error) {
	servers, err := Servers(ctx, sys, wait)
	var asked []string
	errs := []error{err}
	stale := func(t time.Time) bool { return !t.IsZero() && !t.Equal(notAfter) }
	for _, s := range servers {
		if !stale(s.Client) && !stale(s.Route) {
			continue
		}
		asked = append(asked, s.Name)
		errs = append(errs, Reload(ctx, sys, s.ID))
	}
	slices.Sort(asked)
	return asked, errors.Join(errs...)
}

// Keeper keeps the bundled NATS's TLS Secret (internal/pki: a CA and the
// servers' certificate, renewed by pki's rules; the queue creates it at
// start, so the chart renders no key) and what follows from it: the CA
// bundle clients trust (CAFile, the queue's own; the ConfigMap
// api.NATSCAConfigMap the webhook gives worker sidecars) and the
// certificate each server serves. The servers read the Secret's files,
// which the kubelet updates in place, eventually; a server still serving
// an older certificate is asked to reload (ReloadStale) on every pass
// until it serves the Secret's. Every queue replica runs one: pki.Ensure
// is safe against replicas racing, a reload twice is harmless, and each
// replica keeps its own CAFile current.
type Keeper struct {
	Client kubernetes.Interface
	Secret pki.SecretRef
	// Cert says what the certificate covers (the Services' and the
	// servers' names) and its validity; client authentication is added
	// (routes dial their peers with it).
	Cert pki.Options
	// CAFile, when set, is rewritten with the CA bundle when it changes.
	CAFile string
	// Labels of the CA ConfigMap, published in Secret.Namespace.
	Labels map[string]string
	// Interval between passes (default 1m); Wait bounds how long a pass
	// collects the servers' answers (default 2s).
	Interval, Wait time.Duration
	// Sys is a connection of the system account's user, set before Start;
	// nil: no server is asked anything.
	Sys *nats.Conn
	Log *slog.Logger

	written []byte // the bundle in CAFile
}

// Ensure is a pass without the servers: the Secret created or renewed,
// the CA file and the ConfigMap current. The queue runs it at start,
// before it dials NATS (which waits for the Secret).
func (k *Keeper) Ensure(ctx context.Context) (*pki.Bundle, error) {
	o := k.Cert
	o.ClientAuth = true
	b, _, err := pki.Ensure(ctx, k.Client, k.Secret, o)
	if err != nil {
		return nil, fmt.Errorf("NATS TLS: %w", err)
	}
	// Trust before serving: the CA bundle is out before a server reloads.
	if k.CAFile != "" && !bytes.Equal(b.CABundle, k.written) {
		if err := writeFile(k.CAFile, b.CABundle); err != nil {
			return nil, fmt.Errorf("NATS TLS: %w", err)
		}
		k.written = b.CABundle
	}
	if err := PublishCA(ctx, k.Client, k.Secret.Namespace, b.CABundle, k.Labels); err != nil {
		return nil, fmt.Errorf("NATS TLS: %w", err)
	}
	return b, nil
}

// Start implements manager.Runnable: a pass every Interval until ctx ends.
func (k *Keeper) Start(ctx context.Context) error {
	log := cmp.Or(k.Log, slog.Default())
	tick := time.NewTicker(cmp.Or(k.Interval, time.Minute))
	defer tick.Stop()
	for {
		if err := k.pass(ctx, log); err != nil && ctx.Err() == nil {
			log.Error("keeping the NATS servers' certificate", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// replica keeps its own CA file.
func (k *Keeper) NeedLeaderElection() bool { return false }

func (k *Keeper) pass(ctx context.Context, log *slog.Logger) error {
	b, err := k.Ensure(ctx)
	if err != nil || k.Sys == nil {
		return err
	}
	asked, err := ReloadStale(ctx, k.Sys, b.NotAfter, cmp.Or(k.Wait, 2*time.Second))
	if len(asked) > 0 {
		log.Info("asked NATS servers serving another certificate to reload theirs", "servers", asked, "notAfter", b.NotAfter)
	}
	return err
}

// writeFile replaces path with p at once (a reader never sees half).
func writeFile(path string, p []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".ca-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(p); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
