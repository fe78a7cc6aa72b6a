// Package natsvarz asks every NATS server for its VARZ through the system
// account ($SYS.REQ.SERVER.PING.VARZ) and reports the answers as
// Prometheus metrics on the queue's /metrics: which servers answer, their
// JetStream store against its bound, their connections and the expiry of
// the certificates they serve. nats-server has no Prometheus endpoint of
// its own and its maintained exporter is not available to this project's
// builds (see the chart README, "NATS metrics"); the queue already holds a
// system-account connection, so the servers are read where their clients
// are, over TLS, and scraped with the queue's RBAC-checked /metrics.
package natsvarz

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// PingSubject is nats-server's serverPingReqSubj for VARZ: every server
// answers it.
const PingSubject = "$SYS.REQ.SERVER.PING.VARZ"

// Varz is the part of nats-server's Varz read here. Decoded by hand:
// importing nats-server's server package for its type would link the whole
// server into the queue.
type Varz struct {
	ID            string    `json:"server_id"`
	Name          string    `json:"server_name"`
	Version       string    `json:"version"`
	Connections   int       `json:"connections"`
	Routes        int       `json:"routes"`
	SlowConsumers int64     `json:"slow_consumers"`
	Mem           int64     `json:"mem"`
	TLSNotAfter   time.Time `json:"tls_cert_not_after"`
	Cluster       struct {
		TLSNotAfter time.Time `json:"tls_cert_not_after"`
	} `json:"cluster"`
	JetStream struct {
		Config *struct {
			MaxMemory int64 `json:"max_memory"`
			MaxStore  int64 `json:"max_storage"`
		} `json:"config"`
		Stats *struct {
			Memory uint64 `json:"memory"`
			Store  uint64 `json:"storage"`
		} `json:"stats"`
	} `json:"jetstream"`
}

// serverAPIResponse is nats-server's ServerAPIResponse carrying a Varz.
type serverAPIResponse struct {
	Server struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"server"`
	Data  *Varz `json:"data"`
	Error *struct {
		Code        int    `json:"code"`
		Description string `json:"description"`
	} `json:"error"`
}

// Ping asks every server for its VARZ through sys, a connection of the
// system account's user, and returns the answers that arrive within wait,
// or as soon as expect have (a cluster does not say how many servers it
// has; 0 waits the whole time).
func Ping(ctx context.Context, sys *nats.Conn, wait time.Duration, expect int) ([]Varz, error) {
	inbox := sys.NewRespInbox()
	ch := make(chan *nats.Msg, 64)
	sub, err := sys.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, fmt.Errorf("NATS VARZ: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }() // the connection may be closed already; nothing to undo then
	if err := sys.PublishRequest(PingSubject, inbox, nil); err != nil {
		return nil, fmt.Errorf("NATS VARZ: %w", err)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var out []Varz
	var errs []error
	for expect <= 0 || len(out) < expect {
		select {
		case <-ctx.Done():
			return out, fmt.Errorf("NATS VARZ: %w", ctx.Err())
		case <-timer.C:
			return out, errors.Join(errs...)
		case m := <-ch:
			var r serverAPIResponse
			switch err := json.Unmarshal(m.Data, &r); {
			case err != nil:
				errs = append(errs, fmt.Errorf("NATS VARZ answer %q: %w", m.Data, err))
			case r.Error != nil || r.Data == nil:
				errs = append(errs, fmt.Errorf("NATS VARZ of %s: %s", r.Server.Name, m.Data))
			default:
				v := *r.Data
				v.ID, v.Name = cmp.Or(v.ID, r.Server.ID), cmp.Or(v.Name, r.Server.Name)
				out = append(out, v)
			}
		}
	}
	return out, errors.Join(errs...)
}
