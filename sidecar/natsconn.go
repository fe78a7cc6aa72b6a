package sidecar

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runplane/runplane/internal/natsconn"
)

// natsOptions are the sidecar's connect options. Its credential is the
// projected ServiceAccount token in cfg.NATSTokenFile, which nats-server
// hands to runplane's auth callout; the callout answers with a NATS user
// allowed exactly this worker's subjects, expiring with the token. The file
// is read again on every (re)connect: the kubelet rewrites it before it
// expires, the server closes the connection when the user expires, and the
// reconnect presents the new token. An unreadable file at start is an
// error; later it is logged (the connect is then refused and retried).
// With a CA (Config.NATSCA) every connection is TLS first and the server
// proves runplane's CA and the configured name before CONNECT carries the
// token: a server DNS or a Service sent the sidecar to instead gets a
// failed handshake, never the token.
func (s *Sidecar) natsOptions() ([]nats.Option, error) {
	tlsOpts, err := s.cfg.natsTLS().Options()
	if err != nil {
		return nil, err
	}
	// The queue's NATS may start after the worker: keep trying (readiness
	// says whether we are connected), and leave a silent server in seconds.
	opts := append(natsconn.Options("runplane-sidecar/"+s.cfg.WorkerNamespace+"/"+s.cfg.Pool+"/"+s.cfg.WorkerName, 500*time.Millisecond, s.log),
		// A refusal while the callout is briefly away (a queue rollout) or
		// the token is being rotated must not end the reconnects for good.
		nats.IgnoreAuthErrorAbort(),
		nats.CustomInboxPrefix(s.inbox),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				s.log.Warn("NATS", "subject", sub.Subject, "err", err)
				return
			}
			s.log.Warn("NATS", "err", err)
		}),
	)
	// Why a (re)connect fails (a certificate that does not verify, a
	// refused token), once per change: retries come every half second.
	var lastErr atomic.Pointer[string]
	opts = append(opts, nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
		msg := err.Error()
		if prev := lastErr.Swap(&msg); prev == nil || *prev != msg {
			s.log.Warn("NATS connect failed; retrying", "err", err)
		}
	}))
	opts = append(opts, tlsOpts...)
	if s.cfg.NATSTokenFile == "" {
		return opts, nil
	}
	if _, err := readToken(s.cfg.NATSTokenFile); err != nil {
		return nil, err
	}
	return append(opts, nats.TokenHandler(func() string {
		tok, err := readToken(s.cfg.NATSTokenFile)
		if err != nil {
			s.log.Error("NATS token unreadable; the connect will be refused", "err", err)
		}
		return tok
	})), nil
}

// jetStream is the sidecar's JetStream context: in runplane's NATS the
// worker's account reaches its consumer and bucket only under the prefix
// the webhook sets (Config.JSAPIPrefix, api.WorkerJSAPIPrefix); without
// one (a NATS without accounts, tests and benchmarks) the API is the plain
// one.
func (s *Sidecar) jetStream(nc *nats.Conn) (jetstream.JetStream, error) {
	if s.cfg.JSAPIPrefix == "" {
		return jetstream.New(nc)
	}
	return jetstream.NewWithAPIPrefix(nc, s.cfg.JSAPIPrefix)
}

func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the NATS token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("reading the NATS token: %s is empty", path)
	}
	return tok, nil
}
