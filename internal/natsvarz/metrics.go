package natsvarz

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
)

var (
	serversDesc = prometheus.NewDesc("runplane_nats_servers",
		"NATS servers that answered this scrape's VARZ request (a server down or cut off from the others is missing).", nil, nil)
	infoDesc = prometheus.NewDesc("runplane_nats_server_info",
		"1 for each NATS server that answered, by name and version.", []string{"server", "version"}, nil)
	connectionsDesc = prometheus.NewDesc("runplane_nats_connections",
		"Client connections of a NATS server.", []string{"server"}, nil)
	routesDesc = prometheus.NewDesc("runplane_nats_routes",
		"Routes of a NATS server to the others of its cluster.", []string{"server"}, nil)
	slowDesc = prometheus.NewDesc("runplane_nats_slow_consumers_total",
		"Clients a NATS server disconnected as slow consumers since it started.", []string{"server"}, nil)
	memDesc = prometheus.NewDesc("runplane_nats_resident_memory_bytes",
		"Resident memory of a NATS server.", []string{"server"}, nil)
	storeDesc = prometheus.NewDesc("runplane_nats_jetstream_storage_bytes",
		"JetStream data a NATS server stores, by storage (file, memory).", []string{"server", "storage"}, nil)
	storeMaxDesc = prometheus.NewDesc("runplane_nats_jetstream_storage_max_bytes",
		"Bound of runplane_nats_jetstream_storage_bytes (max_file_store, max_memory_store): at it the server refuses writes.", []string{"server", "storage"}, nil)
	certDesc = prometheus.NewDesc("runplane_nats_certificate_expiry_timestamp_seconds",
		"When the certificate a NATS server serves expires (Unix seconds), by listener (client, route).", []string{"server", "listener"}, nil)
)

// Collector reads every server's VARZ at each scrape through Sys and
// reports it. Wait bounds how long a scrape collects answers; Expect, when
// known, ends it as soon as that many servers have answered.
type Collector struct {
	Sys    *nats.Conn
	Wait   time.Duration
	Expect int
	// Log gets, at debug, the answers that could not be read (nil: none).
	Log *slog.Logger
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{serversDesc, infoDesc, connectionsDesc, routesDesc, slowDesc, memDesc, storeDesc, storeMaxDesc, certDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. A scrape that gets no answer
// reports 0 servers (and nothing per server), so "NATS down" is a value,
// not a missing series.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.Wait+time.Second)
	defer cancel()
	// What answered is the measurement: an error is a server that did not,
	// and shows as a lower runplane_nats_servers.
	servers, err := Ping(ctx, c.Sys, c.Wait, c.Expect)
	if err != nil && c.Log != nil {
		c.Log.Debug("NATS VARZ", "answered", len(servers), "err", err)
	}
	ch <- prometheus.MustNewConstMetric(serversDesc, prometheus.GaugeValue, float64(len(servers)))
	for _, v := range servers {
		gauge := func(d *prometheus.Desc, x float64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, x, append([]string{v.Name}, labels...)...)
		}
		gauge(infoDesc, 1, v.Version)
		gauge(connectionsDesc, float64(v.Connections))
		gauge(routesDesc, float64(v.Routes))
		gauge(memDesc, float64(v.Mem))
		ch <- prometheus.MustNewConstMetric(slowDesc, prometheus.CounterValue, float64(v.SlowConsumers), v.Name)
		if s := v.JetStream.Stats; s != nil {
			gauge(storeDesc, float64(s.Store), "file")
			gauge(storeDesc, float64(s.Memory), "memory")
		}
		if cfg := v.JetStream.Config; cfg != nil {
			if cfg.MaxStore > 0 {
				gauge(storeMaxDesc, float64(cfg.MaxStore), "file")
			}
			if cfg.MaxMemory > 0 {
				gauge(storeMaxDesc, float64(cfg.MaxMemory), "memory")
			}
		}
		for listener, t := range map[string]time.Time{"client": v.TLSNotAfter, "route": v.Cluster.TLSNotAfter} {
			if !t.IsZero() {
				gauge(certDesc, float64(t.Unix()), listener)
			}
		}
	}
}
