package natsvarz_test

import (
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/natsvarz"
	"github.com/runplane/runplane/internal/pki"
	"github.com/runplane/runplane/test/natsauth"
)

// TestCollectorSeesServersGo: against a real three-server cluster in
// runplane's operator mode, the collector (on the system account's
// connection) reports every server, its JetStream bound and the expiry of
// the certificates it serves; when a server stops, the next scrape counts
// one fewer (what the NATSServerDown alert reads), and a scrape that nobody
// answers reports 0, not nothing.
func TestCollectorSeesServersGo(t *testing.T) {
	a, servers := natsauth.Cluster(t, nil, 3)
	opt, err := a.SystemOption()
	require.NoError(t, err)
	// Connected to the first server only: the others are reached through
	// the cluster's routes, as the queue reaches them through the Service.
	sys, err := nats.Connect(servers[0].ClientURL(), opt, nats.DontRandomize())
	require.NoError(t, err)
	t.Cleanup(sys.Close)

	c := &natsvarz.Collector{Sys: sys, Wait: 2 * time.Second, Expect: 3}
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	assert.Empty(t, problems, "promlint")

	require.Equal(t, 3.0, gauge(t, reg, "runplane_nats_servers", nil))
	pem, err := os.ReadFile(a.TLS.Cert)
	require.NoError(t, err)
	crt, err := pki.ParseCert(pem)
	require.NoError(t, err)
	for _, s := range servers {
		assert.Equal(t, float64(s.JetStreamConfig().MaxStore), gauge(t, reg, "runplane_nats_jetstream_storage_max_bytes",
			map[string]string{"server": s.Name(), "storage": "file"}), s.Name())
		client := gauge(t, reg, "runplane_nats_certificate_expiry_timestamp_seconds", map[string]string{"server": s.Name(), "listener": "client"})
		route := gauge(t, reg, "runplane_nats_certificate_expiry_timestamp_seconds", map[string]string{"server": s.Name(), "listener": "route"})
		assert.Equal(t, float64(crt.NotAfter.Unix()), client, "%s: client certificate", s.Name())
		assert.Equal(t, client, route, "%s: the routes serve the same certificate", s.Name())
	}

	servers[2].Shutdown()
	require.Eventually(t, func() bool { return gauge(t, reg, "runplane_nats_servers", nil) == 2 }, 20*time.Second, 100*time.Millisecond)

	servers[1].Shutdown()
	servers[0].Shutdown()
	c.Wait = 200 * time.Millisecond
	require.Equal(t, 0.0, gauge(t, reg, "runplane_nats_servers", nil), "nobody answers: 0 servers, still a series")
}

// gauge is the value of the series of family name with labels (all of
// them), failing when there is none.
func gauge(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if matches(m, labels) {
				if m.GetCounter() != nil {
					return m.GetCounter().GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
	}
	require.Failf(t, "no series", "%s%v", name, labels)
	return 0
}

func matches(m *dto.Metric, labels map[string]string) bool {
	got := map[string]string{}
	for _, l := range m.GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	for k, v := range labels {
		if got[k] != v {
			return false
		}
	}
	return true
}
