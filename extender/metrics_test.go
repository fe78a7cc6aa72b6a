package extender

import (
	"crypto/tls"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/runplane/runplane/extender/ledger"
	"github.com/runplane/runplane/internal/metricsauth"
)

// TestBindFailureReasonsStartAtZero: every bind failure reason has a series
// at 0 before the first failure, so that failure is an increase (the
// RunplaneExtenderBindFailures alert and the dashboard see it) and the
// dashboard shows 0, not no data.
func TestBindFailureReasonsStartAtZero(t *testing.T) {
	m := newMetrics()
	r := prometheus.NewPedanticRegistry()
	r.MustRegister(m.bindFailures)
	n, err := testutil.GatherAndCount(r, "runplane_extender_bind_failures_total")
	require.NoError(t, err)
	require.Equal(t, len(bindFailureReasons()), n)
	for _, r := range bindFailureReasons() {
		require.Zero(t, testutil.ToFloat64(m.bindFailures.WithLabelValues(r)), r)
	}
}

// TestMetricsInControllerRuntimesRegistry: the extender's series are in
// controller-runtime's registry, the one /metrics serves; a second
// extender of the process (make dev restarting one) shares them, and the
// scrape-time gauges read the newest extender's ledger and certificates.
func TestMetricsInControllerRuntimesRegistry(t *testing.T) {
	m1, err := newMetrics().registered()
	require.NoError(t, err)
	require.NoError(t, scrapeGauges(ledger.New(ledger.Options{}), map[string]*tls.Config{"verbs": {}}))
	served, err := metricsauth.SelfSignedTLS("extender")
	require.NoError(t, err)
	m2, err := newMetrics().registered()
	require.NoError(t, err, "a second extender in the process")
	require.NoError(t, scrapeGauges(ledger.New(ledger.Options{}), map[string]*tls.Config{"verbs": served}))
	// A third whose Start fails before it serves registers its series but
	// not its gauges: the second's certificate is still the one read.
	_, err = newMetrics().registered()
	require.NoError(t, err)

	require.Same(t, m1.binds, m2.binds, "one series per process")
	m2.binds.Inc()
	m2.leader.Set(1)
	for name, want := range map[string]int{
		"runplane_extender_binds_total":                          1,
		"runplane_extender_leader":                               1,
		"runplane_extender_bind_failures_total":                  len(bindFailureReasons()),
		"runplane_extender_certificate_expiry_timestamp_seconds": 1,
		"runplane_build_info":                                    1,
	} {
		n, err := testutil.GatherAndCount(ctrlmetrics.Registry, name)
		require.NoError(t, err, name)
		require.Equal(t, want, n, name)
	}
	require.Equal(t, 1.0, testutil.ToFloat64(m1.leader))
	mfs, err := ctrlmetrics.Registry.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "runplane_extender_certificate_expiry_timestamp_seconds" {
			require.Equal(t, certExpiry(served), mf.GetMetric()[0].GetGauge().GetValue(), "the newest extender's certificate")
		}
	}
}
