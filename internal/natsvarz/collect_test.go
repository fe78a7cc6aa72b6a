package natsvarz

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// collectorOf reports fixed answers through Collector.collect.
type collectorOf []Varz

func (a collectorOf) Describe(ch chan<- *prometheus.Desc) { (&Collector{}).Describe(ch) }
func (a collectorOf) Collect(ch chan<- prometheus.Metric) { (&Collector{}).collect(ch, a) }

// TestCollectorSharedServerName: two servers answering with one
// server_name must not make duplicate series (a 500 for the whole /metrics).
func TestCollectorSharedServerName(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectorOf{{ID: "A", Name: "nats-0", Version: "2.10"}, {ID: "B", Name: "nats-0", Version: "2.10"}})
	n, err := testutil.GatherAndCount(reg, "runplane_nats_server_info")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader("# HELP runplane_nats_servers NATS servers that answered this scrape's VARZ request (a server down or cut off from the others is missing).\n# TYPE runplane_nats_servers gauge\nrunplane_nats_servers 2\n"), "runplane_nats_servers"))
}
