package queue

import (
	"cmp"

	"github.com/runplane/runplane/internal/natstls"
)

// NATS is the queue's connection to NATS, its trust and the auth callout:
// the nats section of runplane-queue's configuration file but its
// bootstrap (queue/config embeds it as it is), defaulted by Default.
type NATS struct {
	// URL of the NATS server (default nats://127.0.0.1:4222; Run, which
	// does not default, requires one).
	URL string `json:"url,omitempty"`
	// TrustFile holds the secret runplane's NATS trust chain is derived
	// from (internal/natsaccounts; a Secret in runplane's namespace). With
	// it the queue connects as its user in RUNPLANE and serves the auth
	// callout for the worker sidecars (requires RESTConfig); empty: a NATS
	// without auth.
	TrustFile string `json:"trustFile,omitempty"`
	// Client is how every connection to NATS verifies the server (keys
	// caFile, serverName): TLS first, its certificate checked against the
	// CA (a file re-read on each reconnect) and the server name. Zero: a
	// NATS without TLS (tests and benchmarks on a bare nats-server).
	natstls.Client
	// Servers is how many NATS servers answer a VARZ ping, so a scrape's
	// runplane_nats_servers ends once all have instead of waiting its
	// whole bound (0: unknown, every scrape waits 500 ms).
	Servers int `json:"servers,omitempty"`
	// Callout tunes the auth callout.
	Callout CalloutConfig `json:"callout"`
}

// Default fills the zero fields.
func (n *NATS) Default() {
	n.URL = cmp.Or(n.URL, "nats://127.0.0.1:4222")
	n.Callout.Default()
}
