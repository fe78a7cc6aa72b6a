// Package natsconn is how every runplane component keeps its NATS
// connection: reconnect for ever (to any server of the cluster) and notice a
// server that went silent — frozen, cut off, its node hung — within seconds
// rather than minutes. The connect options of the queue and the worker
// sidecars start from Options; TLS (internal/natstls) and credentials come
// on top.
package natsconn

import (
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
)

// PingInterval and MaxPingsOutstanding decide how soon a silent server is
// dropped: nats.go pings every PingInterval and gives the connection up at
// the tick that finds more than MaxPingsOutstanding pings unanswered — 2 to
// 3 intervals after the server's last PONG, 6–9 s here — then reconnects
// to another server of the list. nats.go's defaults (2 minutes, 2) left a
// queue replica or sidecar on a server frozen for 20 s waiting out the
// whole freeze (issue 36). 6–9 s is about what the cluster itself needs to
// elect new stream leaders after losing a server (6–11 s,
// test/chaos/README.md): a client comes back when the cluster does, and
// pinging faster would buy nothing. The cost is one PING and one PONG of 6
// bytes each per connection every 3 s: 1,000 sidecars make 333 pings/s
// across the cluster, nothing beside the invocation traffic. Two missed
// pings (at least 6 s of silence) keep a server's GC pause or a PONG queued
// behind a large message from dropping clients.
const (
	PingInterval        = 3 * time.Second
	MaxPingsOutstanding = 2
)

// Options are the liveness and reconnect options every runplane NATS
// connection is made with: name is the connection's name as the server
// shows it, reconnectWait the pause between attempts at the same server,
// log where a lost connection and its reconnect are told (the moment a
// silent server was given up, and which server took over). The first
// connect retries in the background (RetryOnFailedConnect): a component
// may start before its NATS and says so through its readiness.
func Options(name string, reconnectWait time.Duration, log *slog.Logger) []nats.Option {
	return []nats.Option{
		nats.Name(name),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(reconnectWait),
		nats.PingInterval(PingInterval),
		nats.MaxPingsOutstanding(MaxPingsOutstanding),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err != nil { // nil: closed on purpose
				log.Info("NATS disconnected; reconnecting", "server", nc.ConnectedUrlRedacted(), "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("NATS reconnected", "server", nc.ConnectedUrlRedacted())
		}),
	}
}
